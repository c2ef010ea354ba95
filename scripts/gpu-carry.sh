#!/usr/bin/env bash
# Prepares what a GPU host without kgrader's dependencies needs (bench/gpu_env.sh reads them):
#   .whl/  wheels for CPython 3.12 on x86_64 Linux (pydantic, structlog, docker-py, the service
#          and test extras the GPU scripts use), downloaded with pip's own index settings;
#   .gpu/  bubblewrap from Debian's package (bin/bwrap) with the libraries it links (lib/).
# Both are gitignored; pass them to the device as carried paths. Usage: bash scripts/gpu-carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${GPU_PYTHON_VERSION:-3.12}"
rm -rf .whl .gpu && mkdir -p .whl .gpu/bin .gpu/lib
python3 -m pip download -q --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --dest .whl pydantic structlog docker starlette uvicorn anyio httpx pytest-timeout \
    pytest-xdist hypothesis nvidia-ml-py mcp
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download bubblewrap libcap2 libselinux1 libpcre2-8-0 >/dev/null 2>&1)
for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
cp "$tmp/root/usr/bin/bwrap" .gpu/bin/
cp -a "$tmp"/root/lib/x86_64-linux-gnu/*.so* "$tmp"/root/usr/lib/x86_64-linux-gnu/*.so* .gpu/lib/ 2>/dev/null || true
echo "carry: $(ls .whl | wc -l) wheels in .whl/ ($(du -sh .whl | cut -f1)); .gpu/: $(ls .gpu/bin .gpu/lib | tr '\n' ' ')"
