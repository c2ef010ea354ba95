#!/usr/bin/env bash
# Set up everything the test suite needs, then run the whole suite (both backends).
# Extra arguments go to pytest. Exit status: pytest's, except that "no tests collected"
# (pytest's 5) is a failure here: a suite that ran nothing proved nothing.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash scripts/setup.sh --dev || exit 1
export KGRADER_LOG="${KGRADER_LOG:-warning}"
"${PYTHON:-python3}" -m pytest -q -ra --durations=25 "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
    echo "test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit $rc
