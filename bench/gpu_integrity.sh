#!/usr/bin/env bash
# kgrader's GPU session driver: one device call, in parts (SECTIONS), on one GPU (nvidia-h200).
#   legit     every legit kernel of tests/legit, plainly and through the runner's twins
#             (autotuned ones included), outputs compared bit for bit;
#   honest    the examples' good candidates, alone and against themselves (paired acceptance);
#   idioms    the legit files of modern Triton idioms (IDIOMS: names) graded on examples/vector_add;
#   attacks   every runtime attack (tests/attacks/runtime, scan off; ATTACKS a glob) on examples/vector_add;
#   returned  the returned-output attacks (tests/attacks/returned) on an imported KernelBench ReLU;
#   gpumode   the GPU MODE replicas (GM_PROBLEMS, GM_SUBMISSIONS: a glob, default *);
#   field     every KernelBench and GPU MODE example problem imported, each shipped submission
#             graded (FIELD_J at once, FIELD_PROBLEMS to narrow, DEVICE to try it on a CPU);
#   calibration  bench/calibration.py with CAL_ARGS (A/A decisions, power, cheats, overhead);
#   leaderboard  bench/leaderboard.py with LB_ARGS (throughput on the examples' mix);
#   pytest    the GPU tests (tests/e2e/test_gpu.py; PYTEST_K a -k filter, PYTEST_S a limit);
#   stops     the outside-kill and full-TMPDIR tests on bwrap with --device cuda (STOPS_S a limit);
#   soak      bench/soak.py on the CPU, bwrap only: SOAK_LANES lanes at once (default 32, two per
#             core of a 16-core host), SOAK_N iterations, SOAK_SEED, SOAK_S seconds of new
#             iterations, SOAK_LB leaderboard kill/resume rounds, SOAK_T the hard limit;
#             rows and summary in $OUT/soak.jsonl;
#   service   bench/service_load.py on the CPU, bwrap: SVC_N submissions from SVC_CLIENTS clients
#             to SVC_WORKERS workers, SVC_T the limit; its JSON in $OUT/service.json.
# Default SECTIONS: "legit honest attacks returned pytest". Everything lands in
# $OUT/integrity.tgz, written on any exit (soak and service also write their JSON beside it);
# $OUT/summary.txt holds one line per run as each ends.
# Usage on the device, in a git archive of the commit: OUT=... SECTIONS=... bash bench/gpu_integrity.sh
set -u
source bench/gpu_env.sh || exit 1
export PATH="$PWD/.gpu/bin:$(dirname "$(command -v python3)"):$PATH"
R=/tmp/kg-integrity; rm -rf "$R"; mkdir -p "$R/att" "$R/ret" "$R/honest"; OUT="${OUT:-/tmp/kg-out}"
mkdir -p "$OUT"
# Whatever ends the call (a section over its limit, the device call's own limit), what ran
# is in $OUT: the summary grows there line by line, and the archive is written on any exit.
pack() { cp "$S" "$R/summary.txt" 2>/dev/null; tar -czf "$OUT/integrity.tgz" -C /tmp kg-integrity 2>/dev/null; }
trap pack EXIT; trap 'exit 143' TERM INT
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; nproc; } > "$R/env.txt" 2>&1
S="$OUT/summary.txt"; : > "$S"
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

if on idioms; then  # modern Triton idioms graded end to end under examples/vector_add's own policy
mkdir -p "$R/idioms"
for n in ${IDIOMS:-vector_add tuple_args namedtuple_typing namedtuple_collections tma_host_descriptor \
    tma_device_descriptor sm_count_driver autotune_reset_to_zero autotune_pre_hook_zero constexpr_function_helpers}; do
  timeout 200 python3 -m grader.cli run examples/vector_add "tests/legit/$n.py" --backend bwrap --device cuda \
      --json > "$R/idioms/$n.json" 2> "$R/idioms/$n.err"
  echo "idiom $n rc=$? $(verdict "$R/idioms/$n.json")" >> "$S"
done
fi

run_attack() {
  local f=$1 n; n=$(basename "$f" .py)
  timeout 200 python3 -m grader.cli run examples/vector_add "$f" --backend bwrap --device cuda \
      --policy tests/policies/runtime-only.toml --json --run-s 60 > "$R/att/$n.json" 2> "$R/att/$n.err"
  if [[ -n "${OLD_TREE:-}" ]]; then  # the same attack on another tree (e.g. a git archive of the last release)
    PYTHONPATH="$OLD_TREE:/tmp/kg-site" timeout 200 python3 -m grader.cli run examples/vector_add "$f" --backend bwrap \
        --device cuda --policy tests/policies/runtime-only.toml --json --run-s 60 > "$R/att/$n.old.json" 2>/dev/null
    echo "attack-old $n $(verdict "$R/att/$n.old.json")" >> "$R/att/lines.txt"
  fi
  echo "attack $n rc=$? $(verdict "$R/att/$n.json")" >> "$R/att/lines.txt"
}
if on attacks; then
i=0
# One at a time by default (ATTACKS_J): attacks graded side by side share the GPU, and the
# host's NVML watch then rightly takes no timing verdict from them (foreign_gpu_process).
for f in tests/attacks/runtime/${ATTACKS:-*}.py; do
  run_attack "$f" & i=$((i + 1)); (( i % ${ATTACKS_J:-1} == 0 )) && wait
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

