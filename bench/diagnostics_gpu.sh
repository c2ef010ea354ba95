#!/usr/bin/env bash
# GPU diagnostics on an NVIDIA host: hardware counters + advice (`kgrader profile`) and the
# memory checker (`kgrader run --sanitize`) over examples/diagnostics/, each against the
# outcome the example promises. Writes under $OUT (default /tmp/kg-out):
#   diagnostics_gpu.json  one entry per run: command, exit code, expectation, verdict,
#                         the full JSON the command printed
#   diagnostics_gpu.log   stderr of every run
# KG_GPU=ID pins every run to one GPU (--gpu ID). ONLY=REGEX runs the named subset.
# Needs what bench/gpu_smoke.sh needs (bench/gpu_env.sh: carried wheels and bwrap), plus
# ncu and compute-sanitizer on the host (CUDA toolkit) and ninja for the inline-CUDA
# transposes: the sandbox's PATH is /usr/local/bin:/usr/bin:/bin, so a ninja that lives
# only in a virtual environment is linked into /usr/local/bin first.
set -u
source bench/gpu_env.sh || exit 1
OUT="${OUT:-/tmp/kg-out}"; mkdir -p "$OUT"
BACKEND="${KGRADER_BACKEND:-bwrap}"
LOG="$OUT/diagnostics_gpu.log"; : > "$LOG"
RES="$OUT/.diagnostics_gpu.jsonl"; : > "$RES"
if ! PATH=/usr/local/bin:/usr/bin:/bin command -v ninja >/dev/null && command -v ninja >/dev/null; then
  ln -s "$(command -v ninja)" /usr/local/bin/ninja && echo "linked ninja into /usr/local/bin" >> "$LOG"
fi
{ command -v ncu compute-sanitizer; ncu --version | tail -1; compute-sanitizer --version | tail -1; } >> "$LOG" 2>&1
S=examples/diagnostics/scale; T=examples/diagnostics/transpose
# The roofline sentence needs the device's calibrated peaks (cached; measured once here).
python3 -m grader.cli calibrate --backend "$BACKEND" --device cuda --json > "$OUT/calibrate.json" 2>> "$LOG"
echo "calibrate rc=$?" >> "$LOG"

# one NAME EXPECT CMD...: run `python3 -m grader.cli CMD... --json`, record it; EXPECT is a
# Python expression over r (the printed JSON) and rc that must hold.
one() {
  local name=$1 expect=$2; shift 2
  [[ -n "${ONLY:-}" && ! $name =~ $ONLY ]] && return 0  # ONLY=REGEX runs a subset
  local t0=$SECONDS out rc
  echo "=== $name: kgrader $*" >> "$LOG"
  out=$(timeout 900 python3 -m grader.cli "$@" --backend "$BACKEND" --device cuda ${KG_GPU:+--gpu "$KG_GPU"} \
        --json 2>> "$LOG"); rc=$?
  NAME="$name" EXPECT="$expect" RC="$rc" WALL=$((SECONDS - t0)) CMD="$*" OUTPUT="$out" python3 - >> "$RES" <<'PY'
import json, os
rc = int(os.environ["RC"])
try:
    r = json.loads(os.environ["OUTPUT"])
except ValueError:
    r = None
try:
    ok = bool(r is not None and eval(os.environ["EXPECT"], {}, {"r": r, "rc": rc}))
except Exception as e:  # a missing field is a failed expectation, said as such
    ok = False
    r = r if r is not None else {"unparsed": os.environ["OUTPUT"][-2000:]}
print(json.dumps({"name": os.environ["NAME"], "cmd": os.environ["CMD"], "rc": rc,
                  "wall_s": int(os.environ["WALL"]), "expect": os.environ["EXPECT"],
                  "as_expected": ok, "result": r}))
PY
  tail -1 "$RES" | python3 -c 'import json,sys; e=json.load(sys.stdin); print(("ok  " if e["as_expected"] else "FAIL"), e["name"], "rc", e["rc"], e["wall_s"], "s")'
}

# Counters and advice (a separate, untimed sandbox run each).
one profile_scale_good "rc == 0 and any('roofline' in a for a in r['diagnostics']['advice'])" \
    profile $S $S/candidates/good.py
one profile_scale_low_occupancy "rc == 0 and any('warp slots are busy' in a for a in r['diagnostics']['advice'])" \
    profile $S $S/candidates/low_occupancy.py
one profile_scale_huge_block "rc == 0 and r['diagnostics']['kernels'][0]['counters']['spill_bytes'] > 0" \
    profile $S $S/candidates/huge_block.py
one profile_transpose_naive "rc == 0 and any('bank conflicts' in a for a in r['diagnostics']['advice'])" \
    profile $T $T/candidates/naive_shared.py
one profile_transpose_padded "rc == 0 and not any('bank conflicts' in a for a in r['diagnostics']['advice'])" \
    profile $T $T/candidates/padded_shared.py

# The memory checker: the unmasked tail passes the ordinary checks and fails under memcheck.
one run_tail_plain "rc == 1 and r['errors'][0]['code'] == 'out_of_bounds_write'" run $S $S/candidates/unmasked_tail.py --sanitize-tool none
one run_load_plain "rc == 0 and r['ok']" run $S $S/candidates/unmasked_load.py --sanitize-tool none
one run_load_memcheck "rc == 1 and r['errors'][0]['code'] == 'out_of_bounds_access'" run $S $S/candidates/unmasked_load.py --sanitize
one run_tail_memcheck "rc == 1 and r['errors'][0]['code'] == 'out_of_bounds_access' and r['timing'] is None" \
    run $S $S/candidates/unmasked_tail.py --sanitize
one run_scale_good_memcheck "rc == 0 and r['diagnostics']['sanitizer']['ran'] and r['timing'] is not None" \
    run $S $S/candidates/good.py --sanitize
one run_transpose_race "rc == 1 and r['errors'][0]['code'] == 'shared_memory_race'" \
    run $T $T/candidates/missing_sync.py --sanitize-tool racecheck
one run_transpose_naive_memcheck "rc == 0 and r['diagnostics']['sanitizer']['error_count'] == 0" \
    run $T $T/candidates/naive_shared.py --sanitize

python3 - "$RES" "$OUT/diagnostics_gpu.json" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
json.dump({"runs": rows, "as_expected": sum(r["as_expected"] for r in rows), "total": len(rows)},
          open(sys.argv[2], "w"), indent=1)
print(f"{sum(r['as_expected'] for r in rows)} passed, {sum(not r['as_expected'] for r in rows)} failed")
PY
rm -f "$RES"
