#!/usr/bin/env bash
# The batched GPU session behind docs/benchmarks-archive.md's "This revision on H200s": on a host
# with two GPUs (nvidia-h200-x2), two streams at once, each pinned to its GPU (--gpu):
#   GPU 0: cold `kgrader run`s, runtime attacks with the scan off, acceptance runs, the
#          field tasks (KernelBench and GPU MODE imports, good/wrong/cheat submissions);
#   GPU 1: bench/diagnostics_gpu.sh (calibrate, counters and advice, memcheck, racecheck);
# then the leaderboard on both GPUs, one worker per GPU (bench/leaderboard.py --device cuda).
# Every result lands under $OUT as one archive, session.tgz:
#   runs.jsonl (one line per `kgrader run`: name, rc, wall, ok, stage, codes, timing, phases,
#   the judge's view of the GPUs), diagnostics_gpu.json, leaderboard.json, field.log, env.txt.
# Usage on the device: OUT=... bash bench/gpu_session.sh [LEADERBOARD_SUBMISSIONS] [STREAM_S] [LB_S]
# With DEV=cpu it runs the same steps on the CPU (a dry run of the script itself).
set -u
[[ ${DEV:-cuda} == cpu ]] || source bench/gpu_env.sh || exit 1
R=/tmp/kg-session; DEV="${DEV:-cuda}"; RT=tests/policies/runtime-only.toml
gpu() { [[ $DEV == cuda ]] && echo "--gpu $1"; }

# run NAME GPU TASK CANDIDATE [ARGS...]: one `kgrader run --json`, summarised into runs.jsonl
run() {
  local name=$1 g=$2 task=$3 cand=$4; shift 4
  local t0 out rc
  t0=$(date +%s.%N)
  out=$(python3 -m grader.cli run "$task" "$cand" --backend bwrap --device "$DEV" $(gpu "$g") \
        --json "$@" 2>> "$R/stderr.log"); rc=$?
  NAME="$name" RC="$rc" T0="$t0" OUTPUT="$out" python3 - >> "$R/runs.jsonl" <<'PY'
import json, os, time
wall = time.time() - float(os.environ["T0"])
try:
    r = json.loads(os.environ["OUTPUT"])
except ValueError:
    print(json.dumps({"name": os.environ["NAME"], "rc": int(os.environ["RC"]), "wall_s": wall,
                      "unparsed": os.environ["OUTPUT"][-1500:]}))
    raise SystemExit
t, a, env = r.get("timing") or {}, r.get("acceptance") or {}, r.get("environment") or {}
print(json.dumps({
    "name": os.environ["NAME"], "rc": int(os.environ["RC"]), "wall_s": round(wall, 3),
    "ok": r["ok"], "stage": r["stage"],
    "codes": [(e["stage"], e["code"], e["origin"], e["message"][:300]) for e in r["errors"]],
    "median_ms": t.get("median_ms"), "mode": t.get("mode"), "escape": t.get("escape"),
    "accepted": a.get("accepted"), "improvement": a.get("improvement_fraction"),
    "pairs": a.get("pairs"), "phases": (r.get("sandbox") or {}).get("phases"),
    "gpu": {k: env.get(k) for k in ("device_uuid", "visible_devices", "device_nodes")},
    "warnings": r.get("warnings", [])[:4]}))
PY
  tail -1 "$R/runs.jsonl" | cut -c1-220
}

