#!/usr/bin/env bash
# Set up kgrader on a fresh Debian/Ubuntu machine (run as root): bubblewrap, PyTorch
# (the CPU build when the machine has no NVIDIA GPU), Triton, and kgrader itself.
#
#   scripts/setup.sh           what `kgrader run` needs (embedded bwrap backend)
#   scripts/setup.sh --dev     plus the test tools, the docker engine + sandbox image,
#                              Chromium (leaderboard page test) and Ray
#
# Idempotent: a second run only checks. Uses the interpreter `python3` on PATH (set
# PYTHON to choose another); kgrader binds that interpreter read-only into the sandbox.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
DEV=0
[[ "${1:-}" == "--dev" ]] && DEV=1
T0=$SECONDS
step() { printf '[setup +%3ss] %s\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root: it installs packages, and the bwrap backend builds namespaces as root"
# Debian/Ubuntu's own python3 refuses pip installs (PEP 668) unless told otherwise; a
# grading host installs kgrader into the interpreter the sandbox will bind read-only.
export PIP_BREAK_SYSTEM_PACKAGES=1
"$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null || die "$PY must be Python >= 3.11"

apt_missing=()
"$PY" -m pip --version >/dev/null 2>&1 || apt_missing+=(python3-pip)
command -v bwrap >/dev/null || apt_missing+=(bubblewrap)
command -v setpriv >/dev/null || apt_missing+=(util-linux)
if ((DEV)); then
    command -v chromium >/dev/null || apt_missing+=(chromium)
    command -v ninja >/dev/null || apt_missing+=(ninja-build)  # torch C++ extensions (tests)
    command -v c++ >/dev/null || apt_missing+=(g++)
    # kgrader serve --db postgresql://... is tested against a real server the test starts
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || apt_missing+=(postgresql)
fi
if ((${#apt_missing[@]})); then
    step "apt-get install ${apt_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

# Versions: constraints.txt pins every Python dependency to the set the whole suite last
# passed with (scripts/constraints.py writes it), so a fresh machine and CI install what
# was tested, not whatever was released since. A GPU host keeps the stack its CUDA build
# of torch came with; KGRADER_UNPINNED=1 skips the pins anywhere.
has_gpu=0
ls /dev/nvidia[0-9]* >/dev/null 2>&1 && has_gpu=1
if [[ "${KGRADER_UNPINNED:-0}" != 1 && $has_gpu == 0 && -f "$REPO/constraints.txt" ]]; then
    export PIP_CONSTRAINT="$REPO/constraints.txt"
    step "pip installs pinned by constraints.txt"
fi

# PyTorch: a bare `torch` requirement pulls a multi-GB CUDA build. Without an NVIDIA GPU
# pin the CPU build this machine kind carries; with one, keep whatever is installed.
if ! "$PY" -c 'import torch' 2>/dev/null; then
    if ((has_gpu)); then
        die "install a CUDA build of torch for this GPU first (see README: 'On a GPU host')"
    fi
    step "pip install torch==${KGRADER_TORCH:-2.13.0} (CPU build)"
    "$PY" -m pip install -q "torch==${KGRADER_TORCH:-2.13.0}"
fi
"$PY" -c 'import triton' 2>/dev/null || { step "pip install triton"; "$PY" -m pip install -q triton; }

target="$REPO"
((DEV)) && target="$REPO[dev,mcp,ray,service,postgres]"
step "pip install -e $target"
"$PY" -m pip install -q -e "$target"

if ((DEV)); then
    step "docker engine and sandbox image"
    bash "$REPO/scripts/docker-setup.sh"
fi
command -v kgrader >/dev/null || step "note: 'kgrader' is not on PATH here; '$PY -m grader.cli' is the same command"
step "done: $("$PY" -m grader.cli --version)"
