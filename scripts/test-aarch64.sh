#!/usr/bin/env bash
# Cross-compiles the kernel and model tests for aarch64 (Debian 12's g++-aarch64-linux-gnu) and
# runs them under qemu-user, three times: with a CPU that has the dot-product and int8
# matrix-multiply extensions (-cpu max: the SDOT kernels and the SMMLA prefill tiles), with one
# that has dotprod but not i8mm (-cpu neoverse-n1: no NEON gemm cells) and with one that has
# neither (-cpu cortex-a57: baseline NEON), so every NEON variant of backends/cpu_simd/neon/
# runs. Then test-quant (the reference codecs as aarch64 compiles them) and model-level decode
# tests, and conformance on one fixture when ../shared has it (see below).
#
# Installs what is missing (as scripts/setup.sh does): the cross compiler, qemu-user, and
# libxxhash for arm64 through Debian multiarch (dpkg --add-architecture arm64).
# Build: build-aarch64/ (Release, tests only; EMBER_AARCH64_BUILD_DIR overrides it).
# Usage: scripts/test-aarch64.sh [SHARED_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
shared=${1:-../shared}
t_start=$SECONDS

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in cmake pkg-config doctest-dev libxxhash-dev g++-aarch64-linux-gnu qemu-user; do
    installed "$p" || missing+=("$p")
done
need_update=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "test-aarch64: enabling the arm64 architecture (Debian multiarch) for libxxhash-dev:arm64"
    $sudo dpkg --add-architecture arm64
    need_update=1
fi
installed libxxhash-dev:arm64 || missing+=("libxxhash-dev:arm64")
if [ ${#missing[@]} -gt 0 ]; then
    echo "test-aarch64: installing ${missing[*]}"
    need_update=1
fi
if [ $need_update -eq 1 ]; then
    $sudo apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Only the test executables, and no CUDA / Vulkan even where the host has them.
build=${EMBER_AARCH64_BUILD_DIR:-build-aarch64}
cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_TOOLS=OFF -DEMBER_CUDA=OFF -DEMBER_VULKAN=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target test-quant test-backends test-models
t_built=$SECONDS

qemu() {  # qemu() CPU PROGRAM ARGS...
    local cpu=$1
    shift
    QEMU_LD_PREFIX=/usr/aarch64-linux-gnu qemu-aarch64 -cpu "$cpu" "$@"
}
bin=$build/bin
# (the thread-pool attention cases of test_cpu_attention.cpp are left out: threads that
# spin-wait for each other take minutes under qemu-user; [cpu-neon] tests the attn cells directly)
kernel_tests='*cpu kernels*,*cpu-neon*,*gemm tiles*,*cpu ember types*,*vec row helpers*,*vector exp*,*cpu repack*'
# EMBER_TEST_MAX_THREADS=1: the [cpu repack] graph cases run their one-thread configurations only
# (on some hosts, qemu 7.2 on a 6.18 kernel, the guest's first pthread_create never returns).
for cpu in max neoverse-n1 cortex-a57; do
    echo "== test-aarch64: kernel tests under qemu -cpu $cpu"
    EMBER_TEST_MAX_THREADS=1 qemu "$cpu" "$bin/test-backends" -tc="$kernel_tests"
done
echo "== test-aarch64: test-quant (the reference codecs as aarch64 compiles them) under qemu -cpu max"
qemu max "$bin/test-quant" --data-dir "$shared" -tce="*fp8] encoding*"  # exhaustive, 60 s under qemu

# Model level: decoding generated tiny models (several sequences, split prompts, KV-cache
# edits, weights repacked for the R16 decode kernels or not) through the C API, under qemu -cpu max.
model_tests='*multi-seq*,*decode]*,*kv-cache] seq_rm*,*kv-cache] clear*,*kv-cache] a full*,*cpu repack*'
echo "== test-aarch64: model decode tests (generated tiny models) under qemu -cpu max"
EMBER_TEST_MAX_THREADS=1 qemu max "$bin/test-models" -tc="$model_tests"

# Conformance against llama.cpp on one fixture (tiny-llama-Q4_0: Q4_0 weights, Q8_0 activations,
# the NEON kernels end to end), one thread only: threads that spin-wait for each other are very
# slow under qemu-user. A data directory holding only that fixture: the test walks every one.
if [ "${EMBER_AARCH64_CONFORMANCE:-1}" = 1 ] && [ -f "$shared/fixtures/models/manifest.json" ]; then
    data=$(mktemp -d)
    trap 'rm -rf "$data"' EXIT
    mkdir -p "$data/fixtures/models"
    src=$(cd "$shared/fixtures/models" && pwd)
    ln -s "$src/manifest.json" "$data/fixtures/models/"
    for f in "$src"/tiny-llama-Q4_0.*; do ln -s "$f" "$data/fixtures/models/"; done
    echo "== test-aarch64: conformance (tiny-llama-Q4_0, 1 thread) under qemu -cpu max"
    EMBER_TEST_MAX_THREADS=1 qemu max "$bin/test-models" --data-dir "$data" -tc="*fixture models match*"
else
    echo "== test-aarch64: fixture conformance not run (no fixtures, or EMBER_AARCH64_CONFORMANCE=0)"
fi
echo "test-aarch64: passed (build $((t_built - t_start)) s, qemu runs $((SECONDS - t_built)) s)"
