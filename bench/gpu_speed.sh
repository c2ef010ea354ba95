#!/usr/bin/env bash
# Issue 43's figures on a GPU host, one device call each (bench/speed.py, one table):
#   PART=latency  cold and warm vector_add (5 rounds), acceptance good vs slow cold and warm
#                 (3 rounds), the GPU MODE vectoradd imported and graded cold (3), an inline
#                 CUDA source graded twice on a fresh build cache (~6 min on an H200)
#   PART=mix      the examples' mix through warm pools, 60 evaluations (~3-4 min)
# Results: $OUT/speed-<part>.json and $OUT/speed-<part>.txt (the table and the log).
# Usage on the device, in the repository with .whl/ and .gpu/ carried (bench/gpu_env.sh):
#   OUT=... PART=latency timeout 590 bash bench/gpu_speed.sh
set -u
source bench/gpu_env.sh || exit 1
export PATH="$PWD/.gpu/bin:$(dirname "$(command -v python3)"):$PATH"
OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"
PART="${PART:-latency}"
{ date -u; git rev-parse HEAD 2>/dev/null || cat COMMIT 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; nproc
} > "$OUT/speed-env.txt" 2>&1
case "$PART" in
  latency) ARGS=(--rounds 5 --accept 3 --field 3 --inline 1) ;;
  mix)     ARGS=(--rounds 1 --mix 60 --pool-size 2 --refill-while-busy on) ;;
  *) echo "PART is latency or mix" >&2; exit 2 ;;
esac
python3 bench/speed.py --device cuda "${ARGS[@]}" --json "$OUT/speed-$PART.json" \
    > "$OUT/speed-$PART.txt" 2>&1
echo "rc=$?" >> "$OUT/speed-$PART.txt"
tail -15 "$OUT/speed-$PART.txt"