stream_main() {  # GPU 0; MAIN_PARTS picks the parts (default: all four)
  local parts=" ${MAIN_PARTS:-cold attacks accept field} "
  if [[ $parts == *" cold "* ]]; then
    for i in 1 2 3; do run "cold_vector_add_$i" 0 examples/vector_add examples/vector_add/candidates/good.py; done
    run cold_softmax 0 examples/softmax examples/softmax/candidates/good.py
    run cold_matmul 0 examples/matmul examples/matmul/candidates/good.py
  fi
  if [[ $parts == *" attacks "* ]]; then
    for a in unmasked_tail_store torch_fallback_in_except side_stream background_thread \
             lazy_output kill_judge ptrace_judge timer_patch; do
      run "attack_$a" 0 examples/vector_add "tests/attacks/runtime/$a.py" --policy "$RT"
    done
    run attack_sigstop_in_accept 0 examples/vector_add tests/attacks/runtime/sigstop_other_runner.py \
        --current examples/vector_add/candidates/good.py --policy "$RT"
  fi
  if [[ $parts == *" accept "* ]]; then
    run accept_good_vs_slow 0 examples/vector_add examples/vector_add/candidates/good.py \
        --current examples/vector_add/candidates/slow.py
    run accept_good_vs_good 0 examples/vector_add examples/vector_add/candidates/good.py \
        --current examples/vector_add/candidates/good.py
  fi
  [[ $parts == *" field "* ]] || return 0
  local F=/tmp/kg-field KB=examples/field/kernelbench GM=examples/field/gpumode; rm -rf "$F"
  { for p in 1_ReLU 4_LayerNorm; do
      python3 -m grader.cli task import kernelbench "$KB/problems/$p.py" --out "$F" --backend bwrap \
          --device "$DEV"; echo "kernelbench $p import rc=$?"
    done
    for p in vectoradd rmsnorm; do
      python3 -m grader.cli task import gpumode "$GM/$p" --out "$F" --policy triton-only \
          --backend bwrap --device "$DEV"; echo "gpumode $p import rc=$?"
    done; ls "$F"; } > "$R/field.log" 2>&1
  for c in good wrong cheat; do
    run "kb_relu_$c" 0 "$F/kb_1_relu" "$KB/submissions/1_ReLU/$c.py"
    run "kb_layernorm_$c" 0 "$F/kb_4_layernorm" "$KB/submissions/4_LayerNorm/$c.py"
    run "gm_vectoradd_$c" 0 "$F/gm_vectoradd" "$GM/vectoradd/submissions/$c.py"
    run "gm_rmsnorm_$c" 0 "$F/gm_rmsnorm" "$GM/rmsnorm/submissions/$c.py"
  done
}

stream_diag() {  # GPU 1
  OUT="$R" KG_GPU=1 ONLY="${DIAG_ONLY:-profile_scale_good|profile_scale_low_occupancy|profile_transpose_naive|run_load_plain|run_load_memcheck|run_tail_memcheck|run_transpose_race}" \
    bash bench/diagnostics_gpu.sh
}

if [[ ${1:-} == --stream ]]; then "stream_$2"; exit; fi  # one stream, started below

OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"
rm -rf "$R"; mkdir -p "$R"
trap 'tar czf "$OUT/session.tgz" -C /tmp kg-session' EXIT
NSUB="${1:-14}"; STREAM_S="${2:-300}"; LB_S="${3:-240}"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,power.draw \
    --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } \
  > "$R/env.txt" 2>&1
T0=$SECONDS
[[ $DEV == cuda ]] && timeout "$STREAM_S" bash "$0" --stream diag > "$R/stream_diag.log" 2>&1 &
timeout "$STREAM_S" bash "$0" --stream main > "$R/stream_main.log" 2>&1
wait
echo "streams done after $((SECONDS - T0)) s"; tail -3 "$R/stream_diag.log" 2>/dev/null
WORKERS=$([[ $DEV == cuda ]] && nvidia-smi -L | wc -l || echo 1)
timeout "$LB_S" python3 bench/leaderboard.py --device "$DEV" --workers "$WORKERS" \
  --submissions "$NSUB" --json "$R/leaderboard.json" > "$R/leaderboard.log" 2>&1
echo "leaderboard rc=$? after $((SECONDS - T0)) s"; tail -2 "$R/leaderboard.log" | cut -c1-600
python3 - "$R/runs.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(r["name"], r.get("rc"), round(r.get("wall_s", 0), 1), r.get("ok"),
          (r.get("codes") or [[None, None]])[0][1], r.get("accepted"))
PY
