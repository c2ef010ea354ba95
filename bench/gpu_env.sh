# Source on a GPU host that lacks kgrader's Python dependencies and bubblewrap, with the
# carried wheels in .whl/ and a bwrap binary (+ its libraries) in .gpu/ (see
# scripts/gpu-carry.sh, which makes both). Installs nothing system-wide.
if [[ ! -f /tmp/kg-site/.kgrader-wheels ]]; then  # once per host: scripts source this in parallel
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/kg-site .whl/*.whl || return 1
  touch /tmp/kg-site/.kgrader-wheels
fi
export PYTHONPATH="$PWD:/tmp/kg-site${PYTHONPATH:+:$PYTHONPATH}"
export KGRADER_BWRAP="$PWD/.gpu/bin/bwrap"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$PWD/.gpu/lib"
export PYTHONUNBUFFERED=1
