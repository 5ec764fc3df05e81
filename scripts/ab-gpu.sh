#!/usr/bin/env bash
# Decode speed of working-tree edits (B) against HEAD (A) in one call on the lent GPU: builds the
# pack as it is (your edits, B), runs the CUDA tests named by EMBER_AB_TESTS on it, benchmarks
# every model; then puts HEAD's versions of the edited files back (.devpack/.ab-head/, written by
# scripts/device-pack.sh), rebuilds what changed and benchmarks again (A). Models are made here
# with make-bench-model (never committed). EMBER_AB_ENV_A / EMBER_AB_ENV_B: settings for one side's
# runs only ("EMBER_CUDA_X=0 EMBER_CUDA_Y=2"); with them and no edited files (a pack made with no
# FILES) the two sides are one build, told apart by their settings.
#
#     scripts/device-pack.sh backends/cuda/ops-matvec-q.cu
#     run(command="cd .devpack && EMBER_AB_MODELS='1b-Q4_0 8b-Q4_K_M' scripts/ab-gpu.sh", carry=[".devpack"])
#
#   EMBER_AB_MODELS   shape-type names (default "1b-Q4_0 8b-Q4_0"; types as make-bench-model's --type)
#   EMBER_AB_RUNS     ember-bench runs per model and side (default 2; each -p 0 -n 128 -r 3)
#   EMBER_AB_DEPTHS   KV depths to run each model at (ember-bench -d; default "0"): "0 384 4096"
#                     gives rows "1b-Q4_0", "1b-Q4_0@d384", "1b-Q4_0@d4096" (tg128 after that many
#                     tokens of cache)
#   EMBER_AB_BENCH_ARGS  more ember-bench arguments for every run, e.g. "--ctk q8_0 --ctv q8_0"
#   EMBER_AB_PP       1: prefill instead of decode: each run -p 512 -n 0 -r 3, the table in pp512 t/s
#                     (a change of the prefill GEMM or its dequantizer against HEAD)
#   EMBER_AB_TESTS    a doctest -tc filter for test-backends on B (e.g. "*integer matvec*"), or empty
#   EMBER_AB_MODEL_TESTS  the same for test-models on B (e.g. "*tiny models in every Ember weight type on the GPU*")
#   EMBER_AB_ORDER    "BA" (default) or "ABA" (A, then B, then A again: drift between the sides shows)
#   EMBER_AB_ENV_C    a third side: B's build (the edits) with these settings instead of B's, run after
#                     B ("BCA" unless EMBER_AB_ORDER names C); a column of its own in the table, and
#                     with EMBER_AB_TRACE its trace against A's
#   EMBER_AB_ENV_D .. EMBER_AB_ENV_G  a fourth to seventh side, as C (after it: "BCDEFGA"): settings
#                     cost only their runs, the build being B's
#   EMBER_AB_TRACE    1: also a kernel trace of each model on each side (tg32, scripts/kernel-trace.cpp
#                     through CUPTI; tables by kernel and grid) and, at the end, per model the launches
#                     whose critical-path time moved most (scripts/kernel-trace-diff.py); the tables
#                     in $OUT/ab-traces.txt
#   EMBER_AB_LIMIT    seconds one ember-bench run or the test run may take (default 240; then killed:
#                     a side that hangs, e.g. an opt-in kernel waiting for a flag, ends as "failed")
#   EMBER_AB_DEVICE   ember-bench --device (default cuda); EMBER_AB_CMAKE: the backend options
#                     (default "-DEMBER_CUDA=ON -DEMBER_CUDA_ARCHS=90 -DEMBER_VULKAN=OFF"), so the
#                     same A/B runs on the CPU here: EMBER_AB_DEVICE=cpu EMBER_AB_CMAKE="-DEMBER_CUDA=OFF
#                     -DEMBER_VULKAN=OFF" EMBER_AB_MODELS=tiny-Q4_0 (from a pack, as above)
# New files of the edit stay on both sides.
# Output: one line per run and a table of the mean tg128 (EMBER_AB_PP: pp512) per model and side with B / A; copies of the
# logs under $OUT when set (a call brings back at most 8 files from $OUT, and this writes more: set
# OUT to a folder of its own for the script and archive it into the call's $OUT at the end, e.g.
# `R=$OUT; OUT=/tmp/abo scripts/ab-gpu.sh ...; tar czf $R/ab.tgz -C /tmp abo`).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-bench-common.sh  # root, build, models_dir, models; gpu_bench_configure, gpu_bench_make_models
logs=${OUT:-/tmp/ember-ab}
runs=${EMBER_AB_RUNS:-2}
order=${EMBER_AB_ORDER:-BA}
extra=""  # the settings-only sides C .. G not named in EMBER_AB_ORDER, run after B
for x in C D E F G; do
    v=EMBER_AB_ENV_$x
    [ -n "${!v:-}" ] && [ "$order" = "${order/$x/}" ] && extra+=$x
