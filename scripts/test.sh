#!/usr/bin/env bash
# Set up everything the test suite needs, lint and type-check, then run the whole suite
# (both backends). Extra arguments go to pytest. Exit status: pytest's, except that "no
# tests collected" (pytest's 5) is a failure here: a suite that ran nothing proved nothing.
#
#   scripts/test.sh            the whole suite (CI; ~30-45 min on a 2-core machine)
#   scripts/test.sh --quick    lint, types, the unit tests and one end-to-end run per
#                              backend (a few minutes): before every commit
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
QUICK=0
if [[ "${1:-}" == "--quick" ]]; then
    QUICK=1
    shift
fi
bash scripts/setup.sh --dev || exit 1
export KGRADER_LOG="${KGRADER_LOG:-warning}"
PY="${PYTHON:-python3}"
echo "test.sh: ruff check grader sandbox tests bench"
"$PY" -m ruff check grader sandbox tests bench || { echo "test.sh: ruff failed" >&2; exit 1; }
echo "test.sh: mypy --strict (grader, sandbox)"
"$PY" -m mypy || { echo "test.sh: mypy failed" >&2; exit 1; }
if ((QUICK)); then
    "$PY" -m pytest -q -ra tests/unit \
        "tests/e2e/test_run_cli.py::test_good_candidate_passes_with_timing_and_exit_0" \
        "tests/e2e/test_runtime_attacks.py::test_runtime_attack_is_stopped_with_its_stage_and_code[host_numpy_view.py-bwrap]" \
        "tests/e2e/test_runtime_attacks.py::test_runtime_attack_is_stopped_with_its_stage_and_code[host_numpy_view.py-docker]" \
        "$@"
else
    "$PY" -m pytest -q -ra --durations=25 "$@"
fi
rc=$?
if [[ $rc -eq 5 ]]; then
    echo "test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit $rc