grade_field() {  # kind problem-dir submission -> one summary line (imports done before)
  local kind=$1 P=$2 f=$3 n; n="$(basename "$P" .py)_$(basename "$f" .py)"
  timeout 200 python3 -m grader.cli run "$R/field/$kind/$(cat "$R/field/$kind/$(basename "$P" .py).task")" "$f" \
      --backend bwrap --device "${DEVICE:-cuda}" --json > "$R/field/$kind/$n.json" 2> "$R/field/$kind/$n.err"
  echo "field $kind $n rc=$? $(verdict "$R/field/$kind/$n.json")" >> "$R/field/lines.txt"
}
if on field; then  # every shipped submission of the field examples: good passes, wrong/cheat fail
mkdir -p "$R/field/kernelbench" "$R/field/gpumode"
for P in ${FIELD_PROBLEMS:-examples/field/kernelbench/problems/*.py examples/field/gpumode/*/}; do
  case $P in *kernelbench*) kind=kernelbench;; *) kind=gpumode;; esac
  [[ $kind == gpumode && ! -f $P/task.yml ]] && continue
  b=$(basename "$P" .py); t0=$(date +%s)
  before=$(ls "$R/field/$kind" | sort)
  pol=(); [[ $kind == gpumode ]] && pol=(--policy triton-only)  # as tests/e2e/test_field_tasks.py:
  # the GPU MODE cheats return torch's own result, which only a triton-only task refuses
  timeout 200 python3 -m grader.cli task import $kind "$P" "${pol[@]}" --out "$R/field/$kind" --backend bwrap \
      --device "${DEVICE:-cuda}" > "$R/field/$kind/import_$b.log" 2>&1
  rc=$?; new=$(comm -13 <(echo "$before") <(ls "$R/field/$kind" | sort) | grep -v "^import_" | head -1)
  echo "$new" > "$R/field/$kind/$b.task"
  echo "field import $kind $b rc=$rc $(( $(date +%s) - t0 ))s" >> "$S"
done
i=0
for P in ${FIELD_PROBLEMS:-examples/field/kernelbench/problems/*.py examples/field/gpumode/*/}; do
  case $P in *kernelbench*) kind=kernelbench; subs=examples/field/kernelbench/submissions/$(basename "$P" .py);;
             *) kind=gpumode; subs=$P/submissions;; esac
  [[ -s "$R/field/$kind/$(basename "$P" .py).task" ]] || continue
  for f in "$subs"/*.py; do
    grade_field $kind "$P" "$f" & i=$((i + 1)); (( i % ${FIELD_J:-3} == 0 )) && wait
  done
done
wait; sort "$R/field/lines.txt" >> "$S"
fi

if on calibration; then
# CAL_AHEAD=K adds --prepare-ahead K (CAL_ARGS may pass it too): one decision per sandbox, K
# prepared at the measurement gate while one measures, the JSON saved after each decision and
# its gate intervals checked (exit 3 if two overlap).
timeout "${CAL_S:-400}" python3 bench/calibration.py --device cuda ${CAL_ARGS:---parts decisions --scenarios aa} \
    ${CAL_AHEAD:+--prepare-ahead "$CAL_AHEAD"} --out "$R/calibration.json" > "$R/calibration.txt" 2>&1
echo "calibration rc=$? $(tail -12 "$R/calibration.txt" | tr '\n' '|')" >> "$S"
fi

if on leaderboard; then
timeout "${LB_S:-400}" python3 bench/leaderboard.py --device cuda ${LB_ARGS:---quick} \
    > "$R/leaderboard.txt" 2>&1
echo "leaderboard rc=$? $(tail -3 "$R/leaderboard.txt" | tr '\n' '|')" >> "$S"
fi

if on stops; then  # a judge or runner killed from outside, a full TMPDIR: on the GPU too
KGRADER_TEST_DEVICE=cuda timeout "${STOPS_S:-300}" python3 -m pytest -q -p no:cacheprovider --durations=10 \
    tests/e2e/test_outside_kills.py tests/e2e/test_full_tmpdir.py -k "not docker" > "$R/stops_gpu.txt" 2>&1
echo "stops_gpu rc=$? $(grep -E 'passed|failed' "$R/stops_gpu.txt" | tail -1)" >> "$S"
fi

if on pytest; then
timeout "${PYTEST_S:-400}" python3 -m pytest -q -p no:cacheprovider --durations=10 tests/e2e/test_gpu.py \
    ${PYTEST_K:+-k "$PYTEST_K"} > "$R/pytest_gpu.txt" 2>&1
echo "pytest_gpu rc=$? $(grep -E 'passed|failed' "$R/pytest_gpu.txt" | tail -1)" >> "$S"
fi

if on soak; then  # the lanes are the load; --device cpu: the GPU is not used
timeout -k 20 "${SOAK_T:-580}" python3 bench/soak.py --lanes "${SOAK_LANES:-32}" --n "${SOAK_N:-600}" \
    --seed "${SOAK_SEED:-1}" --max-wall-s "${SOAK_S:-480}" --lb-rounds "${SOAK_LB:-1}" \
    --out "$OUT/soak.jsonl" > "$R/soak.txt" 2>&1
echo "soak rc=$? $(python3 bench/soak_line.py "$OUT/soak.jsonl")" >> "$S"
fi

if on service; then
python3 -c 'import requests, starlette, uvicorn' > "$R/service.err" 2>&1 &&
timeout -k 20 "${SVC_T:-570}" python3 bench/service_load.py --n "${SVC_N:-500}" \
    --clients "${SVC_CLIENTS:-20}" --workers "${SVC_WORKERS:-16}" --device cpu --backend bwrap \
    --json > "$OUT/service.json" 2>> "$R/service.err"
echo "service rc=$? $(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["wall_s"], "s",
    d["evaluations_per_min"], "/min latency", d["latency_s"], "checks", d["checks"])' "$OUT/service.json" 2>&1 | tail -1)" >> "$S"
fi
cat "$S"
