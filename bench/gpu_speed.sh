#!/usr/bin/env bash
# Issue 43's figures on a GPU host, one device call each (bench/speed.py, one table):
#   PART=latency  cold and warm vector_add (5 rounds), acceptance good vs slow cold and warm
#                 (3 rounds), the GPU MODE vectoradd imported and graded cold (3) (~3 min on
#                 an H100, 2026-12-05)
#   PART=inline   an inline CUDA source graded twice on a fresh build cache, with one round of
#                 cold and warm vector_add beside it (the first grade builds with nvcc: ~1 min
#                 on an H200, 2026-12-01, under the imported tasks' 16 GiB)
#   PART=mix      the examples' mix through warm pools, 60 evaluations (~2.5 min on an H100)
# speed.py writes the JSON after each part, so a call killed at its limit keeps what it measured.
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
  latency) ARGS=(--rounds 5 --accept 3 --field 3) ;;
  inline)  ARGS=(--rounds 1 --inline 1) ;;
  mix)     ARGS=(--rounds 1 --mix 60 --pool-size 2 --refill-while-busy on) ;;
  *) echo "PART is latency, inline or mix" >&2; exit 2 ;;
esac
python3 bench/speed.py --device cuda "${ARGS[@]}" --json "$OUT/speed-$PART.json" \
    > "$OUT/speed-$PART.txt" 2>&1
echo "rc=$?" >> "$OUT/speed-$PART.txt"
tail -15 "$OUT/speed-$PART.txt"
