#!/usr/bin/env bash
# ember-chat as a user drives it: one-shot, a multi-turn pipe, bad input, and Ctrl-C.
set -euo pipefail
chat=$1
model=$2
tiny_no_template=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One-shot greedy: the default model's reference continuation, exactly (tokenizer, template,
# sampling and streaming detokenization end to end; F32 cache as the reference run). The text
# is that of models/ember-kjv-25m-q8_0.greedy.txt, llama.cpp's greedy ids for this file.
out=$("$chat" -m "$model" -p "And God said unto Moses, Behold" --temp 0 --repeat-penalty 1 -n 32 --ctk f32 --ctv f32 2>"$tmp/err")
want=", I will bring the people unto thee, and will bring them into the land of Egypt, and will bring them into the land of Egypt, and will bring"
[ "$out" = "$want" ] || { echo "one-shot output differs:"; echo "got:  [$out]"; echo "want: [$want]"; exit 1; }
grep -q "decode 32 tokens at" "$tmp/err" || { echo "no speed summary at exit"; cat "$tmp/err"; exit 1; }

# A pipe: one answer line per input line, the KV cache reused across turns (the later turns
# prefill only their own tokens).
printf 'And God said unto Moses,\nThe fortune for today:\n/exit\nnot read\n' | "$chat" -m "$model" --temp 0 -n 12 >"$tmp/out" 2>"$tmp/err"
[ "$(wc -l <"$tmp/out")" -eq 2 ] || { echo "expected 2 answers"; cat "$tmp/out"; exit 1; }
prefilled=$(sed -n 's/.*prefill \([0-9]*\) tokens.*/\1/p' "$tmp/err")
[ "$prefilled" -lt 40 ] || { echo "turns were re-prefilled: $prefilled tokens"; exit 1; }

# A sampled answer is reproducible with a seed.
a=$("$chat" -m "$model" -p "In the beginning" --seed 7 -n 16 2>/dev/null)
b=$("$chat" -m "$model" -p "In the beginning" --seed 7 -n 16 2>/dev/null)
[ "$a" = "$b" ] || { echo "same seed, different output"; exit 1; }

# --device-top-k: only the best N candidates leave the device; greedy and a seeded top-k chain
# give exactly the full-logits answers, and settings it cannot serve are refused up front.
c=$("$chat" -m "$model" -p "And God said unto Moses, Behold" --temp 0 --repeat-penalty 1 -n 32 --ctk f32 --ctv f32 --device-top-k 1 2>/dev/null)
[ "$c" = "$want" ] || { echo "--device-top-k 1 greedy output differs: [$c]"; exit 1; }
a=$("$chat" -m "$model" -p "In the beginning" --seed 7 --repeat-penalty 1 -n 16 2>/dev/null)
c=$("$chat" -m "$model" -p "In the beginning" --seed 7 --repeat-penalty 1 -n 16 --device-top-k 40 2>/dev/null)
[ "$a" = "$c" ] || { echo "--device-top-k 40 sampled output differs"; echo "[$a]"; echo "[$c]"; exit 1; }
if "$chat" -m "$model" -p hi --device-top-k 8 2>"$tmp/err"; then echo "--device-top-k 8 with --top-k 40 accepted"; exit 1; fi
grep -q "repeat-penalty 1" "$tmp/err"

if "$chat" -m "$tmp/missing.gguf" -p hi 2>"$tmp/err"; then echo "missing model accepted"; exit 1; fi
grep -q "cannot load model" "$tmp/err"
if "$chat" -m "$model" --temp x 2>"$tmp/err"; then echo "bad --temp accepted"; exit 1; fi
if "$chat" -m "$model" --chat-template nosuch -p hi 2>"$tmp/err"; then echo "bad template accepted"; exit 1; fi
grep -q "built-in" "$tmp/err"
if [ -n "$tiny_no_template" ] && [ -f "$tiny_no_template" ]; then
    if "$chat" -m "$tiny_no_template" -p hi 2>"$tmp/err"; then echo "a model without a template must say so"; exit 1; fi
    grep -q "no chat template" "$tmp/err"
    # ... and works when a built-in template is asked for
    "$chat" -m "$tiny_no_template" --chat-template chatml -p hi -n 4 >/dev/null 2>&1
fi

# Ctrl-C stops the answer and the chat goes on; a second Ctrl-C quits.
mkfifo "$tmp/in"
# (scalar kernels on one thread: the answer must still be running when the signal comes; the SIMD
# kernels fill the 512-token context in about a second)
EMBER_CPU_ISA=scalar "$chat" -m "$model" -n 100000 -c 512 -t 1 <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
pid=$!
exec 3>"$tmp/in"
echo "And it came to pass" >&3
# The signal once the answer is streaming (a loaded machine, or a sanitizer build, may take
# longer than a second to load and prefill: a Ctrl-C before the answer quits, as at the prompt).
for _ in $(seq 600); do
    [ -s "$tmp/out" ] && break
    kill -0 "$pid" 2>/dev/null || { echo "ember-chat exited before answering"; cat "$tmp/err"; exit 1; }
    sleep 0.1
done
[ -s "$tmp/out" ] || { echo "no answer within 60 s"; kill -9 "$pid"; exit 1; }
kill -INT "$pid"
sleep 1
kill -0 "$pid" 2>/dev/null || { echo "the first Ctrl-C must only stop the answer"; cat "$tmp/err"; exit 1; }
grep -q "stopped" "$tmp/err" || { echo "no stop notice"; cat "$tmp/err"; exit 1; }
kill -INT "$pid"
set +e
wait "$pid"
rc=$?
set -e
exec 3>&-
[ "$rc" -ne 0 ] || { echo "the second Ctrl-C must quit"; exit 1; }
echo "ember-chat check passed"
