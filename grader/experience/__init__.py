"""The experience store: every grade kept as (task, code, verdict with diagnostics).

Modules, one concern each:

* :mod:`~grader.experience.model` -- :class:`Attempt`, the size caps, the errors;
* :mod:`~grader.experience.schema` -- the SQLite schema, its version, safe opening;
* :mod:`~grader.experience.extract` -- report (+ task, source) -> attempt; hardware fingerprint;
* :mod:`~grader.experience.store` -- :class:`ExperienceStore`: add, query, stats;
* :mod:`~grader.experience.query` -- filters, shape ranges, FTS5 escaping, ranking;
* :mod:`~grader.experience.lessons` -- one-line lessons by rule;
* :mod:`~grader.experience.importers` -- ``kgrader experience add`` (records, leaderboard);
* :mod:`~grader.experience.hooks` -- what grading code calls when an evaluation finishes;
* :mod:`~grader.experience.search` -- the ``search_experience`` agent tool.
"""

from grader.experience.model import (
    Attempt,
    DimFilterError,
    ExperienceError,
    ExperienceSchemaError,
)
from grader.experience.query import Query, parse_dim
from grader.experience.store import ExperienceStore, Hit, default_path

__all__ = [
    "Attempt",
    "DimFilterError",
    "ExperienceError",
    "ExperienceSchemaError",
    "ExperienceStore",
    "Hit",
    "Query",
    "default_path",
    "parse_dim",
]
