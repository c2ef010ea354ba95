#!/usr/bin/env bash
# Honest GPU gradings beside another job on the same GPU (issue 42, item 5), one device call
# of at most ~8 minutes on an H200:
#   1. imports the GPU MODE vectoradd replica (examples/field/gpumode/vectoradd) while the GPU
#      is still quiet;
#   2. starts the other job (bench/gpu_shared.py hog): FILL (default 0.87) of the GPU's memory
#      held, a loop of 8192^2 matmuls running, outside any sandbox;
#   3. grades N (default 20) honest kernels one after another beside it: examples/vector_add,
#      examples/softmax and the GPU MODE vectoradd (good submissions), in turn, every PAIRED-th
#      (default 4th) a paired acceptance against itself, each limited to RUN_S (default 100)
#      seconds; no new grading starts BUDGET_S (default 300) seconds after the script began;
#   4. fills the rest of the device too (bench/gpu_shared.py top: all but LEAVE_MIB, default
#      256, taken) and grades FULL_N (default 2) more: the device out of memory;
#   5. prints the table (verdict, codes, origin, a traceback in any message or warning) and
#      the totals. Expected: every row passed or infrastructure (timing_unreliable,
#      foreign_gpu_process, device_out_of_memory), rejected_candidate 0, tracebacks 0.
# Results: $OUT/gpu_shared.txt (the table), $OUT/gpu_shared.jsonl (rows and totals),
# $OUT/gpu_shared.tgz (every report, stderr and the hog's figures).
# Usage on the device, in the repository with .whl/ and .gpu/ carried (bench/gpu_env.sh):
#   OUT=... timeout 580 bash bench/gpu_shared.sh   (worst case ~8.5 min: the budget, one last
#   grading, the two on a full device; fewer than N gradings when they are slow: run it again)
set -u
T0=$(date +%s)
source bench/gpu_env.sh || exit 1
export PATH="$PWD/.gpu/bin:$(dirname "$(command -v python3)"):$PATH"
OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"
R=/tmp/kg-shared; rm -rf "$R"; mkdir -p "$R/runs" "$R/gm"
N="${N:-20}"; PAIRED="${PAIRED:-4}"; BUDGET_S="${BUDGET_S:-300}"; FULL_N="${FULL_N:-2}"
FILL="${FILL:-0.87}"; LEAVE_MIB="${LEAVE_MIB:-256}"
{ date -u; git rev-parse HEAD 2>/dev/null || cat COMMIT 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
  python3 -c 'import pynvml; print("pynvml", pynvml.__file__)' 2>&1 | tail -1; nproc; } > "$R/env.txt" 2>&1

timeout 150 python3 -m grader.cli task import gpumode examples/field/gpumode/vectoradd --out "$R/gm" \
    --backend bwrap --device cuda > "$R/gm/import.log" 2>&1
echo "gpumode import rc=$?" >> "$R/env.txt"
GM=$(ls -d "$R"/gm/*/ 2>/dev/null | head -1); GM=${GM%/}

PIDS=()
stop_all() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap stop_all EXIT
wait_ready() {  # file seconds
  local i; for ((i = 0; i < $2 * 10; i++)); do [[ -f $1 ]] && return 0; sleep 0.1; done; return 1
}
python3 bench/gpu_shared.py hog --fill "$FILL" --ready "$R/hog.json" 2> "$R/hog.err" &
PIDS+=($!)
wait_ready "$R/hog.json" 90 || { echo "the hog did not start" >> "$R/env.txt"; cat "$R/hog.err" >> "$R/env.txt"; }
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$R/env.txt" 2>&1

grade() {  # index task-label task-dir candidate mode
  local i=$1 label=$2 task=$3 cand=$4 mode=$5 extra=() t rc
  [[ $mode == paired ]] && extra=(--current "$cand")
  t=$(date +%s.%N)
  timeout "${RUN_S:-100}" python3 -m grader.cli run "$task" "$cand" "${extra[@]}" --backend bwrap \
      --device cuda --json > "$R/runs/$i.json" 2> "$R/runs/$i.err"
  rc=$?
  python3 -c 'import json, sys, time; print(json.dumps({"i": int(sys.argv[1]), "task": sys.argv[2],
    "mode": sys.argv[3], "rc": int(sys.argv[4]), "wall_s": round(time.time() - float(sys.argv[5]), 2),
    "report": sys.argv[6] + ".json", "stderr": sys.argv[6] + ".err", "phase": sys.argv[7]}))' \
      "$i" "$label" "$mode" "$rc" "$t" "$R/runs/$i" "$PHASE" >> "$R/runs.jsonl"
}

LABELS=(vector_add softmax gm_vectoradd)
TASKS=(examples/vector_add examples/softmax "$GM")
CANDS=(examples/vector_add/candidates/good.py examples/softmax/candidates/good.py
       examples/field/gpumode/vectoradd/submissions/good.py)
PHASE=shared
for ((i = 1; i <= N; i++)); do
  (( $(date +%s) - T0 > BUDGET_S )) && { echo "budget: stopped after $((i - 1)) gradings" >> "$R/env.txt"; break; }
  k=$(( (i - 1) % 3 )); mode=alone
  [[ -z $GM && $k == 2 ]] && k=0  # no imported task: its turns go to vector_add
  (( PAIRED > 0 && i % PAIRED == 0 && k != 2 )) && mode=paired
  grade "$i" "${LABELS[$k]}" "${TASKS[$k]}" "${CANDS[$k]}" "$mode"
done

PHASE=full
python3 bench/gpu_shared.py top --leave-mib "$LEAVE_MIB" --ready "$R/top.json" 2> "$R/top.err" &
PIDS+=($!)
wait_ready "$R/top.json" 60 || echo "the filler did not start" >> "$R/env.txt"
nvidia-smi --query-gpu=memory.total,memory.used --format=csv >> "$R/env.txt" 2>&1
for ((j = 1; j <= FULL_N; j++)); do
  k=$(( j % 2 == 1 ? 0 : 2 )); [[ -z $GM ]] && k=0
  RUN_S=45 grade "$((N + j))" "${LABELS[$k]}" "${TASKS[$k]}" "${CANDS[$k]}" alone
done
stop_all; trap - EXIT

{ echo "FILL=$FILL N=$N PAIRED=$PAIRED FULL_N=$FULL_N LEAVE_MIB=$LEAVE_MIB elapsed=$(( $(date +%s) - T0 )) s"
  cat "$R/env.txt"; echo "hog: $(cat "$R/hog.json" 2>/dev/null)"; tail -3 "$R/hog.err"
  echo "filler: $(cat "$R/top.json" 2>/dev/null)"
  python3 bench/gpu_shared.py table --runs "$R/runs.jsonl" --out "$OUT/gpu_shared.jsonl"
} > "$OUT/gpu_shared.txt" 2>&1
cat "$OUT/gpu_shared.txt"
tar -czf "$OUT/gpu_shared.tgz" -C /tmp kg-shared 2>/dev/null
