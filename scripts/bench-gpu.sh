#!/usr/bin/env bash
# GPU checks and benchmark of issue 6, in one command for the lent H100/H200 (`run` tool):
# builds the CUDA backend, measures the GPU's device-to-device copy bandwidth, runs the CUDA op
# tests and the whole-model CUDA conformance, then benchmarks random-weight models with the
# shapes of Llama-3.2-1B and Llama-3.1-8B (made here, never committed) against llama.cpp's
# numbers on an H200 (issue 6), with decode's weight bytes per second as a fraction of the
# measured bandwidth (compare fractions when the GPU is an H100).
#
#   scripts/bench-gpu.sh                       everything (1b and 8b; Q4_0, Q8_0, Q4_K_M)
#   EMBER_BENCH_SHAPES=1b EMBER_BENCH_TYPES=Q4_0 scripts/bench-gpu.sh
#   EMBER_BENCH_SKIP_TESTS=1 / EMBER_BENCH_SKIP_BUILD=1     skip those steps
#   EMBER_BENCH_MEMCHECK=1     also run the CUDA tests under compute-sanitizer memcheck
#   EMBER_BENCH_VARIANTS="EMBER_CUDA_GRAPHS=0 EMBER_CUDA_MV_ROWS=2"   extra decode-only rows,
#                                                  each with that environment setting (A=1,B=2: both)
#       (EMBER_CUDA_REPACK=0: Q4_0/Q8_0 weights kept in the GGUF layout; EMBER_CUDA_FUSE=0: no
#       ADD + RMS_NORM or quantizer fusions: the "before" rows of those changes)
#       EMBER_BENCH_VARIANT_PP=1: the variants' rows also measure pp512 (prefill switches:
#       EMBER_CUDA_FA=0 the simple attention kernel, EMBER_CUDA_DQ=0 the old dequantizer)
#   EMBER_BENCH_PROFILE=1      also time one pp512 step per op on the GPU (EMBER_CUDA_PROFILE=1:
#                              an event after every node, eager) for the default and each variant
#                              (EMBER_BENCH_PROFILE_TG=1: 32 decode tokens instead of pp512)
#   EMBER_BENCH_KV="q8_0 fp8_e4m3"   extra tg128 rows at depth EMBER_BENCH_DEPTH (default 4096:
#                              ember-bench -d) with an F16 KV cache and each listed KV type
#                              (--ctk/--ctv names), each as a fraction of the F16 row (issue 6:
#                              quantized KV decode within 5% of F16 KV at 4k context)
#   EMBER_BENCH_PROFILE=ncu-gemm  Nsight Compute sections of the first pp512 GEMM launches
#                              (EMBER_BENCH_NCU_SKIP, _COUNT): tensor-core kernel vs cuBLAS
#   EMBER_BENCH_PROFILE=ncu-kernel  Nsight Compute sections (speed of light, warp states, scheduler,
#                              occupancy, launch) of decode launches of the kernels whose names match
#                              EMBER_BENCH_NCU_KERNEL (a regex, e.g. attn_dec_short; eager launches,
#                              clocks not locked; EMBER_BENCH_NCU_SKIP / _COUNT, default 64 / 4)
#   EMBER_BENCH_PROFILE=ncu    and also profile a few decode tokens of each model with Nsight
#                              Compute (ncu): time, DRAM bytes and GB/s per kernel
#   EMBER_BENCH_PROFILE=trace  a kernel timeline of 32 decode tokens (scripts/kernel-trace.cpp, CUPTI:
#                              each kernel's share of the token's critical path, CUDA graphs and PDL
#                              as they run) and the host time per token (EMBER_PROFILE_HOST=1)
#
# Dependencies: a .devdata folder (carried to the device machine) with deps/ (libxxhash,
# doctest's CMake config) and fixtures/models; without it the system's are used. The tree plus
# all of .devdata is over what a call carries: scripts/device-pack.sh makes a small clean copy
# (HEAD, your changed files, deps, the fixtures of a few types) to run this from. Logs and a
# summary go to $OUT when set (the device tool's output folder), else to $EMBER_BENCH_DIR; the
# per-op profiles (EMBER_BENCH_PROFILE=1) as one archive there, opprof.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${EMBER_BUILD_DIR:-$root/build}
dir=${EMBER_BENCH_DIR:-/tmp/ember-bench}
logs=${OUT:-$dir}
shapes=${EMBER_BENCH_SHAPES:-1b 8b}
types=${EMBER_BENCH_TYPES:-Q4_0 Q8_0 Q4_K_M}
reps=${EMBER_BENCH_REPS:-3}
mkdir -p "$dir" "$logs"
summary=$logs/summary.md
: >"$summary"
say() { echo "$@" | tee -a "$summary"; }
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$summary"; }

