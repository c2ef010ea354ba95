"""The docker backend, one module per concern:

* :mod:`.config` -- the container's arguments (a pure function, unit-tested);
* :mod:`.supervise` -- drains, the pids watcher, waiting and killing;
* :mod:`.cleanup` -- removing containers (after a run, at exit, orphans);
* :mod:`.prereqs` -- the one docker client, image and GPU plumbing checks;
* :mod:`.images` -- image names and ``kgrader image build``;
* :mod:`.backend` -- :class:`DockerBackend`, the launch as a flat list of steps.
"""

from grader.backends.docker.backend import DockerBackend
from grader.backends.docker.config import LABEL, LABEL_OWNER, LABEL_RUN, container_kwargs
from grader.backends.docker.images import build_command, default_image

__all__ = [
    "LABEL",
    "LABEL_OWNER",
    "LABEL_RUN",
    "DockerBackend",
    "build_command",
    "container_kwargs",
    "default_image",
]
