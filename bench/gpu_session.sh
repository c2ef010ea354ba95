#!/usr/bin/env bash
# The batched GPU session behind docs/BENCHMARKS.md's "This revision on an H200": the
# grades/attacks/honest batch of bench/gpu_final.py, then bench/diagnostics_gpu.sh.
# Usage on the device: OUT=... bash bench/gpu_session.sh FINAL_BUDGET_S DIAG_BUDGET_S
set -u
source bench/gpu_env.sh || exit 1
OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$OUT/env.txt" 2>&1
T0=$SECONDS
/usr/bin/time -f "cold kgrader run wall %e s" python3 -m grader.cli run examples/vector_add \
  examples/vector_add/candidates/good.py --backend bwrap --device cuda --json \
  > "$OUT/cold_run.json" 2>> "$OUT/env.txt"; tail -1 "$OUT/env.txt"
python3 bench/gpu_final.py "$OUT" "${1:-240}"
timeout "${2:-150}" bash bench/diagnostics_gpu.sh 2>/dev/null
echo "diagnostics rc=$? after $((SECONDS - T0)) s"
cp "$OUT/.diagnostics_gpu.jsonl" "$OUT/diagnostics.jsonl" 2>/dev/null; true
