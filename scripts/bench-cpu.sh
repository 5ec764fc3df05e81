#!/usr/bin/env bash
# CPU benchmark of issue 5: Ember vs the llama.cpp numbers measured on this machine class
# (2 cores, AVX-512, -t 2), on the default model and on a Llama-3.2-1B-shaped random model,
# for Q4_0, Q8_0 and Q4_K_M. The models are made at run time in $EMBER_BENCH_DIR (default
# /tmp/ember-bench; about 3 GB) and never committed.
#
#   scripts/bench-cpu.sh [--quick]     (--quick: default model only, -r 2)
#
# Prints the memory read bandwidth (ember-bench --probe), then one row per model and test with
# Ember's t/s, llama.cpp's and the ratio, and for decode the weight bytes read per second.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${EMBER_BUILD_DIR:-$root/build}
dir=${EMBER_BENCH_DIR:-/tmp/ember-bench}
shared=${EMBER_SHARED_DIR:-$root/../shared}
threads=${EMBER_BENCH_THREADS:-2}
reps=3
quick=0
[ "${1:-}" = "--quick" ] && quick=1 && reps=2
mkdir -p "$dir"

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target ember-bench ember-quantize make-bench-model >/dev/null

"$build/bin/ember-bench" --probe -t "$threads"

# llama.cpp reference (issue 5): model quant pp512 tg128
ref() {
    case "$1-$2" in
        default-q4_0) echo "4677 820" ;;  default-q8_0) echo "3041 643" ;;  default-q4_k_m) echo "3759 621" ;;
        1b-q4_0) echo "129 36.2" ;;       1b-q8_0) echo "74.4 19.4" ;;      1b-q4_k_m) echo "87.1 35.2" ;;
    esac
}

models=()
f16="$shared/models/ember-kjv-25m-f16.gguf"
if [ -f "$f16" ]; then
    for q in q4_0 q8_0 q4_k_m; do
        out="$dir/default-$q.gguf"
        [ -f "$out" ] || "$build/bin/ember-quantize" "$f16" "$out" "$q" 2>/dev/null
        models+=("default $q $out")
    done
else
    echo "bench-cpu: $f16 not found: default model skipped" >&2
fi
if [ $quick = 0 ]; then
    for q in q4_0 q8_0 q4_k_m; do
        out="$dir/1b-$q.gguf"
        [ -f "$out" ] || "$build/bin/make-bench-model" --shape 1b --type "$q" -o "$out" 2>/dev/null
        models+=("1b $q $out")
    done
fi

printf "| model | quant | test | Ember t/s | llama.cpp t/s | ratio | weights read |\n| --- | --- | --- | ---: | ---: | ---: | ---: |\n"
for m in "${models[@]}"; do
    set -- $m
    name=$1 q=$2 file=$3
    read -r ref_pp ref_tg <<<"$(ref "$name" "$q")"
    json=$("$build/bin/ember-bench" -m "$file" -p 512 -n 128 -t "$threads" -r $reps -o json)
    EMBER_JSON="$json" python3 - "$name" "$q" "$ref_pp" "$ref_tg" <<'PY'
import json, os, sys
name, q, ref_pp, ref_tg = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
for r in json.loads(os.environ["EMBER_JSON"]):
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    ref = ref_pp if r["n_prompt"] else ref_tg
    gbs = f"{r['avg_ts'] * r['decode_bytes_per_token'] / 1e9:.1f} GB/s" if r["n_gen"] else ""
    print(f"| {name} | {q} | {test} | {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} | {ref:g} | {r['avg_ts'] / ref:.2f}x | {gbs} |")
PY
done
