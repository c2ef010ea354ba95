#!/usr/bin/env bash
# First look at a GPU host: the sandbox, CUDA IPC, one grade, peaks, two timing cheats.
set -u
source bench/gpu_env.sh
OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
python3 -c 'import sys,torch,triton;print(sys.version, torch.__version__, triton.__version__, torch.cuda.is_available())'
ls -la /dev/nvidia* ; ls /sys/fs/cgroup | head; uname -r; id
"$KGRADER_BWRAP" --version
} 2>&1 | tee "$OUT/env.txt"
run() { local name=$1; shift; timeout 300 python3 -m grader.cli run "$@" --backend bwrap --device cuda --json > "$OUT/$name.json" 2> "$OUT/$name.err"; echo "$name rc=$? $(python3 -c "import json,sys;r=json.load(open('$OUT/$name.json'));print(r['ok'],r['stage'],[(e['stage'],e['code'],e['message'][:300]) for e in r['errors']], (r.get('timing') or {}).get('median_ms'), (r.get('sandbox') or {}).get('wall_s'))" 2>&1)"; tail -3 "$OUT/$name.err"; }
run small_good examples/vector_add_small examples/vector_add_small/candidates/good.py
run va_good examples/vector_add examples/vector_add/candidates/good.py
run va_wrong examples/vector_add examples/vector_add/candidates/wrong.py
run side_stream examples/vector_add tests/attacks/runtime/side_stream.py --policy tests/policies/runtime-only.toml
run bg_thread examples/vector_add tests/attacks/runtime/background_thread.py --policy tests/policies/runtime-only.toml
timeout 200 python3 -c "
from grader.evaluate import measure_peak
p = measure_peak(backend='bwrap', device='cuda'); print(p.peaks); print(p.environment)" 2>&1 | tail -5
