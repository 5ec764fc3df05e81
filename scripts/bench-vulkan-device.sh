#!/usr/bin/env bash
# Vulkan backend checks and benchmark on the lent NVIDIA GPU (issue 7), from a build made on
# the development machine (the device machine has no glslc or Vulkan SDK, and no loader).
#
# 1. Here, after a Release build with the Vulkan backend (EMBER_VULKAN=ON):
#        scripts/bench-vulkan-device.sh pack /tmp/b-vk
#    copies the programs and libraries it needs into .vkbench/ (libxxhash too), downloads the
#    Vulkan loader's .deb files into .gl/ (as /work/.library/device/README.md says) when they
#    are not there yet, and lists both folders in .git/info/exclude.
# 2. On the device machine (`run` tool, carry [".vkbench", ".gl"]):
#        scripts/bench-vulkan-device.sh run .vkbench
#    unpacks the loader, points it at NVIDIA's driver when it finds none by itself, runs the
#    Vulkan op tests and the Vulkan model tests (fixtures from .devdata/fixtures, carried too
#    when present: carry [".vkbench", ".gl", ".devdata"]) on the GPU, then makes random-weight models with the shapes of
#    Llama-3.2-1B / Llama-3.1-8B and runs ember-bench --device vulkan on them (pp512, tg128),
#    next to llama.cpp's CUDA numbers on an H200 (issue 6) and, for decode, the weight bytes read
#    per second. One 10-minute command holds one shape comfortably: run 1b and 8b separately.
#
#   EMBER_BENCH_SHAPES="1b 8b"  EMBER_BENCH_TYPES="Q4_0 Q8_0 Q4_K_M"  EMBER_BENCH_REPS=3
#   EMBER_BENCH_SKIP_TESTS=1    skip the op tests
#   EMBER_BENCH_ROUNDS=N        run the default row and every variant N times, round by round
#                               (one process each; pp512 in the first round only), then each
#                               one's median tg128: the same settings differ by up to 4%
#                               between processes on the H200, so compare medians
#   EMBER_VK_PACK_BENCH_ONLY=1  (pack) only ember-bench and make-bench-model, xz-compressed
#                               (~8 MB): benchmark calls with EMBER_BENCH_SKIP_TESTS=1, which
#                               fit beside the tree where the full pack (~110 MB) does not
#   EMBER_VK_PACK_FIXTURES=1    (pack) the Vulkan model tests' fixtures in the pack and the
#                               programs xz-compressed: carry [".vkbench", ".gl"] runs the model
#                               tests on the GPU too, without .devdata
#   EMBER_BENCH_VARIANTS="EMBER_VULKAN_MMV_GENERIC=1 EMBER_VULKAN_MMV_ROWS=1 EMBER_VULKAN_NO_CMD_REUSE=1
#                         EMBER_VULKAN_BARRIERS=all EMBER_VULKAN_FUSE=0"
#                               (the default) extra decode-only rows, each with that environment
#                               setting: the generic matrix-vector kernel instead of the fast
#                               one, the fast one with 1 row per invocation instead of 2, every
#                               graph recorded again instead of resubmitted, a barrier after
#                               every dispatch (graph order) instead of between dependency
#                               levels, no fused dispatches. EMBER_VULKAN_PROFILE=1 as a variant
#                               puts the GPU time per kernel (dispatches serialized) and the host
#                               time per token (submission to submission, fence waits, set/get
#                               tensor) in bench.log; EMBER_VULKAN_PROFILE=graph times only whole
#                               graphs, barriers as planned (GPU time per token as it runs
#                               against the host's wall time). A=1,B=2 as one variant sets both.
#                               EMBER_VULKAN_MMV_Q4_0=units: Q4_0 decode products by 256-weight
#                               units in registers (the kernel before the quarter-block one).
#                               EMBER_VULKAN_DEFER_UPLOADS=0: every small input upload its own
#                               submission and wait (not recorded into the next graph's).
#                               Decode kernels (each one's default on, =0 / =units off):
#                               EMBER_VULKAN_FUSE_GLU=0 (FFN gate + up + SWIGLU apart),
#                               EMBER_VULKAN_MMV_Q8_0=units, EMBER_VULKAN_MMV_Q6_K=units (the
#                               256-weight-unit kernels instead of the small-unit ones),
#                               EMBER_VULKAN_MMV_Q6_K=qq (Q6_K by the small-unit kernel: one
#                               column not by rows staged through shared memory, the fused
#                               forms (the V product + cache write) not by the QX kernel),
#                               EMBER_VULKAN_MMV_Q6_K_ROWS=1|2|4|8 (rows per row group of that),
#                               EMBER_VULKAN_MMV_Q6_K_DEPTH=2 (two of its segments in flight),
#                               EMBER_VULKAN_MMV_Q6_K_SPLIT=1|2|4 (row groups per long row),
#                               EMBER_VULKAN_SPIN_US=0 (block on the decode fence at once),
#                               EMBER_VULKAN_MMV_LPR=32|64|128 (the most invocations per row),
#                               EMBER_VULKAN_MMV_QQ_ROWS=1|2, EMBER_VULKAN_ATTN_SG=0 (attention
#                               reductions through shared memory only), EMBER_VULKAN_ATTN_KP=2|8
#                               (attention tiles of 128 | 32 keys instead of 64),
#                               EMBER_VULKAN_FUSE_KV=0 (K/V products and their SET_ROWS into
#                               the F16 cache apart), EMBER_VULKAN_MMV_SG=0 (small-unit decode
#                               products: row sums through shared memory only, no subgroupAdd),
#                               EMBER_VULKAN_NORM_SG=0 (RMS norm: shared-memory reduction, norm
#                               weights loaded after it), EMBER_VULKAN_FUSE_NORM=1 (the O and FFN
#                               down products, their residual ADD and the next RMS_NORM + MUL
#                               in one dispatch whose last workgroup does the norm; off by default),
#                               EMBER_VULKAN_ATTN_RANGE=0 (attention over every key of the cache
#                               view, not only up to the last one the mask shows).
#                               EMBER_VULKAN_MMV_QX=0 (Q4_0, Q4_K decode products on the
#                               float kernels above instead of x quantized to 8 bits per
#                               workgroup and integer products), =all (Q6_K too, whatever
#                               EMBER_VULKAN_MMV_Q6_K says), =nodot (all
#                               four, the integer products without dot product instructions),
#                               EMBER_VULKAN_MMV_QX_ROWS=1|2, EMBER_VULKAN_MMV_QX_WG=64|128|256,
#                               EMBER_VULKAN_MMV_QX_LPR=16..256 (rows per invocation, workgroup
#                               size, invocations per row of those kernels).
#                               EMBER_VULKAN_MMV_QX_PRE=0 (those kernels quantize x in every
#                               workgroup instead of reading it quantized once per product
#                               input by a quantize_x dispatch that Q, K, V share).
#                               EMBER_VULKAN_MMV_QX_OUT=0: that copy made by a quantize_x
#                               dispatch, not by the dispatch that makes x (by default: the
#                               norms, product + norm, ATTN; =1 gate + up + SWIGLU too; their
#                               "_xq" shader variants); =code: those variants with the copy
#                               off and quantize_x dispatches (to compare).
#                               EMBER_VULKAN_READBACK=0: the logits read through a staging copy
#                               and a second submission after the graph, instead of copied into
#                               host memory by the graph's own command buffer.
#                               EMBER_VULKAN_MM_BIG=0|1 (prefill too): 64x64 | 128x128 tiles
#                               for every prefill product instead of choosing by size.
#   EMBER_BENCH_DEVICE=vulkan   the ember-bench device (vulkan:N to pick one)
# Logs and summary.md go to $OUT when set (the device tool's output folder), else to
# $EMBER_BENCH_DIR (default /tmp/ember-bench-vk), where the models are made too.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-}
pkg=${2:-}

