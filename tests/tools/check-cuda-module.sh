#!/usr/bin/env bash
# The CUDA backend as a module: libember.so needs neither libcublas nor libcudart, the module
# beside it exports ember_backend_init, libember loads it at run time, and a module that cannot
# load is a warning, never a failure (CPU inference goes on).
set -euo pipefail
libdir=$1
bench=$2
model=$3
lib=$(readlink -f "$libdir/libember.so")
mod=$libdir/libember-cuda.so
if readelf -d "$lib" | grep -E "NEEDED.*(libcublas|libcudart|libcuda\.)"; then
    echo "libember.so must not need the CUDA libraries"
    exit 1
fi
[ -f "$mod" ] || { echo "missing $mod"; exit 1; }
readelf -d "$mod" | grep -q "NEEDED.*libember.so" || { echo "the module must link libember.so"; exit 1; }
nm -D --defined-only "$mod" | grep -q " T ember_backend_init$" || { echo "the module must export ember_backend_init"; exit 1; }
# Loaded from beside libember: strace-free check through a module that cannot load.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "not a shared object" >"$tmp/libember-cuda.so"
out=$(EMBER_CUDA_MODULE="$tmp/libember-cuda.so" "$bench" -m "$model" -p 0 -n 2 -r 1 -t 1 2>&1)
echo "$out" | grep -q "CUDA backend module .* not loaded" || { echo "a broken module must be reported: $out"; exit 1; }
echo "$out" | grep -q "| tg2 |" || { echo "a broken module must not stop CPU inference: $out"; exit 1; }
# The real module loads (no GPU here is fine: a backend with no devices) without a warning.
out=$(EMBER_CUDA_MODULE="$mod" "$bench" -m "$model" -p 0 -n 2 -r 1 -t 1 2>&1)
if echo "$out" | grep -q "warning"; then echo "the module did not load cleanly: $out"; exit 1; fi
echo "$out" | grep -q "| tg2 |"
echo "cuda module check passed"
