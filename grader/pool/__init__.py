"""Warm sandboxes for a grading service: started ahead, each used once, refilled behind.

* :mod:`~grader.pool.turn` -- a warm sandbox's turn at its gate (ready, taken, granted);
* :mod:`~grader.pool.warm` -- one warm sandbox and its one evaluation;
* :mod:`~grader.pool.pool` -- a pool of them for one template, kept full in the background;
* :mod:`~grader.pool.pools` -- pools by template, with the cold path as the fallback
  (``Pools.grade(req)``, the service worker's one call).
"""

from grader.pool.pool import Pool, PoolStats
from grader.pool.pools import Pools
from grader.pool.turn import WarmTurn
from grader.pool.warm import TEMPLATE_FIELDS, WarmSandbox, template_key

__all__ = ["TEMPLATE_FIELDS", "Pool", "PoolStats", "Pools", "WarmSandbox", "WarmTurn", "template_key"]
