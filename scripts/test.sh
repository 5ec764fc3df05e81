#!/usr/bin/env bash
# The whole test suite: a release build with every test (model conformance against ../shared
# when it is there), the fast suite again under AddressSanitizer + UndefinedBehaviorSanitizer,
# and the threaded tests under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

./scripts/setup.sh
ctest --test-dir build --output-on-failure -j"$jobs"

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_SANITIZE_ADDRESS=ON -DEMBER_SANITIZE_UNDEFINED=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -L fast -j"$jobs"

# ThreadSanitizer: the thread pool, and contexts decoding on several threads at once.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_SANITIZE_THREAD=ON >/dev/null
cmake --build build-tsan -j"$jobs" --target test-backends test-runtime
TSAN_OPTIONS=halt_on_error=1 ./build-tsan/bin/test-backends
TSAN_OPTIONS=halt_on_error=1 ./build-tsan/bin/test-runtime -tc="*thread*,*concurr*,*decode*"
echo "test.sh: all tests passed"
