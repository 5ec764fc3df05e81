#!/usr/bin/env bash
# Mutation fuzzing of what reads untrusted input, under ASan + UBSan, on the CPU: GGUF loading
# (and tokenize / chat template / decode of what loads), the chat template interpreter, the JSON
# variables of a template, tokenizers on random text, and ember_model_quantize. Builds libember
# with the sanitizers (no GPU backends) in $EMBER_FUZZ_BUILD (default /tmp/ember-fuzz-build), the
# harnesses of scripts/fuzz/, then runs each over seeds 1..SEEDS (default 20) of ITERATIONS
# inputs (default 200; templates and JSON 10x, quantize 1/4). Stops at the first sanitizer report
# or crash and prints it; the input is in /tmp/ember-fuzz/. Needs ../shared (fixtures).
#
#     scripts/fuzz.sh [SEEDS] [ITERATIONS]      (session 63: 200 x 200 load, 250 x 2000 templates,
#                                                240k JSON, 120k tokenizer texts, 3000 quantize runs)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seeds=${1:-20}
iters=${2:-200}
build=${EMBER_FUZZ_BUILD:-/tmp/ember-fuzz-build}
shared=${EMBER_SHARED_DIR:-$root/../shared}
fixtures=$shared/fixtures
[ -d "$fixtures/models" ] || { echo "fuzz: no $fixtures/models" >&2; exit 1; }
mkdir -p /tmp/ember-fuzz
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_CUDA=OFF -DEMBER_VULKAN=OFF -DEMBER_BUILD_TESTS=OFF \
    -DEMBER_BUILD_TOOLS=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_SANITIZE_ADDRESS=ON -DEMBER_SANITIZE_UNDEFINED=ON >"$build.cmake.log" 2>&1 ||
    { tail -20 "$build.cmake.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target ember_static >"$build.build.log" 2>&1 || { tail -30 "$build.build.log"; exit 1; }
lib=$(find "$build" -name libember.a | head -1)
for h in load template json tokenize quantize; do
    g++ -std=c++17 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -I"$root/include" -I"$build/include" \
        "scripts/fuzz/fuzz-$h.cpp" "$lib" -lpthread -lxxhash -ldl -o "$build/fuzz-$h"
done
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
m=$fixtures/models
v=$fixtures/vocab
run() {  # name iterations args...
    local h=$1 n=$2
    shift 2
    for s in $(seq 1 "$seeds"); do
        "$build/fuzz-$h" "$s" "$n" "$@" >"/tmp/ember-fuzz/$h-$s.log" 2>&1 ||
            { echo "fuzz-$h: seed $s failed (input in /tmp/ember-fuzz/):"; tail -40 "/tmp/ember-fuzz/$h-$s.log"; exit 1; }
    done
    echo "fuzz-$h: $seeds seeds x $n: no reports"
}
run load "$iters" "$m/tiny-llama-Q4_0.gguf" "$m/tiny-qwen3-Q4_K_M.gguf" "$m/tiny-llama-Q2_K.gguf" \
    "$v/ggml-vocab-llama-spm.gguf" "$v/ggml-vocab-gpt-2.gguf" "$v/ggml-vocab-phi-3.gguf"
run template $((iters * 10))
run json $((iters * 10))
run tokenize "$iters" "$v"/*.gguf
run quantize $(((iters + 3) / 4)) "$m/tiny-llama-F16.gguf" "$m/tiny-qwen3-F16.gguf" "$m/tiny-llama-Q4_0.gguf" "$m/tiny-qwen2-F16.gguf"