deps=$root/.devdata/deps
cmake_extra=()
if [ -d "$deps" ]; then
    export PKG_CONFIG_PATH=$deps/lib/pkgconfig LD_LIBRARY_PATH=$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    cmake_extra+=(-DCMAKE_PREFIX_PATH="$deps")
fi
data_dir=${EMBER_DATA_DIR:-$root/.devdata}
[ -d "$data_dir/fixtures" ] || data_dir=$root/../shared

if [ "${EMBER_BENCH_SKIP_BUILD:-0}" != 1 ]; then
    stamp "configure + build"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_CUDA_ARCHS="${EMBER_CUDA_ARCHS:-90}" \
        -DEMBER_VULKAN=OFF "${cmake_extra[@]}" >"$logs/cmake.log" 2>&1 || { tail -30 "$logs/cmake.log"; exit 1; }
    cmake --build "$build" -j"$(nproc)" --target test-backends test-models ember-bench make-bench-model \
        >"$logs/build.log" 2>&1 || { grep -m20 -B2 -A8 "error" "$logs/build.log"; exit 1; }
    stamp "built"
fi

# GPU, driver, and the device-to-device copy bandwidth (bytes read + written per second).
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | tee -a "$summary"
cat >"$dir/bw.cu" <<'CU'
#include <cstdio>
#include <cuda_runtime.h>
int main() {
    const size_t n = size_t(2) << 30;  // 2 GiB each way
    void *a, *b;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) { std::printf("bandwidth: no memory\n"); return 1; }
    cudaMemset(a, 1, n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    float best = 1e30f;
    for (int i = 0; i < 8; i++) {
        cudaEventRecord(e0);
        cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1);
        if (i > 0 && ms < best) best = ms;
    }
    std::printf("%.1f\n", 2.0 * n / (best * 1e-3) / 1e9);
    return 0;
}
CU
bw=0
if nvcc -O2 -o "$dir/bw" "$dir/bw.cu" 2>"$logs/bw.log"; then bw=$("$dir/bw" | tail -1); fi
say "device-to-device copy bandwidth: $bw GB/s"

if [ "${EMBER_BENCH_SKIP_TESTS:-0}" != 1 ]; then
    stamp "CUDA op tests"
    "$build/bin/test-backends" -tc="*cuda*" >"$logs/test-backends.log" 2>&1
    say "test-backends [cuda]: rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$logs/test-backends.log" | tr '\n' ' ')"
    stamp "CUDA model conformance"
    "$build/bin/test-models" -tc="*cuda*" --data-dir "$data_dir" >"$logs/test-models.log" 2>&1
    say "test-models [cuda]: rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$logs/test-models.log" | tr '\n' ' ')"
fi

# compute-sanitizer memcheck over the CUDA tests (EMBER_BENCH_MEMCHECK=1). API errors are not
# reported: the OOM test fails a cudaMalloc on purpose. Measured on an H200: 0 errors in both.
if [ "${EMBER_BENCH_MEMCHECK:-0}" = 1 ]; then
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for t in test-backends test-models; do
        stamp "compute-sanitizer memcheck: $t [cuda]"
        "$cs" --tool memcheck --report-api-errors no --error-exitcode 9 "$build/bin/$t" -tc="*cuda*" --data-dir "$data_dir" \
            >"$logs/memcheck-$t.log" 2>&1
        say "memcheck $t [cuda]: rc=$? $(grep -E 'ERROR SUMMARY' "$logs/memcheck-$t.log" | tr '\n' ' ')"
    done
fi

# llama.cpp on an H200 (issue 6): pp512 tg128
ref() {
    case "$1-$2" in
        8b-Q4_K_M) echo "9725 269.0" ;; 8b-Q4_0) echo "11304 335.9" ;; 8b-Q8_0) echo "11563 257.0" ;;
        8b-F16) echo "22009 209.9" ;;
        1b-Q4_K_M) echo "41740 899.4" ;; 1b-Q4_0) echo "47393 999.0" ;; 1b-Q8_0) echo "52919 840.5" ;;
        *) echo "0 0" ;;
    esac
}

