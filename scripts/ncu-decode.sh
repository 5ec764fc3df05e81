#!/usr/bin/env bash
# Nsight Compute sections of decode launches and a kernel trace, per model, in one call on the lent
# GPU (the `run` tool), from a pack (scripts/device-pack.sh):
#
#     run(command="cd .devpack && EMBER_AB_MODELS='8b-NF4 8b-INT4' EMBER_NCU_KERNEL='mvx_glu|mvx_norm' scripts/ncu-decode.sh", carry=[".devpack"])
#
#   EMBER_AB_MODELS    shape-type names (scripts/gpu-bench-common.sh; made here)
#   EMBER_NCU_KERNEL   regex of the kernels to profile (default "mvx_")
#   EMBER_NCU_SKIP / EMBER_NCU_COUNT   matching launches skipped / profiled (default 40 / 8: eager
#                      decode launches of the middle layers, EMBER_CUDA_GRAPHS=0)
#   EMBER_NCU_VARIANTS settings, one profile each beside the default, ";"-separated
#                      ("EMBER_CUDA_NF4_MMA=1;EMBER_CUDA_EXT_NF4_U2=0")
#   EMBER_NCU_TRACE    1 (default): also a kernel trace (tg32, by kernel and grid) of each model
# Output under $OUT: ncu-<model>[-<n>].txt (the sections, the variant n's), trace-<model>.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-bench-common.sh
out=${OUT:-/tmp/ember-ncu}
mkdir -p "$out"
gpu_bench_configure "$out/ncu" || exit 1
gpu_bench_make_models "$(( $(nproc) / 2 ))" "$out/ncu-gen.log" &
gen=$!
cmake --build "$build" -j"$(( $(nproc) / 2 ))" --target ember-bench >>"$out/ncu-build.log" 2>&1 || { tail -30 "$out/ncu-build.log"; exit 1; }
rm -f "$out/ncu-cmake.log" "$out/ncu-build.log"  # (a call returns at most 8 files)
wait $gen
rm -f "$out/ncu-gen.log"
kt=""
if [ "${EMBER_NCU_TRACE:-1}" = 1 ]; then
    cuda=${CUDA_HOME:-/usr/local/cuda}
    g++ -shared -fPIC -O2 -I"$cuda/include" scripts/kernel-trace.cpp -o /tmp/kt.so -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcupti && kt=/tmp/kt.so
fi
IFS=';' read -r -a variants <<<"${EMBER_NCU_VARIANTS:-}"
for x in $models; do
    m="$models_dir/$x.gguf"
    [ -f "$m" ] || { echo "ncu-decode: no model $x"; continue; }
    v=0
    for env in "" "${variants[@]}"; do
        read -r -a envs <<<"$env"
        f="$out/ncu-$x$([ $v -gt 0 ] && echo "-$v").txt"
        echo "# $x ${env:-defaults}" >"$f"
        timeout 240 env "${envs[@]}" EMBER_CUDA_GRAPHS=0 ncu --clock-control none --kernel-name "regex:${EMBER_NCU_KERNEL:-mvx_}" \
            --launch-skip "${EMBER_NCU_SKIP:-40}" --launch-count "${EMBER_NCU_COUNT:-8}" --section SpeedOfLight --section WarpStateStats \
            --section Occupancy --section InstructionStats --section LaunchStats \
            "$build/bin/ember-bench" -m "$m" -p 0 -n 8 -r 1 --device cuda --device-bw 0 >>"$f" 2>&1
        echo "ncu $x ${env:-defaults}: rc=$? $(grep -c 'Duration' "$f") launches"
        v=$((v + 1))
    done
    if [ -n "$kt" ]; then
        EMBER_TRACE_OUT=/tmp/kt-$x.csv CUDA_INJECTION64_PATH="$kt" "$build/bin/ember-bench" -m "$m" -p 0 -n 32 -r 1 --device cuda --device-bw 0 >/dev/null 2>&1
        python3 scripts/kernel-trace.py /tmp/kt-$x.csv --tokens 16 --split-before 'rms_norm_dec_kernel<\d, false||scatter_flat_kernel' --by-grid >"$out/trace-$x.txt" 2>&1
        head -14 "$out/trace-$x.txt"  # (the tables in the output too, should the files not all come back)
    fi
done
