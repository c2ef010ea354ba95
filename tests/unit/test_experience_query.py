"""grader/experience/query.py: shape ranges, FTS5 escaping of hostile text, ranking.

Every hostile string runs against a real store, with FTS5 and with the LIKE fallback,
and must neither fail nor widen the match.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from grader.errors import UsageError
from grader.experience import schema
from grader.experience.model import Attempt, DimFilterError, ErrorItem, Shape
from grader.experience.query import Query, fts_match, like_pattern, parse_dim
from grader.experience.store import ExperienceStore


def _a(key: str, **kw: object) -> Attempt:
    base = Attempt(key=key, task="softmax", tags=("reduction", "softmax"), origin="run", ok=False,
                   stage="correctness", created_at="2026-01-01T00:00:00+00:00")
    return replace(base, **kw)  # type: ignore[arg-type]


MASK = _a("mask", errors=(ErrorItem("correctness", "wrong_values", "mask tail NEAR boundary 50%_done"),),
          source="offs = pid * BLOCK + tl.arange(0, BLOCK)\nmask = offs < n\n",
          shapes=(Shape("tune", {"M": 64, "N": 256}), Shape("hidden", {"M": 7, "N": 1000})))
OTHER = _a("other", errors=(ErrorItem("compile", "import", "other problem entirely"),), stage="compile",
           source="import torch\n", shapes=(Shape("tune", {"M": 1, "N": 4096}),))


@pytest.fixture(params=["fts5", "like"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ExperienceStore:
    if request.param == "fts5" and not schema.fts5_available():
        pytest.skip("this SQLite has no FTS5")
    s = ExperienceStore.open(tmp_path / "x.sqlite", use_fts=request.param == "fts5")
    assert s.fts == (request.param == "fts5")
    s.add(MASK)
    s.add(OTHER)
    request.addfinalizer(s.close)
    return s


def _keys(store: ExperienceStore, **kw: object) -> set[str]:
    return {h.attempt.key for h in store.query(Query(**kw))}  # type: ignore[arg-type]


# --- shape ranges -----------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "name", "conds"), [
    ("N>=1024", "N", ((">=", 1024),)),
    (" N < 64 ", "N", (("<", 64),)),
    ("M==7", "M", (("=", 7),)),
    ("M!=7", "M", (("!=", 7),)),
    ("N=512..2048", "N", ((">=", 512), ("<=", 2048))),
    ("64<=N<4096", "N", ((">=", 64), ("<", 4096))),
    ("1<N<=8", "N", ((">", 1), ("<=", 8))),
])
def test_dim_filters_parse(spec: str, name: str, conds: tuple[tuple[str, int], ...]) -> None:
    f = parse_dim(spec)
    assert (f.name, f.conds) == (name, conds)


@pytest.mark.parametrize("spec", [
    "", "N", "N>=", ">=5", "N>>1", "N=>1", "N>=1.5", "N>=1e3", "N>=0x10", "N=5..1", "1N>=3",
    "N>=99999999999999999999", "N>=1; DROP TABLE attempts", "N>=1 OR 1=1", "N IN (1,2)", "N>=ten",
    "N" * 100 + ">=1",
])
def test_bad_dim_filters_are_typed_errors(spec: str) -> None:
    with pytest.raises(DimFilterError):
        parse_dim(spec)


def test_dim_filters_must_hold_on_one_shape(store: ExperienceStore) -> None:
    assert _keys(store, dims=(parse_dim("N>=1000"),)) == {"mask", "other"}
    assert _keys(store, dims=(parse_dim("N>=1000"), parse_dim("M<=7"))) == {"mask", "other"}
    # N=1000 and M=64 exist in MASK, but never in the same shape
    assert _keys(store, dims=(parse_dim("N=1000..2000"), parse_dim("M>=64"))) == set()
    assert _keys(store, dims=(parse_dim("N=1000"),)) == {"mask"}


def test_dim_filters_can_be_kept_off_hidden_shapes(store: ExperienceStore) -> None:
    assert _keys(store, dims=(parse_dim("N=1000"),), dim_kinds=("tune", "failed", "timed")) == set()
    assert _keys(store, dims=(parse_dim("N=256"),), dim_kinds=("tune",)) == {"mask"}


# --- text search: escaping --------------------------------------------------------------


def test_fts_match_quotes_every_word() -> None:
    assert fts_match('mask "tail" NEAR') == '"mask" """tail""" "NEAR"'
    assert fts_match("a\x00b") == '"a" "b"'


@pytest.mark.parametrize("text", [
    '"', '""', "'", "-", "-mask", "*", "mask*", "mas*", "NEAR", "NEAR(mask other)", "mask OR other",
    "other OR mask", "NOT mask", "mask AND", "(", ")", "^mask", "source:import", "messages:other",
    '"mask" OR "other"', "x\x00y", "\\", "%", "_", "%%", "' OR '1'='1", "); DROP TABLE attempts; --",
    "{messages source}: other", "mask + other", "🙂", "\u202e", "mask\nother",
])
def test_hostile_text_neither_fails_nor_widens_the_match(store: ExperienceStore, text: str) -> None:
    got = _keys(store, text=text)
    # every word must be in one attempt, so no hostile string reaches both attempts
    assert got != {"mask", "other"}, text
    assert store.count() == 2  # nothing was dropped or changed


def test_operators_are_literal_words(store: ExperienceStore) -> None:
    assert _keys(store, text="mask tail") == {"mask"}
    assert _keys(store, text="other problem") == {"other"}
    assert _keys(store, text="mask OR other") == set()  # OR is a word here, not an operator
    assert _keys(store, text="NEAR boundary") == {"mask"}
    assert _keys(store, text="tl.arange") == {"mask"}  # source is searched too
    if store.fts:
        assert _keys(store, text="mas*") == set()  # no prefix search smuggled in


def test_like_wildcards_are_escaped(store: ExperienceStore) -> None:
    assert like_pattern("50%_do\\") == "%50\\%\\_do\\\\%"
    if not store.fts:
        assert _keys(store, text="50%_done") == {"mask"}
        assert _keys(store, text="5%e") == set()  # % is not a wildcard
        assert _keys(store, text="mas_") == set()  # _ is not a wildcard


def test_empty_or_long_text_is_a_usage_error(store: ExperienceStore) -> None:
    for bad in ("", "   ", "\x00\x01", "w " * 40, "x" * 300):
        with pytest.raises(UsageError):
            store.query(Query(text=bad))


def test_filter_values_are_bound_not_spliced(store: ExperienceStore) -> None:
    assert _keys(store, task="softmax' OR '1'='1") == set()
    assert _keys(store, code="x' OR 1=1 --") == set()
    assert _keys(store, hardware="%") == set()  # no hardware stored: % is literal
    assert _keys(store, tags=("softmax",), stage="compile") == {"other"}
    assert store.count() == 2


def test_bad_limits_are_usage_errors(store: ExperienceStore) -> None:
    for limit in (0, -1, 1001, True):
        with pytest.raises(UsageError):
            store.query(Query(limit=limit))


# --- ranking ------------------------------------------------------------------------------


def test_ranking_prefers_task_tag_hardware_then_passing_fastest_then_recent(tmp_path: Path) -> None:
    rows = [
        _a("other-task-fast", task="vector_add", tags=("elementwise",), ok=True, median_ms=0.1,
           hardware_key="hw1", created_at="2026-01-05T00:00:00+00:00"),
        _a("same-task-other-hw", ok=True, median_ms=0.5, hardware_key="hw2",
           created_at="2026-01-05T00:00:00+00:00"),
        _a("same-task-slow", ok=True, median_ms=2.0, hardware_key="hw1",
           created_at="2026-01-03T00:00:00+00:00"),
        _a("same-task-fast", ok=True, median_ms=1.0, hardware_key="hw1",
           created_at="2026-01-02T00:00:00+00:00"),
        _a("same-task-failed-new", hardware_key="hw1", created_at="2026-01-09T00:00:00+00:00"),
        _a("same-task-failed-old", hardware_key="hw1", created_at="2026-01-01T00:00:00+00:00"),
        _a("same-tag", task="layernorm", tags=("reduction",), ok=True, median_ms=0.2, hardware_key="hw1"),
    ]
    with ExperienceStore.open(tmp_path / "x.sqlite") as store:
        for r in rows:
            store.add(r)
        q = Query(prefer_task="softmax", prefer_tags=("reduction", "softmax"), prefer_hardware_key="hw1")
        order = [h.attempt.key for h in store.query(q)]
        recent = [h.attempt.key for h in store.query(Query(recent=True, limit=2))]
    assert order == ["same-task-fast", "same-task-slow", "same-task-failed-new", "same-task-failed-old",
                     "same-task-other-hw", "same-tag", "other-task-fast"]
    # newest first; equal times fall back to the later row
    assert recent == ["same-task-failed-new", "same-task-other-hw"]


def test_text_rank_orders_matches_by_relevance(tmp_path: Path) -> None:
    if not schema.fts5_available():
        pytest.skip("needs FTS5")
    strong = _a("strong", errors=(ErrorItem("correctness", "wrong_values", "mask mask mask on the tail"),))
    weak = _a("weak", source="# a comment that says mask once\n" + "x = 1\n" * 200,
              created_at="2026-03-01T00:00:00+00:00")
    with ExperienceStore.open(tmp_path / "x.sqlite") as store:
        store.add(weak)
        store.add(strong)
        hits = store.query(Query(text="mask"))
    assert [h.attempt.key for h in hits] == ["strong", "weak"]
    assert hits[0].rank < hits[1].rank  # bm25: lower is better
