#!/usr/bin/env bash
# ember-quantize as a user runs it: the default F16 model to q4_0 and Q4_K_M (progress lines,
# exit codes, the result loads and decodes in ember-eval), and the refusals (overwriting IN, a
# bad type, a truncated input, bad options), each leaving no output and no temporary file.
#   check-quantize.sh EMBER_QUANTIZE EMBER_EVAL MODEL_F16 TOKENS_FILE
set -euo pipefail
quantize=$1
eval_tool=$2
model=$3
tokens=$4
[ -f "$model" ] || { echo "no default F16 model at $model: skipped"; exit 0; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "check-quantize: $*"; exit 1; }
# The directory must hold exactly the given files (no OUT of a failed run, no *.tmp-*).
only() {
    local got want
    got=$(cd "$dir" && ls -A | sort | tr '\n' ' ')
    want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
    [ "$got" = "$want" ] || fail "files in the output directory: '$got', expected '$want'"
}

# Two good runs: exit 0, one progress line per tensor, a summary, a file that decodes.
for type in q4_0 Q4_K_M; do
    out="$dir/model-$type.gguf"
    "$quantize" "$model" "$out" "$type" -t 2 2>"$dir/log.txt" || { cat "$dir/log.txt"; fail "$type: exit $?"; }
    n_lines=$(grep -cE '^\[ *[0-9]+/ *[0-9]+\] blk\.0\.attn_q\.weight +f16 -> [a-z0-9_]+ +\[384 x 384\]' "$dir/log.txt" || true)
    [ "$n_lines" = 1 ] || { cat "$dir/log.txt"; fail "$type: no progress line for blk.0.attn_q.weight"; }
    n_total=$(grep -cE '^\[ *[0-9]+/ *74\] ' "$dir/log.txt" || true)
    [ "$n_total" = 74 ] || fail "$type: $n_total progress lines, expected 74"
    grep -qE '^done: .* bits per weight.* MB/s' "$dir/log.txt" || { cat "$dir/log.txt"; fail "$type: no summary line"; }
    rm "$dir/log.txt"
    greedy=$("$eval_tool" -m "$out" --tokens-file "$tokens" --greedy 4 --threads 2) || fail "$type: ember-eval cannot run the output"
    [ "$(echo "$greedy" | wc -w)" = 4 ] || fail "$type: ember-eval printed '$greedy'"
done
only model-q4_0.gguf model-Q4_K_M.gguf
# q4_0: the matrices are q4_0, the output (tied token_embd, 384 columns) q8_0.
"$quantize" --dry-run "$model" q4_0 2>"$dir/log.txt" || fail "--dry-run failed"
grep -qE 'token_embd\.weight +f16 -> q8_0' "$dir/log.txt" || fail "dry run: token_embd is not q8_0"
grep -qE 'blk\.0\.ffn_up\.weight +f16 -> q4_0' "$dir/log.txt" || fail "dry run: ffn_up is not q4_0"
rm "$dir/log.txt"
only model-q4_0.gguf model-Q4_K_M.gguf

# Refusals: exit 1, one line on stderr, nothing written.
refuse() {
    local what=$1
    shift
    local err rc=0
    err=$("$quantize" "$@" 2>&1 >/dev/null) || rc=$?
    [ "$rc" = 1 ] || fail "$what: exit $rc, expected 1 (stderr: $err)"
    [ "$(echo "$err" | wc -l)" -le 2 ] || fail "$what: more than a short message: $err"
    echo "  refused as expected ($what): $(echo "$err" | tail -n 1)"
}
q="$dir/model-q4_0.gguf"
cp "$q" "$dir/copy.gguf"
refuse "OUT is IN" "$dir/copy.gguf" "$dir/copy.gguf" q8_0
refuse "OUT is IN by another path" "$dir/copy.gguf" "$dir/./copy.gguf" q8_0
cmp -s "$q" "$dir/copy.gguf" || fail "the input was changed"
rm "$dir/copy.gguf"
refuse "bad type" "$model" "$dir/x.gguf" q4_x
refuse "requantizing" "$q" "$dir/x.gguf" q8_0
head -c 100000 "$model" >"$dir/trunc.gguf"
refuse "truncated input" "$dir/trunc.gguf" "$dir/x.gguf" q8_0
rm "$dir/trunc.gguf"
refuse "missing input" "$dir/missing.gguf" "$dir/x.gguf" q8_0
refuse "too few arguments" "$model" q8_0
refuse "unknown option" --frobnicate "$model" "$dir/x.gguf" q8_0
refuse "bad thread count" -t zero "$model" "$dir/x.gguf" q8_0
refuse "bad --output-tensor-type" --output-tensor-type q9_9 "$model" "$dir/x.gguf" q8_0
only model-q4_0.gguf model-Q4_K_M.gguf

# SIGINT mid-run: the run stops after the current tensor (exit 130) and leaves nothing; if it
# was already done when the signal came, the output is complete. Never a temporary file.
"$quantize" "$model" "$dir/sig.gguf" Q4_K_M -t 1 2>"$dir/log.txt" &
pid=$!
sleep 0.2
kill -INT "$pid" 2>/dev/null || true
rc=0
wait "$pid" || rc=$?
rm "$dir/log.txt"
if [ "$rc" = 130 ]; then
    only model-q4_0.gguf model-Q4_K_M.gguf
elif [ "$rc" = 0 ]; then
    only model-q4_0.gguf model-Q4_K_M.gguf sig.gguf
    rm "$dir/sig.gguf"
else
    fail "SIGINT: exit $rc, expected 130 (or 0 when it had finished)"
fi

help=$("$quantize" --help)
grep -q "Q4_K_M" <<<"$help" || fail "--help does not list the types"
echo "ember-quantize check passed"
