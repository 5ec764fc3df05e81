# Sourced by scripts/ab-gpu.sh and scripts/sweep-gpu.sh (run from the tree's root): their shared
# defaults, the configure step and the bench models. Not run on its own.
#
#   EMBER_BUILD_DIR      the build (default /tmp/ember-ab-build: both scripts share it)
#   EMBER_AB_MODEL_DIR   the generated models (default /tmp/ember-ab-models)
#   EMBER_AB_MODELS      shape-type names (default "1b-Q4_0 8b-Q4_0"; types as make-bench-model's --type)
#   EMBER_AB_CMAKE       the backend options (default "-DEMBER_CUDA=ON -DEMBER_CUDA_ARCHS=90 -DEMBER_VULKAN=OFF")
root=$(pwd)
build=${EMBER_BUILD_DIR:-/tmp/ember-ab-build}
models_dir=${EMBER_AB_MODEL_DIR:-/tmp/ember-ab-models}
models=${EMBER_AB_MODELS:-1b-Q4_0 8b-Q4_0}

# Configures the Release build into $build (the image's missing dependencies from .devdata/deps,
# scripts/device-pack.sh) and builds make-bench-model; the logs to $1-cmake.log / $1-build.log.
gpu_bench_configure() {
    local log=$1 extra=() opts=()
    [ -d .devdata/deps ] && extra+=(-DCMAKE_PREFIX_PATH="$root/.devdata/deps")
    read -r -a opts <<<"${EMBER_AB_CMAKE:--DEMBER_CUDA=ON -DEMBER_CUDA_ARCHS=90 -DEMBER_VULKAN=OFF}"
    mkdir -p "$build" "$models_dir"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${opts[@]}" "${extra[@]}" >"$log-cmake.log" 2>&1 || { tail -30 "$log-cmake.log"; return 1; }
    cmake --build "$build" -j"$(nproc)" --target make-bench-model >"$log-build.log" 2>&1 || { tail -30 "$log-build.log"; return 1; }
}

# Makes each model of $models not yet in $models_dir (make-bench-model with $1 threads), the
# output appended to $2.
gpu_bench_make_models() {
    local threads=$1 log=$2 x
    for x in $models; do
        [ -f "$models_dir/$x.gguf" ] && continue
        "$build/bin/make-bench-model" --shape "${x%%-*}" --type "${x#*-}" -t "$threads" -o "$models_dir/$x.tmp" >>"$log" 2>&1 &&
            mv "$models_dir/$x.tmp" "$models_dir/$x.gguf"
    done
}