bench() {  # shape type file label [env...]
    local shape=$1 q=$2 file=$3 label=$4
    shift 4
    local pn=512
    [ "$label" != default ] && [ "${EMBER_BENCH_VARIANT_PP:-0}" != 1 ] && pn=0
    local json
    json=$(env "$@" "$build/bin/ember-bench" -m "$file" -p $pn -n 128 -r "$reps" --device cuda -o json 2>>"$logs/bench.log") || {
        say "| $shape | $q | $label | bench failed (see bench.log) |"
        return
    }
    read -r ref_pp ref_tg <<<"$(ref "$shape" "$q")"
    EMBER_JSON="$json" python3 - "$shape" "$q" "$label" "$ref_pp" "$ref_tg" "$bw" <<'PY' | tee -a "$summary"
import json, os, sys
shape, q, label, ref_pp, ref_tg, bw = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
recs = json.loads(os.environ["EMBER_JSON"])
if label == "default" and recs and recs[0].get("device_bandwidth_gbs"):
    # ember-bench's own view of the device (ember_device_description / _copy_bandwidth)
    print(f"| {shape} | {q} | ember-bench device | {recs[0]['device_description']} | copy {recs[0]['device_bandwidth_gbs']:.0f} GB/s | | | | |")
for r in recs:
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    ref = ref_pp if r["n_prompt"] else ref_tg
    extra = ""
    if r["n_gen"]:
        gbs = r["avg_ts"] * r["decode_bytes_per_token"] / 1e9
        frac = f"{100 * gbs / bw:.0f}%" if bw > 0 else "?"
        # llama.cpp's fraction of the H200's 4240 GB/s at the same model
        lfrac = f"{100 * ref * r['decode_bytes_per_token'] / 1e9 / 4240:.0f}%" if ref else "?"
        extra = f"{gbs:.0f} GB/s | {frac} | {lfrac}"
    else:
        extra = " | | "
    print(f"| {shape} | {q} | {label} | {test} | {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} | {ref:g} | {extra} |")
PY
}

# Decode at depth with each KV cache type (EMBER_BENCH_KV), against F16 KV at the same depth.
kv_depth() {  # shape type file
    local shape=$1 q=$2 file=$3 depth=${EMBER_BENCH_DEPTH:-4096} kv json
    rm -f "$dir/kv-f16-ts"
    for kv in f16 ${EMBER_BENCH_KV}; do
        json=$("$build/bin/ember-bench" -m "$file" -p 0 -n 128 -d "$depth" -r "$reps" --device cuda --ctk "$kv" --ctv "$kv" -o json \
            2>>"$logs/bench.log") || {
            say "| $shape | $q | KV $kv | tg128 @ d$depth: bench failed (see bench.log) |"
            continue
        }
        EMBER_JSON="$json" python3 - "$shape" "$q" "$kv" "$dir/kv-f16-ts" <<'PY' | tee -a "$summary"
import json, os, sys
shape, q, kv, f16_file = sys.argv[1:5]
r = json.loads(os.environ["EMBER_JSON"])[0]
ts = r["avg_ts"]
if kv == "f16":
    open(f16_file, "w").write(str(ts))
f16 = float(open(f16_file).read()) if os.path.exists(f16_file) else 0
rel = f"{ts / f16:.3f} of F16 KV" if kv != "f16" and f16 > 0 else ""
print(f"| {shape} | {q} | KV {kv} | tg{r['n_gen']} @ d{r['n_depth']} | {ts:.1f} ± {r['stddev_ts']:.1f} | | {rel} | | |")
PY
    done
}

