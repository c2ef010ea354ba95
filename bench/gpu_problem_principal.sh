#!/usr/bin/env bash
# The problem process on CUDA: imported KernelBench and GPU MODE tasks graded on the GPU
# (the problem's own process maps the judge's VMM buffer), the attack problems of
# tests/attacks/problems/ against a submission that computes nothing, and task check.
set -u
source bench/gpu_env.sh
OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"; T=$(mktemp -d)
S="--backend bwrap --device cuda"
show() { python3 -c "import json,sys;r=json.load(open('$1'));print('$2', r['ok'],[(e['stage'],e['code'],e['origin'],e['message'][:200]) for e in r['errors']],(r.get('timing') or {}).get('median_ms'))" 2>&1; }
run() { local name=$1; shift; timeout 300 python3 -m grader.cli run "$@" $S --json > "$OUT/$name.json" 2> "$OUT/$name.err"; echo "rc=$?"; show "$OUT/$name.json" "$name"; tail -2 "$OUT/$name.err"; }
{
timeout 300 python3 -m grader.cli task import kernelbench examples/field/kernelbench/problems/1_ReLU.py --out $T $S --policy default
timeout 300 python3 -m grader.cli task import gpumode examples/field/gpumode/vectoradd --out $T $S
for a in patch_judge_check read_judge_secret read_candidate_source; do
  timeout 300 python3 -m grader.cli task import kernelbench tests/attacks/problems/$a.py --out $T $S --policy default
done
run kb_good $T/kb_1_relu examples/field/kernelbench/submissions/1_ReLU/good.py
run kb_nothing $T/kb_1_relu tests/attacks/problems/nothing.py
run gm_good $T/gm_vectoradd examples/field/gpumode/vectoradd/submissions/good.py
run gm_wrong $T/gm_vectoradd examples/field/gpumode/vectoradd/submissions/wrong.py
for a in patch_judge_check read_judge_secret read_candidate_source; do
  run att_$a $T/kb_$a tests/attacks/problems/nothing.py
done
run dps_good examples/vector_add examples/vector_add/candidates/good.py
timeout 300 python3 -m grader.cli task check $T/kb_1_relu $S; echo "check rc=$?"
} 2>&1 | tee "$OUT/summary.txt"