done
order=${order/B/B$extra}
depths=${EMBER_AB_DEPTHS:-0}
if [ "${EMBER_AB_PP:-0}" = 1 ]; then test_name=pp512 test_args=(-p 512 -n 0); else test_name=tg128 test_args=(-p 0 -n 128); fi
read -r -a bench_args <<<"${EMBER_AB_BENCH_ARGS:-}"
row_key() { [ "$2" = 0 ] && echo "$1" || echo "$1@d$2"; }  # a table row: model, or model@dN at a depth past 0
keys=""
for x in $models; do
    for dep in $depths; do keys+="$(row_key "$x" "$dep") "; done
done
run_limit=${EMBER_AB_LIMIT:-240}  # seconds for one ember-bench run or the test run (a hang is killed, the rest goes on)
mkdir -p "$logs"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
if [ ! -d .ab-head ] && [ -z "${EMBER_AB_ENV_A:-}${EMBER_AB_ENV_B:-}" ]; then
    echo "ab-gpu: nothing tells A from B: no .ab-head/ (a pack made by scripts/device-pack.sh FILES) and no EMBER_AB_ENV_A / _B" >&2
    exit 1
fi
mkdir -p .ab-head

device=${EMBER_AB_DEVICE:-cuda}
gpu_bench_configure "$logs/ab" || exit 1
# The models in the background while the rest builds.
gpu_bench_make_models "$(( $(nproc) / 2 ))" "$logs/ab-gen.log" &
gen=$!
traces=/tmp/ember-ab-traces
kt=""
if [ "${EMBER_AB_TRACE:-0}" = 1 ]; then
    rm -rf "$traces" && mkdir -p "$traces"
    cuda=${CUDA_HOME:-/usr/local/cuda}
    if g++ -shared -fPIC -O2 -I"$cuda/include" scripts/kernel-trace.cpp -o "$traces/kt.so" -L"$cuda/lib64" \
        -Wl,-rpath,"$cuda/lib64" -lcupti >"$logs/ab-trace-build.log" 2>&1; then
        kt=$traces/kt.so
    else
        echo "ab-gpu: no kernel trace (scripts/kernel-trace.cpp did not build: CUPTI?)"; tail -5 "$logs/ab-trace-build.log"
    fi