# GPU time per op of a pp512 step (the warm-up run and one timed run, both counted), from the
# backend's own event timer (EMBER_CUDA_PROFILE=1).
op_profile() {  # shape type file label [env...]
    local shape=$1 q=$2 file=$3 label=$4
    shift 4
    mkdir -p "$dir/opprof"
    local log=$dir/opprof/$shape-$q-${label//[^A-Za-z0-9_]/_}.log
    local what=(-p 512 -n 0) name=pp512
    [ "${EMBER_BENCH_PROFILE_TG:-0}" = 1 ] && what=(-p 0 -n 32) name=tg32
    env "$@" EMBER_CUDA_PROFILE=1 timeout 120 "$build/bin/ember-bench" -m "$file" "${what[@]}" -r 1 --device cuda >"$log" 2>&1 || true
    say ""
    say "per-op GPU time, $name, $shape $q, $label:"
    grep -E '^(\||ember: .*GPU time)' "$log" | head -40 | tee -a "$summary"
}

# Per-kernel decode profile (eager launches, so each kernel is seen on its own): ncu over a
# window of kernels past the warm-up token, summed per kernel name.
profile() {  # shape type file
    local csv=$dir/ncu-$1-$2.csv
    EMBER_CUDA_GRAPHS=0 timeout 240 ncu --clock-control none --csv --print-units base --launch-skip 700 --launch-count 400 \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active \
        "$build/bin/ember-bench" -m "$3" -p 0 -n 8 -r 1 --device cuda >"$csv" 2>>"$logs/bench.log" || true
    python3 - "$csv" "$1 $2" <<'PY' | tee -a "$summary"
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("profile: no ncu data"); sys.exit()
h = rows[0]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
ii = h.index("ID")
per = collections.defaultdict(dict)
for r in rows[1:]:
    try: per[(r[ii], r[ki])][r[mi]] = float(r[vi].replace(",", ""))
    except ValueError: pass
agg = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
for (i, k), m in per.items():
    name = re.sub(r"\(.*", "", k)[:60]
    a = agg[name]; a[0] += 1; a[1] += m.get("gpu__time_duration.sum", 0)
    a[2] += m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0)
    a[3] += m.get("l1tex__throughput.avg.pct_of_peak_sustained_active", 0); a[4] += m.get("sm__warps_active.avg.pct_of_peak_sustained_active", 0)
tot = sum(a[1] for a in agg.values())
print(f"\nncu {sys.argv[2]}: {len(per)} kernels, {tot/1e3:.0f} us of kernel time")
print("| kernel | n | us | % time | avg us | GB/s | L1 % | warps % |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, a in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"| {name} | {a[0]} | {a[1]/1e3:.0f} | {100*a[1]/tot:.1f} | {a[1]/a[0]/1e3:.1f} | {a[2]/a[1] if a[1] else 0:.0f} | {a[3]/a[0]:.0f} | {a[4]/a[0]:.0f} |")
PY
}

# Nsight Compute sections (speed of light, tensor pipe, issue slots, warp stalls, occupancy) of
# the first prefill GEMM launches of a pp512 step (EMBER_BENCH_PROFILE=ncu-gemm): the tensor-core
# kernel for quantized weights (the default) and cuBLAS over the dequantized copy (EMBER_CUDA_MMQ=0).
profile_gemm() {  # shape type file
    local k
    for k in mmq cublas; do
        local env=(EMBER_CUDA_MMQ=1) re="regex:mmq_(wg_)?kernel"
        [ $k = cublas ] && env=(EMBER_CUDA_MMQ=0) re="regex:gemm|sm90|cutlass"
        env "${env[@]}" timeout 200 ncu --kernel-name "$re" --launch-skip "${EMBER_BENCH_NCU_SKIP:-0}" --launch-count "${EMBER_BENCH_NCU_COUNT:-4}" \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
            --section LaunchStats "$build/bin/ember-bench" -m "$3" -p 512 -n 0 -r 1 --device cuda >"$logs/ncu-gemm-$1-$2-$k.log" 2>&1 || true
        say "ncu $k $1 $2: $(grep -cE '^  [a-z_].*\(' "$logs/ncu-gemm-$1-$2-$k.log") kernels in ncu-gemm-$1-$2-$k.log"
    done
}

# Nsight Compute sections of a few decode launches of one kernel (EMBER_BENCH_PROFILE=ncu-kernel):
# where a latency-bound launch (the attention, a norm) spends its time, stall by stall.
profile_kernel() {  # shape type file
    local re=${EMBER_BENCH_NCU_KERNEL:-attn_dec_short}
    EMBER_CUDA_GRAPHS=0 timeout 240 ncu --clock-control none --kernel-name "regex:$re" --launch-skip "${EMBER_BENCH_NCU_SKIP:-64}" \
        --launch-count "${EMBER_BENCH_NCU_COUNT:-4}" --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section LaunchStats "$build/bin/ember-bench" -m "$3" -p 0 -n 32 -r 1 --device cuda --device-bw 0 \
        >"$logs/ncu-kernel-$1-$2.log" 2>&1 || true
    say "ncu $re $1 $2: $(grep -cE '^  [a-z_].*\(' "$logs/ncu-kernel-$1-$2.log") launches in ncu-kernel-$1-$2.log"
}

# Kernel timeline of decode tokens (EMBER_BENCH_PROFILE=trace): the CUPTI library traces the
# real run (graphs, PDL), kernel-trace.py gives each kernel's share of the critical path; then
# the host time per token from a plain run.
trace() {  # shape type file
    local so=$dir/kernel-trace.so csv=$logs/trace-$1-$2.csv
    [ -f "$so" ] || g++ -shared -fPIC -O2 -I/usr/local/cuda/include scripts/kernel-trace.cpp -o "$so" -L/usr/local/cuda/lib64 \
        -Wl,-rpath,/usr/local/cuda/lib64 -lcupti >>"$logs/bench.log" 2>&1 || { say "trace: cannot build kernel-trace.so"; return; }
    CUDA_INJECTION64_PATH=$so EMBER_TRACE_OUT=$csv timeout 120 "$build/bin/ember-bench" -m "$3" -p 0 -n 32 -r 1 --device cuda --device-bw 0 \
        >>"$logs/bench.log" 2>&1 || true
    say ""
    say "kernel trace, $1 $2 (tg32):"
    # queued decode steps run back to back: a step starts at layer 0's norm (no residual ADD)
    python3 scripts/kernel-trace.py "$csv" --tokens 16 --split-before "rms_norm_dec_kernel<\d, false||scatter_flat_kernel" --by-grid 2>&1 | head -24 | tee -a "$summary"
    EMBER_PROFILE_HOST=1 timeout 120 "$build/bin/ember-bench" -m "$3" -p 0 -n 64 -r 2 --device cuda --device-bw 0 2>&1 | grep -E "host time" | tee -a "$summary"
}

say ""
say "| shape | quant | variant | test | Ember t/s | llama.cpp H200 t/s | weights read | of measured bw | llama.cpp of H200 bw |"
say "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
for shape in $shapes; do
    for q in $types; do
        file=$dir/$shape-$q.gguf
        if [ ! -f "$file" ]; then
            "$build/bin/make-bench-model" --shape "$shape" --type "$q" -t "$(nproc)" -o "$file" >>"$logs/make-model.log" 2>&1 || {
                say "| $shape | $q | model generation failed (make-model.log) |"
                continue
            }
            sync  # the new file's dirty pages written out now, not by the kernel while the bench runs
        fi
        bench "$shape" "$q" "$file" default
        for v in ${EMBER_BENCH_VARIANTS:-}; do bench "$shape" "$q" "$file" "$v" ${v//,/ }; done
        [ -n "${EMBER_BENCH_KV:-}" ] && kv_depth "$shape" "$q" "$file"
        if [ "${EMBER_BENCH_PROFILE:-0}" != 0 ] && [ "${EMBER_BENCH_PROFILE:-0}" != ncu-gemm ] && [ "${EMBER_BENCH_PROFILE:-0}" != ncu-kernel ] &&
            [ "${EMBER_BENCH_PROFILE:-0}" != trace ]; then
            op_profile "$shape" "$q" "$file" default
            for v in ${EMBER_BENCH_VARIANTS:-}; do op_profile "$shape" "$q" "$file" "$v" ${v//,/ }; done
        fi
        [ "${EMBER_BENCH_PROFILE:-0}" = ncu ] && profile "$shape" "$q" "$file"
        [ "${EMBER_BENCH_PROFILE:-0}" = trace ] && trace "$shape" "$q" "$file"
        [ "${EMBER_BENCH_PROFILE:-0}" = ncu-gemm ] && profile_gemm "$shape" "$q" "$file"
        [ "${EMBER_BENCH_PROFILE:-0}" = ncu-kernel ] && profile_kernel "$shape" "$q" "$file"
        # The models are large (8b Q8_0 is 8.5 GB): keep the disk for the next one.
        [ "${EMBER_BENCH_KEEP:-0}" = 1 ] || rm -f "$file"
    done
done
# The per-op logs in one archive (a device call returns only so many files: session 62 lost
# its profiles to that): $logs/opprof.tgz, the summary holding their first rows.
if [ -d "$dir/opprof" ]; then
    tar czf "$logs/opprof.tgz" -C "$dir" opprof && rm -rf "$dir/opprof"
fi
stamp "done"