if [ "$mode" = pack ]; then
    build=${pkg:?usage: $0 pack BUILD_DIR}
    # EMBER_VK_PACK: the folder to pack into (.vkbench; another name lets two builds coexist).
    out=${EMBER_VK_PACK:-.vkbench}
    case "$out" in .vk*) ;; *) echo "EMBER_VK_PACK must be a top-level folder named .vk*" >&2; exit 2 ;; esac
    # EMBER_VK_PACK_BENCH_ONLY=1: ember-bench and make-bench-model only, as one xz tarball
    # (~8 MB; the test programs are ~34 MB each): for `run` with EMBER_BENCH_SKIP_TESTS=1.
    bench_only=${EMBER_VK_PACK_BENCH_ONLY:-0}
    progs="ember-bench test-backends test-models make-bench-model"
    [ "$bench_only" = 1 ] && progs="ember-bench make-bench-model"
    for p in $progs; do
        [ -x "$build/bin/$p" ] || missing="${missing:-} $p"
    done
    [ -z "${missing:-}" ] || {
        echo "$build: build$missing first (cmake --build $build --target ...)" >&2
        exit 1
    }
    # (flags.make: Makefile generators; build.ninja: Ninja)
    grep -qs EMBER_HAVE_VULKAN "$build/CMakeFiles/ember_objs.dir/flags.make" "$build/build.ninja" || {
        echo "$build was configured without the Vulkan backend (EMBER_VULKAN=ON)" >&2
        exit 1
    }
    rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
    for p in $progs; do cp "$build/bin/$p" "$out/bin/"; done
    cp -L "$build/lib/libember.so.1" "$out/lib/"  # the soname the programs ask for, as a plain file
    # libxxhash: the device image may not have it.
    xx=$(ldd "$build/bin/ember-bench" | awk '/libxxhash/ {print $3}')
    [ -n "$xx" ] && cp -L "$xx" "$out/lib/"
    # Without symbols: the pack and the tracked tree must fit the 64 MiB a device call carries.
    strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
    # EMBER_VK_PACK_FIXTURES=1: also the fixtures the Vulkan model tests read (from
    # EMBER_DATA_DIR, default ../shared), and bin/ + lib/ as one xz tarball (unpacked by `run`):
    # the plain pack, .devdata and the tree (30 MB with the default model) do not fit together.
    if [ "${EMBER_VK_PACK_FIXTURES:-0}" = 1 ]; then
        data=${EMBER_DATA_DIR:-$root/../shared}
        mkdir -p "$out/fixtures/models"
        cp "$data/fixtures/models/manifest.json" "$data/fixtures/models/README.md" "$out/fixtures/models/"
        for n in $(grep -oh '"tiny-[a-z0-9]*-[A-Za-z0-9_]*"' tests/models/test_vulkan_models.cpp tests/backends/test_vulkan_ops.cpp | tr -d '"' | sort -u); do
            cp "$data/fixtures/models/$n".* "$out/fixtures/models/" || exit 1
        done
        chmod -R u+w "$out/fixtures"  # copies of read-only files: the next pack removes them
        tar -C "$out" -cJf "$out/pack.tar.xz" bin lib && rm -rf "$out/bin" "$out/lib"
    elif [ "$bench_only" = 1 ]; then
        tar -C "$out" -cJf "$out/pack.tar.xz" bin lib && rm -rf "$out/bin" "$out/lib"
    fi
    if ! ls .gl/*.deb >/dev/null 2>&1; then
        mkdir -p .gl /tmp/amd64/partial
        o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
        # shellcheck disable=SC2086
        apt-get $o update >/dev/null && (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2) || {
            echo "could not download the Vulkan loader packages into .gl/" >&2
            exit 1
        }
    fi
    for d in "/$out/" /.gl/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >>.git/info/exclude; done
    du -sh "$out" .gl
    echo "now, on the device machine: scripts/bench-vulkan-device.sh run $out   (carry $out, .gl, and .devdata for the model tests)"
    exit 0
fi

[ "$mode" = run ] && [ -n "$pkg" ] || {
    echo "usage: $0 pack BUILD_DIR   (here)  |  $0 run PACKED_DIR   (on the device machine)" >&2
    exit 2
}
pkg=$(cd "$pkg" && pwd) || exit 1
# A pack made with EMBER_VK_PACK_FIXTURES=1: programs in a tarball, fixtures beside it.
if [ -f "$pkg/pack.tar.xz" ]; then
    unpacked=/tmp/ember-vk-pack
    rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -C "$unpacked" -xJf "$pkg/pack.tar.xz" || exit 1
    [ -d "$pkg/fixtures/models" ] && ln -sfn "$pkg/fixtures" "$unpacked/fixtures"
    pkg=$unpacked
fi
bin=$pkg/bin
export LD_LIBRARY_PATH=$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dir=${EMBER_BENCH_DIR:-/tmp/ember-bench-vk}
logs=${OUT:-$dir}
shapes=${EMBER_BENCH_SHAPES:-1b 8b}
types=${EMBER_BENCH_TYPES:-Q4_0 Q8_0 Q4_K_M}
reps=${EMBER_BENCH_REPS:-3}
device=${EMBER_BENCH_DEVICE:-vulkan}
rounds=${EMBER_BENCH_ROUNDS:-1}
round=1
variants=${EMBER_BENCH_VARIANTS-EMBER_VULKAN_MMV_GENERIC=1 EMBER_VULKAN_MMV_ROWS=1 EMBER_VULKAN_NO_CMD_REUSE=1 EMBER_VULKAN_BARRIERS=all EMBER_VULKAN_FUSE=0}
mkdir -p "$dir" "$logs"
summary=$logs/summary.md
: >"$summary"
say() { echo "$@" | tee -a "$summary"; }
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$summary"; }

# The Vulkan loader (the image has none) and NVIDIA's driver manifest.
if ! ldconfig -p | grep -q 'libvulkan.so.1'; then
    ls "$root"/.gl/*.deb >/dev/null 2>&1 || { say "no Vulkan loader and no .gl/*.deb (carry .gl; see pack)"; exit 1; }
    for f in "$root"/.gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
    found=""
    for d in /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
        ls "$d"/nvidia_icd*.json >/dev/null 2>&1 && found=$d
    done
    nv=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    if [ -z "$found" ] && [ -f "$nv" ]; then
        export VK_DRIVER_FILES=$nv VK_ICD_FILENAMES=$nv
        export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    fi
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | tee -a "$summary"
say "VK_DRIVER_FILES=${VK_DRIVER_FILES:-(loader default)}"

# Which device "vulkan" is (the lookup test prints it); lavapipe here would mean no GPU driver.
if [ -x "$bin/test-backends" ]; then
    "$bin/test-backends" -tc="*device lookup*" -s >"$logs/device.log" 2>&1
    say "$(grep -m1 'Vulkan device' "$logs/device.log" || echo 'no Vulkan device found (see device.log)')"
    if grep -q 'llvmpipe' "$logs/device.log"; then say "only lavapipe is visible: the NVIDIA driver was not found"; fi
else
    say "(a bench-only pack: ember-bench names the device in bench.log)"
fi

if [ "${EMBER_BENCH_SKIP_TESTS:-0}" != 1 ]; then
    stamp "Vulkan op tests"
    data=()
    [ -d "$root/.devdata/fixtures/models" ] && data=(--data-dir "$root/.devdata")  # holds fixtures/models
    [ -d "$pkg/fixtures/models" ] && data=(--data-dir "$pkg")                      # the pack's own
    "$bin/test-backends" -ts=vulkan "${data[@]}" >"$logs/test-backends-vulkan.log" 2>&1
    say "test-backends [vulkan]: rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$logs/test-backends-vulkan.log" | tr '\n' ' ')"
    if [ ${#data[@]} -gt 0 ]; then
        stamp "Vulkan model tests"
        "$bin/test-models" -ts=vulkan "${data[@]}" >"$logs/test-models-vulkan.log" 2>&1
        say "test-models [vulkan]: rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$logs/test-models-vulkan.log" | tr '\n' ' ')"
    else
        say "test-models [vulkan]: skipped (no .devdata/fixtures carried)"
    fi
fi
export EMBER_VULKAN_STATS=1  # bench.log: graph ranges recorded / submitted again

# llama.cpp on an H200 (CUDA, issue 6): pp512 tg128
ref() {
    case "$1-$2" in
        8b-Q4_K_M) echo "9725 269.0" ;; 8b-Q4_0) echo "11304 335.9" ;; 8b-Q8_0) echo "11563 257.0" ;;
        1b-Q4_K_M) echo "41740 899.4" ;; 1b-Q4_0) echo "47393 999.0" ;; 1b-Q8_0) echo "52919 840.5" ;;
        *) echo "0 0" ;;
    esac
}

bench() {  # shape type file label [env...]
    local shape=$1 q=$2 file=$3 label=$4
    shift 4
    local pn=512
    # Variants are decode-only rows, except those of the prefill kernel (EMBER_VULKAN_MM_*);
    # so are the rounds after the first (EMBER_BENCH_ROUNDS).
    [ "$label" != default ] && [[ "$label" != *EMBER_VULKAN_MM_* ]] && pn=0
    [ "$round" -gt 1 ] && pn=0
    local json
    echo "### $shape $q $label (round $round)" >>"$logs/bench.log"
    json=$(env "$@" "$bin/ember-bench" -m "$file" -p $pn -n 128 -r "$reps" --device "$device" -o json 2>>"$logs/bench.log") || {
        say "| $shape | $q | $label | bench failed (see bench.log) |"
        return
    }
    read -r ref_pp ref_tg <<<"$(ref "$shape" "$q")"
    EMBER_JSON="$json" python3 - "$shape" "$q" "$label" "$ref_pp" "$ref_tg" "$tgs" <<'PY' | tee -a "$summary"
import json, os, sys
shape, q, label, ref_pp, ref_tg = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
for r in json.loads(os.environ["EMBER_JSON"]):
    if r["n_gen"]:
        with open(sys.argv[6], "a") as f:  # for the medians over rounds
            f.write(f"{label}\t{r['avg_ts']}\t{r.get('decode_bytes_per_token') or 0}\n")
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    ref = ref_pp if r["n_prompt"] else ref_tg
    extra = ""
    if r["n_gen"] and r.get("decode_bytes_per_token"):
        gbs = r['avg_ts'] * r['decode_bytes_per_token'] / 1e9
        extra = f"{gbs:.0f} GB/s"
        if r.get("device_bandwidth_gbs"):  # ember-bench's copy through the device's CPY op
            extra += f" ({100 * gbs / r['device_bandwidth_gbs']:.0f}% of the {r['device_bandwidth_gbs']:.0f} GB/s copy)"
    print(f"| {shape} | {q} | {label} | {test} | {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} | {ref:g} | {extra} |")
PY
}

say ""
say "| shape | quant | variant | test | Ember Vulkan t/s | llama.cpp CUDA H200 t/s | weights read |"
say "| --- | --- | --- | --- | ---: | ---: | ---: |"
for shape in $shapes; do
    for q in $types; do
        file=$dir/$shape-$q.gguf
        if [ ! -f "$file" ]; then
            stamp "making $shape $q"
            "$bin/make-bench-model" --shape "$shape" --type "$q" -t "$(nproc)" -o "$file" >>"$logs/make-model.log" 2>&1 || {
                say "| $shape | $q | model generation failed (make-model.log) |"
                continue
            }
        fi
        tgs=$(mktemp)
        for ((round = 1; round <= rounds; round++)); do
            bench "$shape" "$q" "$file" default
            for v in $variants; do
                IFS=, read -ra kv <<<"$v"  # A=1,B=2: both settings in one row
                bench "$shape" "$q" "$file" "$v" "${kv[@]}"
            done
        done
        if [ "$rounds" -gt 1 ]; then
            # Each label's median over the rounds (one process each, interleaved with the
            # other labels': the same settings differ by up to 4% between processes).
            python3 - "$shape" "$q" "$tgs" "$rounds" <<'PY' | tee -a "$summary"
import statistics, sys
shape, q, path, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = {}
for line in open(path):
    label, ts, bpt = line.rstrip("\n").split("\t")
    rows.setdefault(label, []).append((float(ts), float(bpt)))
for label, v in rows.items():
    ts = statistics.median(t for t, _ in v)
    gbs = f"{ts * v[0][1] / 1e9:.0f} GB/s" if v[0][1] else ""
    lo, hi = min(t for t, _ in v), max(t for t, _ in v)
    print(f"| {shape} | {q} | {label} | tg128 median of {len(v)} ({lo:.1f}-{hi:.1f}) | {ts:.1f} | | {gbs} |")
PY
        fi
        rm -f "$tgs"
        # The models are large (8b Q8_0 is 8.5 GB): keep the disk for the next one.
        [ "${EMBER_BENCH_KEEP:-0}" = 1 ] || rm -f "$file"
    done
done
stamp "done"
