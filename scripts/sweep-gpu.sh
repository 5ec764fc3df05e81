#!/usr/bin/env bash
# Decode speed (tg128) of one build under several settings, in one call on the lent GPU: for each
# line of EMBER_SWEEP (a setting such as "EMBER_CUDA_CARVE=swiglu:0", or "-" for none) and each
# model of EMBER_AB_MODELS, one `ember-bench -p 0 -n 128 -r 3` run; then a table, one row a
# setting, with each model's tg128 and its ratio to the first row (EMBER_SWEEP_PP=1: also pp512,
# `-p 512 -n 0 -r 2`, and its ratio). Models and build as
# scripts/ab-gpu.sh makes them (same directories, so a call after ab-gpu reuses them; the same
# EMBER_BUILD_DIR, EMBER_AB_MODEL_DIR, EMBER_AB_MODELS, EMBER_AB_CMAKE and EMBER_AB_DEVICE:
# scripts/gpu-bench-common.sh).
#
#     scripts/device-pack.sh
#     run(command="cd .devpack && EMBER_SWEEP=$'-\nEMBER_CUDA_CACHE_CONFIG=2' scripts/sweep-gpu.sh", carry=[".devpack"])
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-bench-common.sh  # root, build, models_dir, models; gpu_bench_configure, gpu_bench_make_models
logs=${OUT:-/tmp/ember-sweep}
mkdir -p "$logs"
[ -n "${EMBER_SWEEP:-}" ] || { echo "sweep-gpu: EMBER_SWEEP is empty" >&2; exit 1; }
gpu_bench_configure "$logs/sweep" || exit 1
cmake --build "$build" -j"$(nproc)" --target ember-bench >>"$logs/sweep-build.log" 2>&1 || { tail -30 "$logs/sweep-build.log"; exit 1; }
gpu_bench_make_models "$(nproc)" "$logs/sweep-gen.log"
# t/s of the `what` row (tg128 / pp512) of one ember-bench run with the given extra arguments.
bench_ts() {
    local what=$1
    shift
    timeout 240 env "${envs[@]}" "$build/bin/ember-bench" -m "$models_dir/$x.gguf" "$@" --device "${EMBER_AB_DEVICE:-cuda}" --device-bw 0 \
        2>>"$logs/sweep-bench.err" | grep "$what" | awk -F'|' '{print $8}' | awk '{print $1}'
}
declare -A tg
settings=()
while IFS= read -r s; do
    [ -z "$s" ] && continue
    settings+=("$s")
    envs=()
    [ "$s" != "-" ] && read -r -a envs <<<"$s"
    for x in $models; do
        r=$(bench_ts tg128 -p 0 -n 128 -r 3)
        tg["$s|$x"]=${r:-failed}
        echo "$x [$s] tg128 ${r:-failed}"
        if [ "${EMBER_SWEEP_PP:-0}" = 1 ]; then
            r=$(bench_ts pp512 -p 512 -n 0 -r 2)
            tg["$s|$x|pp"]=${r:-failed}
            echo "$x [$s] pp512 ${r:-failed}"
        fi
    done
done <<<"$EMBER_SWEEP"
{
    cols=(""); [ "${EMBER_SWEEP_PP:-0}" = 1 ] && cols+=("|pp")
    printf '\n| setting |'
    for x in $models; do for c in "${cols[@]}"; do printf ' %s %s | ratio |' "$x" "$([ -z "$c" ] && echo tg128 || echo pp512)"; done; done
    printf '\n| --- |'
    for x in $models; do for c in "${cols[@]}"; do printf ' ---: | ---: |'; done; done; printf '\n'
    for s in "${settings[@]}"; do
        printf '| %s |' "$s"
        for x in $models; do
            for c in "${cols[@]}"; do
                v=${tg["$s|$x$c"]}; b=${tg["${settings[0]}|$x$c"]}
                q=$(awk -v v="$v" -v b="$b" 'BEGIN { if (v + 0 > 0 && b + 0 > 0) printf "%.3f", v / b; else print "-" }')
                printf ' %s | %s |' "$v" "$q"
            done
        done
        printf '\n'
    done
} | tee "$logs/sweep-table.md"