fi
targets=(ember-bench)
[ -n "${EMBER_AB_TESTS:-}" ] && targets+=(test-backends)
[ -n "${EMBER_AB_MODEL_TESTS:-}" ] && targets+=(test-models)
build_side() {
    cmake --build "$build" -j"$(( $(nproc) / 2 ))" --target "${targets[@]}" >>"$logs/ab-build.log" 2>&1 ||
        { grep -m5 -A5 error "$logs/ab-build.log"; return 1; }
}
# Swap the edited files: "A" puts HEAD's versions in place, "B" the edits (kept in .ab-edit/).
swap_to() {
    (cd .ab-head && find . -type f) | while read -r f; do
        f=${f#./}
        if [ "$1" = A ]; then
            mkdir -p ".ab-edit/$(dirname "$f")"
            [ -f ".ab-edit/$f" ] || cp "$f" ".ab-edit/$f"
            cp ".ab-head/$f" "$f"
        else
            cp ".ab-edit/$f" "$f"
        fi
    done
}
results=$logs/ab-results.txt
: >"$results"
bench_side() {
    local side=$1 x r
    local -a envs
    case $side in
        A) read -r -a envs <<<"${EMBER_AB_ENV_A:-}" ;;
        B) read -r -a envs <<<"${EMBER_AB_ENV_B:-}" ;;
        C) read -r -a envs <<<"${EMBER_AB_ENV_C:-}" ;;
        D) read -r -a envs <<<"${EMBER_AB_ENV_D:-}" ;;
        E) read -r -a envs <<<"${EMBER_AB_ENV_E:-}" ;;
        F) read -r -a envs <<<"${EMBER_AB_ENV_F:-}" ;;
        G) read -r -a envs <<<"${EMBER_AB_ENV_G:-}" ;;
    esac
    for x in $models; do
        while [ ! -f "$models_dir/$x.gguf" ]; do
            kill -0 "$gen" 2>/dev/null || { echo "ab-gpu: no model $x (see ab-gen.log)"; continue 2; }
            sleep 1
        done
        for dep in $depths; do
            key=$(row_key "$x" "$dep")
            for ((i = 0; i < runs; i++)); do
                r=$(timeout "$run_limit" env "${envs[@]}" "$build/bin/ember-bench" -m "$models_dir/$x.gguf" "${test_args[@]}" -d "$dep" -r 3 \
                    --device "$device" --device-bw 0 "${bench_args[@]}" 2>>"$logs/ab-bench.err" | grep "$test_name" | awk -F'|' '{print $8}' |
                    awk '{print $1}')
                echo "$key $side $test_name ${r:-failed}"
                [ -n "$r" ] && echo "$key $side $r" >>"$results"
            done
        done
        if [ -n "$kt" ]; then  # queued steps leave no gap: a token starts at layer 0's norm
            timeout "$run_limit" env "${envs[@]}" CUDA_INJECTION64_PATH="$kt" EMBER_TRACE_OUT="$traces/$x-$side.csv" "$build/bin/ember-bench" \
                -m "$models_dir/$x.gguf" -p 0 -n 32 -r 1 --device "$device" --device-bw 0 >/dev/null 2>>"$logs/ab-bench.err"
            python3 scripts/kernel-trace.py "$traces/$x-$side.csv" --tokens 16 --split-before 'rms_norm_dec_kernel<\d, false||scatter_flat_kernel' \
                --by-grid >"$traces/$x-$side.txt" 2>&1
        fi
    done
}
on=B  # whose files are in place: the pack comes with B's (the edits)
for ((k = 0; k < ${#order}; k++)); do
    side=${order:k:1}
    want=$([ "$side" = A ] && echo A || echo B)  # C .. G run B's build
    if [ "$want" != "$on" ]; then
        swap_to "$want"
        on=$want
    fi
    build_side || exit 1
    stamp "built $side"
    if [ "$side" = B ] && [ -n "${EMBER_AB_TESTS:-}" ]; then
        read -r -a envs_b <<<"${EMBER_AB_ENV_B:-}"
        timeout "$run_limit" env "${envs_b[@]}" "$build/bin/test-backends" -tc="$EMBER_AB_TESTS" >"$logs/ab-tests.log" 2>&1
        echo "tests on B (rc=$?): $(grep -E '^\[doctest\] (test cases|assertions)' "$logs/ab-tests.log" | tr '\n' ' ')"
        grep -m3 -B3 -A10 "ERROR" "$logs/ab-tests.log" | head -30
    fi
    if [ "$side" = B ] && [ -n "${EMBER_AB_MODEL_TESTS:-}" ]; then
        read -r -a envs_b <<<"${EMBER_AB_ENV_B:-}"
        timeout "$run_limit" env "${envs_b[@]}" "$build/bin/test-models" -tc="$EMBER_AB_MODEL_TESTS" >"$logs/ab-model-tests.log" 2>&1
        echo "model tests on B (rc=$?): $(grep -E '^\[doctest\] (test cases|assertions)' "$logs/ab-model-tests.log" | tr '\n' ' ')"
        grep -m3 -B3 -A10 "ERROR" "$logs/ab-model-tests.log" | head -30
    fi
    bench_side "$side"
done
swap_to B  # the pack as it came
echo
cols=""  # the sides past B that ran, in order
for x in C D E F G; do [ "$order" != "${order/$x/}" ] && cols+=$x; done
head="| model | A (HEAD${EMBER_AB_ENV_A:+, $EMBER_AB_ENV_A}) $test_name | B (edits${EMBER_AB_ENV_B:+, $EMBER_AB_ENV_B}) $test_name | B / A |"
rule="| --- | ---: | ---: | ---: |"
for ((k = 0; k < ${#cols}; k++)); do
    x=${cols:k:1} v=EMBER_AB_ENV_${cols:k:1}
    head+=" $x (edits, ${!v:-}) $test_name | $x / A |"
    rule+=" ---: | ---: |"
done
echo "$head"
echo "$rule"
for x in $keys; do
    awk -v x="$x" -v cols="$cols" '$1 == x { s[$2] += $3; n[$2]++ }
        END { a = n["A"] ? s["A"] / n["A"] : 0; b = n["B"] ? s["B"] / n["B"] : 0
              r = a > 0 ? sprintf("%.3f", b / a) : "-"  # (not inside printf: ">" there redirects)
              printf "| %s | %.1f | %.1f | %s |", x, a, b, r
              for (k = 1; k <= length(cols); k++) {
                  c = substr(cols, k, 1); cc = n[c] ? s[c] / n[c] : 0
                  rc = a > 0 ? sprintf("%.3f", cc / a) : "-"
                  printf " %.1f | %s |", cc, rc
              }
              printf "\n" }' "$results"
done
if [ -n "$kt" ]; then
    : >"$logs/ab-traces.txt"
    for x in $models; do
        for side in A B C D E F G; do
            [ -f "$traces/$x-$side.txt" ] || continue
            { echo "== $x $side"; cat "$traces/$x-$side.txt"; echo; } >>"$logs/ab-traces.txt" 2>/dev/null
        done
        for side in B C D E F G; do
            [ -f "$traces/$x-$side.txt" ] || continue
            echo
            echo "$x, kernel trace (tg32, critical path), $side against A:"
            python3 scripts/kernel-trace-diff.py "$traces/$x-A.txt" "$traces/$x-$side.txt" --top 8 --names A "$side"
        done
    done
fi
stamp done
# At most 8 files come back from a `run` call's $OUT: the empty logs make room for the traces.
find "$logs" -maxdepth 1 -type f -empty -delete 2>/dev/null
rm -f "$logs/ab-cmake.log"
