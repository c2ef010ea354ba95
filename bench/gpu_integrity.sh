#!/usr/bin/env bash
# Verdict integrity on one GPU (nvidia-h200): both kinds of wrong verdict, in one device call.
#   1. every legit kernel of tests/legit, plainly and through the runner's twins (autotuned
#      ones included: they need the GPU), outputs compared bit for bit;
#   2. honest evaluations: the examples' good candidates, alone and against themselves
#      (paired acceptance), on bwrap with the GPU;
#   3. every runtime attack (tests/attacks/runtime, scan off: tests/policies/runtime-only.toml)
#      on examples/vector_add, three at a time;
#   4. the returned-output attacks (tests/attacks/returned) on an imported KernelBench ReLU;
#   5. the GPU tests (tests/e2e/test_gpu.py).
# Everything lands in $OUT/integrity.tgz (summary.txt holds one line per run).
# SECTIONS (default "legit honest attacks returned pytest") picks parts; HONEST_MODES
# ("alone paired") the honest runs; PYTEST_K a -k filter for the GPU tests; GM_PROBLEMS and
# GM_SUBMISSIONS (a glob, default *) the GPU MODE replicas graded.
# Usage on the device: OUT=... bash bench/gpu_integrity.sh
set -u
source bench/gpu_env.sh || exit 1
export PATH="$PWD/.gpu/bin:$(dirname "$(command -v python3)"):$PATH"
R=/tmp/kg-integrity; rm -rf "$R"; mkdir -p "$R/att" "$R/ret" "$R/honest"; OUT="${OUT:-/tmp/kg-out}"
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; nproc; } > "$R/env.txt" 2>&1
S="$R/summary.txt"
SECTIONS="${SECTIONS:-legit honest attacks returned pytest}"
on() { [[ " $SECTIONS " == *" $1 "* ]]; }
verdict() {  # file -> "ok stage/code median message" from a JSON report
  python3 bench/report_line.py "$1"
}

if on legit; then
timeout 240 python3 tests/unit/_twin_legit_check.py --cuda tests/legit/*.py > "$R/twin_legit.jsonl" 2> "$R/twin_legit.err"
echo "twin_legit rc=$? $(grep -c '"same": true' "$R/twin_legit.jsonl") same, $(grep -c '"same": false' "$R/twin_legit.jsonl") differ, $(grep -c error "$R/twin_legit.jsonl") errors" >> "$S"
fi

if on honest; then
for ex in vector_add softmax matmul; do
  for mode in ${HONEST_MODES:-alone paired}; do
    extra=(); [[ $mode == paired ]] && extra=(--current "examples/$ex/candidates/good.py")
    timeout 200 python3 -m grader.cli run "examples/$ex" "examples/$ex/candidates/good.py" "${extra[@]}" \
        --backend bwrap --device cuda --json > "$R/honest/${ex}_$mode.json" 2>> "$R/honest/stderr.log"
    echo "honest $ex $mode rc=$? $(verdict "$R/honest/${ex}_$mode.json")" >> "$S"
  done
done
fi

run_attack() {
  local f=$1 n; n=$(basename "$f" .py)
  timeout 200 python3 -m grader.cli run examples/vector_add "$f" --backend bwrap --device cuda \
      --policy tests/policies/runtime-only.toml --json --run-s 60 > "$R/att/$n.json" 2> "$R/att/$n.err"
  echo "attack $n rc=$? $(verdict "$R/att/$n.json")" >> "$R/att/lines.txt"
}
if on attacks; then
i=0
for f in tests/attacks/runtime/*.py; do
  run_attack "$f" & i=$((i + 1)); (( i % 3 == 0 )) && wait
done
wait; sort "$R/att/lines.txt" >> "$S"
fi

if on returned; then
mkdir -p "$R/kb"
timeout 200 python3 -m grader.cli task import kernelbench examples/field/kernelbench/problems/1_ReLU.py \
    --out "$R/kb" --backend bwrap --device cuda > "$R/ret/import.log" 2>&1
echo "import relu rc=$?" >> "$S"
task=$(ls -d "$R"/kb/*/ | head -1)
for f in tests/attacks/returned/*.py examples/field/kernelbench/submissions/1_ReLU/good.py; do
  n=$(basename "$f" .py)
  timeout 200 python3 -m grader.cli run "$task" "$f" --backend bwrap --device cuda --json \
      --policy tests/policies/runtime-only.toml > "$R/ret/$n.json" 2> "$R/ret/$n.err"
  echo "returned $n rc=$? $(verdict "$R/ret/$n.json")" >> "$S"
done
fi

if on gpumode; then  # GPU MODE layouts: output buffers by behaviour, the checker decides
mkdir -p "$R/gm"
for P in ${GM_PROBLEMS:-prefixsum histogram vectoradd_out}; do
  timeout 120 python3 -m grader.cli task import gpumode "examples/field/gpumode/$P" --out "$R/gm" \
      --backend bwrap --device cuda > "$R/gm/import_$P.log" 2>&1
  echo "gpumode import $P rc=$?" >> "$S"
  for f in examples/field/gpumode/$P/submissions/${GM_SUBMISSIONS:-*}.py; do
    n="${P}_$(basename "$f" .py)"
    timeout 120 python3 -m grader.cli run "$R/gm/gm_$P" "$f" --backend bwrap --device cuda --json \
        > "$R/gm/$n.json" 2> "$R/gm/$n.err"
    echo "gpumode $n rc=$? $(verdict "$R/gm/$n.json")" >> "$S"
  done
done
fi

if on pytest; then
timeout "${PYTEST_S:-400}" python3 -m pytest -q -p no:cacheprovider --durations=10 tests/e2e/test_gpu.py \
    ${PYTEST_K:+-k "$PYTEST_K"} > "$R/pytest_gpu.txt" 2>&1
echo "pytest_gpu rc=$? $(grep -E 'passed|failed' "$R/pytest_gpu.txt" | tail -1)" >> "$S"
fi
cat "$S"
tar -czf "$OUT/integrity.tgz" -C /tmp kg-integrity
