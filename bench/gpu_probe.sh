#!/usr/bin/env bash
# First look at a GPU host for this revision: cross-uid CUDA IPC, the tools, and a few
# grades (good, wrong, guard bands, op audit) with their phases. Writes under $OUT.
set -u
source bench/gpu_env.sh
OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
python3 -c 'import sys,torch,triton;print(sys.version.split()[0], torch.__version__, triton.__version__)'
ls -la /dev/nvidia*; id; uname -r
for t in ncu compute-sanitizer; do echo "$t: $(command -v $t) $(ls -d /usr/local/cuda*/bin/$t /opt/nvidia/nsight-compute/*/$t 2>/dev/null | head -3 | tr '\n' ' ')"; done
} > "$OUT/env.txt" 2>&1
timeout 200 python3 bench/gpu_ipc_uids.py > "$OUT/ipc_uids.json" 2>&1; echo "ipc: $(cat $OUT/ipc_uids.json | head -c 600)"
run() { local name=$1; shift; timeout 300 python3 -m grader.cli run "$@" --backend bwrap --device cuda --json > "$OUT/$name.json" 2> "$OUT/$name.err"; echo "$name rc=$? $(python3 -c "import json;r=json.load(open('$OUT/$name.json'));print(r['ok'],r['stage'],[(e['code'],e['message'][:160]) for e in r['errors']], (r.get('timing') or {}).get('median_ms'), (r.get('timing') or {}).get('escape'), (r.get('sandbox') or {}).get('phases'))" 2>&1 | tail -2)"; }
RT=tests/policies/runtime-only.toml
run va_good examples/vector_add examples/vector_add/candidates/good.py
run va_wrong examples/vector_add examples/vector_add/candidates/wrong.py
run mm_good examples/matmul examples/matmul/candidates/good.py
run sm_good examples/softmax examples/softmax/candidates/good.py
run oob examples/vector_add tests/attacks/runtime/unmasked_tail_store.py --policy $RT
run fallback examples/vector_add tests/attacks/runtime/torch_fallback_in_except.py --policy $RT
run accept_aa examples/vector_add examples/vector_add/candidates/good.py --current examples/vector_add/candidates/good.py
