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
dyn=$(readelf -d "$mod")  # (whole first: grep -q at a pipe's end can SIGPIPE its writer, a failure under pipefail)
grep -q "NEEDED.*libember.so" <<<"$dyn" || { echo "the module must link libember.so"; exit 1; }
syms=$(nm -D --defined-only "$mod")
grep -q " T ember_backend_init$" <<<"$syms" || { echo "the module must export ember_backend_init"; exit 1; }
# Loaded from beside libember: strace-free check through a module that cannot load.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "not a shared object" >"$tmp/libember-cuda.so"
out=$(EMBER_CUDA_MODULE="$tmp/libember-cuda.so" "$bench" -m "$model" -p 0 -n 2 -r 1 -t 1 2>&1)
grep -q "CUDA backend module .* not loaded" <<<"$out" || { echo "a broken module must be reported: $out"; exit 1; }
grep -q "| tg2 |" <<<"$out" || { echo "a broken module must not stop CPU inference: $out"; exit 1; }
# The real module loads (no GPU here is fine: a backend with no devices) without a warning.
out=$(EMBER_CUDA_MODULE="$mod" "$bench" -m "$model" -p 0 -n 2 -r 1 -t 1 2>&1)
if grep -q "warning" <<<"$out"; then echo "the module did not load cleanly: $out"; exit 1; fi
grep -q "| tg2 |" <<<"$out"
echo "cuda module check passed"
