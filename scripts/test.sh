#!/usr/bin/env bash
# The whole test suite: a release build with every test (model conformance against ../shared
# when it is there), the fast suite again under AddressSanitizer + UndefinedBehaviorSanitizer,
# and the threaded tests under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

./scripts/setup.sh

# Python bindings (bindings/python): the Debian packages their tests use, installed when missing
# as setup.sh does: pytest, numpy, and pip + setuptools + venv for the offline `pip install
# --no-build-isolation --no-index` test. ctest runs the suite (test-python) with Debian's python3,
# and here it must run, not be skipped.
py_pkgs=(python3-pytest python3-numpy python3-setuptools python3-pip python3-venv)
py_missing=()
for p in "${py_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || py_missing+=("$p")
done
if [ ${#py_missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "test.sh: installing ${py_missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${py_missing[@]}" >/dev/null
fi
export EMBER_PYTHON=/usr/bin/python3 EMBER_REQUIRE_PYTHON_TESTS=1

# The Vulkan tests (lavapipe) run with the Khronos validation layer (setup.sh installs it): every
# case and model test fails on a validation message, and the suite fails if the layer is off.
# On lavapipe it costs no measurable time (op tests 3:21 with, 3:26 without).
export EMBER_VULKAN_VALIDATE=1 EMBER_VULKAN_REQUIRE_VALIDATION=1

ctest --test-dir build --output-on-failure -j"$jobs"

# (the GPU backends are left out of the sanitizer builds: CI has no GPU, and the release run
# above already builds and tests them)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_SANITIZE_ADDRESS=ON -DEMBER_SANITIZE_UNDEFINED=ON \
    -DEMBER_CUDA=OFF >/dev/null
# The Vulkan shaders' SPIR-V is the release build's (the same glslc, sources and defines; the
# sanitizers do not touch it): copied with their times, so make finds them up to date (~660
# glslc runs, about 2 minutes on 2 cores); make rebuilds any whose sources are newer.
if [ -d build/vk-shaders ] && [ -d build-asan/vk-shaders ]; then
    cp -p build/vk-shaders/*.spv build-asan/vk-shaders/ 2>/dev/null || true
fi
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -L fast -j"$jobs"

# ThreadSanitizer: the thread pool, and contexts decoding on several threads at once.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_SANITIZE_THREAD=ON -DEMBER_CUDA=OFF -DEMBER_VULKAN=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target test-backends test-runtime
TSAN_OPTIONS=halt_on_error=1 ./build-tsan/bin/test-backends
TSAN_OPTIONS=halt_on_error=1 ./build-tsan/bin/test-runtime -tc="*thread*,*concurr*,*decode*"

# aarch64: the NEON kernels (baseline and dot-product), cross-compiled and run under qemu-user,
# plus a model conformance check (scripts/test-aarch64.sh; about 6 minutes on 2 cores).
if [ "${EMBER_SKIP_AARCH64:-0}" = 1 ]; then
    echo "test.sh: aarch64 step skipped (EMBER_SKIP_AARCH64=1)"
else
    ./scripts/test-aarch64.sh
fi
echo "test.sh: all tests passed"
