"""The docker backend, one module per concern:

* :mod:`.config` -- the container's arguments (a pure function, unit-tested);
* :mod:`.supervise` -- drains, the pids watcher, waiting and killing;
* :mod:`.cleanup` -- removing containers (after a run, at exit, orphans);
* :mod:`.prereqs` -- the one docker client, image and GPU plumbing checks;
* :mod:`.images` -- image names and ``kgrader image build``;
* :mod:`.backend` -- :class:`DockerBackend`, the launch as a flat list of steps.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.config import LABEL, LABEL_OWNER, LABEL_RUN, container_kwargs
    from grader.backends.docker.images import build_command, default_image

_HOME = {"DockerBackend": "backend", "LABEL": "config", "LABEL_OWNER": "config",
         "LABEL_RUN": "config", "container_kwargs": "config", "build_command": "images",
         "default_image": "images"}


def __getattr__(name: str) -> Any:
    """Names on first use: the docker SDK (imported by ``.config``) costs every CLI start
    ~0.1 s otherwise, also where no container is ever made."""
    if name in _HOME:
        return getattr(import_module(f"grader.backends.docker.{_HOME[name]}"), name)
    raise AttributeError(name)


__all__ = [
    "LABEL",
    "LABEL_OWNER",
    "LABEL_RUN",
    "DockerBackend",
    "build_command",
    "container_kwargs",
    "default_image",
]
