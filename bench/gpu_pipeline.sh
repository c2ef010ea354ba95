#!/usr/bin/env bash
# Throughput with prepared-ahead evaluations, decision quality, and the matmul profile, on
# a host with two GPUs (nvidia-h200-x2). Two parts, one device call each; everything lands
# under $OUT as one archive, pipeline-PART.tgz.
#
#   PART=1  GPU 1: `kgrader calibrate` + `kgrader profile examples/matmul
#                  examples/matmul/candidates/slow.py` (text and JSON), then A/A and
#                  injected-slowdown decisions at ~10 us and ~100 us (bench/calibration.py);
#           GPU 0, meanwhile: three cold `kgrader run`s of examples/vector_add, then the
#                  leaderboard on one GPU with --prepare-ahead (LB_AHEAD submissions) and
#                  without (LB_PLAIN submissions), honest kinds only (good, slow).
#   PART=2  three cold runs; then the leaderboard on GPU 0 with --prepare-ahead (LB_AHEAD)
#           while GPU 1 runs the ~10 us / ~100 us decisions; then the leaderboard on both
#           GPUs with --prepare-ahead (LB2 submissions, LB2_S seconds at most).
#   PART=4  PART=2 shortened (DEC_S, LB1_S, LB2_S seconds).
#   PART=3  ~1 ms decisions: A/A on GPU 0 while the injected slowdowns run on GPU 1 (DEC_S).
# Usage on the device: OUT=... PART=1 bash bench/gpu_pipeline.sh
set -u
source bench/gpu_env.sh || exit 1
R=/tmp/kg-pipeline; rm -rf "$R"; mkdir -p "$R"; OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"
PART="${PART:-1}"
{ date -u; nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem --format=csv;
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; nproc; } > "$R/env.txt" 2>&1

cold() {  # three cold CLI runs on GPU 0, one JSON line each
  for i in 1 2 3; do
    local t0; t0=$(date +%s.%N)
    python3 -m grader.cli run examples/vector_add examples/vector_add/candidates/good.py \
        --backend bwrap --device cuda --gpu 0 --json > "$R/cold_$i.json" 2>> "$R/stderr.log"
    echo "cold_$i rc=$? wall=$(python3 -c "import time; print(round(time.time() - $t0, 3))")" >> "$R/cold.txt"
  done
}

small_decisions() {  # GPU $1, timeout $2: A/A and injected slowdowns at ~10 us and ~100 us
  CUDA_VISIBLE_DEVICES=$1 timeout "$2" python3 bench/calibration.py --device cuda --shared-runners --parts decisions \
      --workloads 10us,100us --budget "10us=$(( ($2 - 60) * 2 / 5 )),100us=$(( ($2 - 60) * 3 / 5 ))" \
      --out "$R/calibration_small.json" >> "$R/gpu1.log" 2>&1
  echo "calibration small rc=$?" >> "$R/gpu1.log"
}

if [[ $PART == 1 ]]; then
  (
    CUDA_VISIBLE_DEVICES=1 python3 -m grader.cli calibrate --backend bwrap --device cuda --json \
        > "$R/calibrate.json" 2>> "$R/gpu1.log"
    for fmt in text json; do
      t0=$SECONDS
      if [[ $fmt == json ]]; then j=--json; else j=; fi
      timeout 300 python3 -m grader.cli profile examples/matmul examples/matmul/candidates/slow.py \
          --backend bwrap --device cuda --gpu 1 $j > "$R/profile_matmul_slow.$fmt" 2>> "$R/gpu1.log"
      echo "profile $fmt rc=$? wall=$((SECONDS - t0))" >> "$R/gpu1.log"
    done
    small_decisions 1 420
  ) &
  cold
  timeout 200 python3 bench/leaderboard.py --device cuda --workers 1 --kinds good slow \
      --submissions "${LB_AHEAD:-16}" --prepare-ahead on --json "$R/lb_ahead.json" > "$R/lb_ahead.txt" 2>&1
  timeout 240 python3 bench/leaderboard.py --device cuda --workers 1 --kinds good slow \
      --submissions "${LB_PLAIN:-8}" --prepare-ahead off --json "$R/lb_plain.json" > "$R/lb_plain.txt" 2>&1
  wait
elif [[ $PART == 2 ]]; then
  cold
  small_decisions 1 260 &
  timeout 200 python3 bench/leaderboard.py --device cuda --workers 1 --kinds good slow \
      --submissions "${LB_AHEAD:-10}" --prepare-ahead on --json "$R/lb_ahead.json" > "$R/lb_ahead.txt" 2>&1
  wait
  timeout "${LB2_S:-170}" python3 bench/leaderboard.py --device cuda --workers 2 --kinds good slow \
      --submissions "${LB2:-16}" --prepare-ahead on --json "$R/lb_two.json" > "$R/lb_two.txt" 2>&1
elif [[ $PART == 4 ]]; then  # the short version of 2, for what device time is left
  cold
  small_decisions 1 "${DEC_S:-200}" &
  timeout "${LB1_S:-150}" python3 bench/leaderboard.py --device cuda --workers 1 --kinds good slow \
      --submissions "${LB_AHEAD:-12}" --prepare-ahead on --json "$R/lb_ahead.json" > "$R/lb_ahead.txt" 2>&1
  wait
  timeout "${LB2_S:-120}" python3 bench/leaderboard.py --device cuda --workers 2 --kinds good slow \
      --submissions "${LB2:-12}" --prepare-ahead on --json "$R/lb_two.json" > "$R/lb_two.txt" 2>&1
else
  CUDA_VISIBLE_DEVICES=0 timeout "${DEC_S:-200}" python3 bench/calibration.py --device cuda \
      --parts decisions --workloads 1ms --scenarios aa --aa 130 --budget "1ms=$((${DEC_S:-200} - 40))" \
      --out "$R/calibration_1ms_aa.json" > "$R/cal_aa.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout "${DEC_S:-200}" python3 bench/calibration.py --device cuda \
      --parts decisions --workloads 1ms --scenarios gain1,gain2 --power 60 \
      --budget "1ms=$((${DEC_S:-200} - 40))" --out "$R/calibration_1ms_gain.json" > "$R/cal_gain.log" 2>&1 &
  wait
fi
tar -czf "$OUT/pipeline-$PART.tgz" -C "$R" .
