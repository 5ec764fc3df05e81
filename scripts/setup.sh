#!/usr/bin/env bash
# Installs the build dependencies (Debian 12) and builds Ember into build/ (tools in build/bin/).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake g++ make pkg-config doctest-dev libxxhash-dev)
# Vulkan backend: headers + loader, the shader compiler, Mesa's lavapipe (a CPU Vulkan device,
# so the Vulkan tests run anywhere) and the validation layer (EMBER_VULKAN_VALIDATE=1).
pkgs+=(libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# CUDA (when nvcc is installed): code for this machine's GPU, or for one architecture (sm_90)
# where there is none, so CI only checks that it compiles; EMBER_CUDA_ARCHS overrides (a
# release package builds "75;80;86;87;89;90").
cuda_archs=${EMBER_CUDA_ARCHS:-}
if [ -z "$cuda_archs" ]; then
    if nvidia-smi -L >/dev/null 2>&1; then cuda_archs=native; else cuda_archs=90; fi
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA_ARCHS="$cuda_archs" >/dev/null
cmake --build build -j"$(nproc)"
