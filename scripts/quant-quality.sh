#!/usr/bin/env bash
# The quality table of docs/quant-types.md: quantizes the default model's F16 file to every
# type and mix, and measures each with ember-perplexity on the held-out text against the F16
# base (perplexity, mean and 99th-percentile KL divergence, same-top-token rate).
#
#   scripts/quant-quality.sh [CHUNKS]     (default 40 chunks of 512 tokens; 0 = the whole text)
#
# Needs ../shared/models (ember-kjv-25m-f16.gguf, val.txt). Work files go to $EMBER_QQ_DIR
# (default /tmp/ember-quant-quality).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${EMBER_BUILD_DIR:-build}
shared=${EMBER_SHARED_DIR:-../shared}
dir=${EMBER_QQ_DIR:-/tmp/ember-quant-quality}
chunks=${1:-40}
threads=${EMBER_QQ_THREADS:-$(nproc)}
f16="$shared/models/ember-kjv-25m-f16.gguf"
text="$shared/models/val.txt"
[ -f "$f16" ] && [ -f "$text" ] || { echo "quant-quality: needs $f16 and $text" >&2; exit 1; }
mkdir -p "$dir"
cmake --build "$build" -j"$(nproc)" --target ember-quantize ember-perplexity >/dev/null

chunk_arg=()
[ "$chunks" != 0 ] && chunk_arg=(--chunks "$chunks")
base="$dir/f16.kld"
if [ ! -f "$base" ]; then
    "$build/bin/ember-perplexity" -m "$f16" -f "$text" -c 512 -t "$threads" "${chunk_arg[@]}" \
        --kl-divergence-base "$base" >/dev/null 2>&1
fi

types=(F16 Q8_0 FP8_E4M3 FP8_E4M3_ROW FP8_E5M2 FP8_E5M2_ROW Q6_K Q5_K_M Q5_1 Q5_0 Q4_K_M Q4_K_S INT4_G32 INT4
       NF4 IQ4_NL IQ4_XS Q4_1 Q4_0 Q3_K_M Q2_K)
printf "| type | size (MiB) | bits/weight | PPL | mean KLD | KLD p99 | same top |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
for t in "${types[@]}"; do
    m="$dir/$t.gguf"
    if [ "$t" = F16 ]; then
        m="$f16"
        bpw=16.00
    else
        [ -f "$m" ] || "$build/bin/ember-quantize" "$f16" "$m" "$t" 2>"$dir/$t.log"
        # the quantizer's summary: "... -> 21.80 MB (7.02 bits per weight), ..."
        bpw=$(sed -n 's/.*-> [0-9.]* MB (\([0-9.]*\) bits per weight).*/\1/p' "$dir/$t.log" | tail -1)
    fi
    json=$("$build/bin/ember-perplexity" -m "$m" -f "$text" -c 512 -t "$threads" "${chunk_arg[@]}" \
        --kl-divergence-base "$base" --kl-divergence -o json 2>/dev/null)
    EMBER_JSON="$json" python3 - "$t" "$m" "$bpw" <<'PY'
import json, os, sys
t, path, bpw = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.loads(os.environ["EMBER_JSON"])
size = os.path.getsize(path)
print(f"| {t} | {size / 2**20:.2f} | {bpw} | {r['ppl']:.4f} | "
      f"{r['kld_mean']:.6f} | {r['kld_p99']:.5f} | {r['same_top_pct']:.2f} % |")
PY
done
