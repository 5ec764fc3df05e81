#!/usr/bin/env bash
# ember-perplexity: perplexity, the KL-divergence base file and the comparison against it, and
# the error paths. Usage: check-perplexity.sh TOOL MODEL [TEXT] [FALLBACK_TEXT]
# TEXT (the held-out val.txt) is used when it exists, else FALLBACK_TEXT (the repository
# README), so the check stands alone. Two chunks of 128 tokens keep it to a few seconds.
set -euo pipefail
tool=$1
model=$2
text=${3:-}
fallback=${4:-$(dirname "$0")/../../README.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ -n "$text" && -f "$text" ]]; then
    head -c 20000 "$text" > "$tmp/text.txt"
else
    cat "$fallback" "$fallback" > "$tmp/text.txt"   # twice: enough tokens for two chunks either way
fi
common=(-m "$model" -c 128 --chunks 2 -t 2)

# 1. Perplexity (md), saving the base log-probs.
"$tool" "${common[@]}" -f "$tmp/text.txt" --kl-divergence-base "$tmp/base.kld" > "$tmp/ppl.md" 2> "$tmp/ppl.err"
grep -Eq '^\[1\][0-9]+\.[0-9]{4},\[2\][0-9]+\.[0-9]{4},$' "$tmp/ppl.md" || { echo "no running PPL line:"; cat "$tmp/ppl.md"; exit 1; }
grep -Eq '^Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9]+\.[0-9]+$' "$tmp/ppl.md" || { echo "no final estimate:"; cat "$tmp/ppl.md"; exit 1; }
[[ -s "$tmp/base.kld" && ! -e "$tmp/base.kld.tmp" ]] || { echo "the base file was not written"; exit 1; }

# 2. The model against its own base, 3. with a Q4_0 K cache, 4. the PPL alone as JSON.
"$tool" "${common[@]}" -f "$tmp/text.txt" --kl-divergence-base "$tmp/base.kld" --kl-divergence -o json > "$tmp/self.json" 2> /dev/null
"$tool" "${common[@]}" --kl-divergence-base "$tmp/base.kld" --kl-divergence --ctk q4_0 -o json > "$tmp/q4.json" 2> /dev/null
"$tool" "${common[@]}" -f "$tmp/text.txt" -o json > "$tmp/ppl.json" 2> /dev/null
python3 - "$tmp" <<'PY'
import json, math, re, struct, sys, os
d = sys.argv[1]
md = open(f"{d}/ppl.md").read()
ppl_md = float(re.search(r"PPL = ([0-9.]+)", md).group(1))
p = json.load(open(f"{d}/ppl.json"))
s = json.load(open(f"{d}/self.json"))
q = json.load(open(f"{d}/q4.json"))
for key in ("ppl", "ppl_err", "n_tokens", "n_chunk", "n_ctx", "chunk_ppl"):
    assert key in p, key
for key in ("ppl", "ppl_err", "ppl_base", "ppl_ratio", "ppl_diff", "kld_mean", "kld_err", "kld_median", "kld_p90",
            "kld_p95", "kld_p99", "kld_p999", "kld_max", "same_top_pct", "same_top_err", "rms_dp", "rms_dp_err", "n_tokens"):
    assert key in s and key in q, key
# two chunks of 128 score positions 64..126: 63 tokens each
assert p["n_chunk"] == 2 and p["n_ctx"] == 128 and p["n_tokens"] == 126 == s["n_tokens"] == q["n_tokens"], (p, s, q)
assert math.isfinite(p["ppl"]) and p["ppl"] > 1 and p["ppl_err"] > 0, p
assert len(p["chunk_ppl"]) == 2 and abs(p["chunk_ppl"][-1] - p["ppl"]) < 1e-9 * p["ppl"], p
assert abs(ppl_md - p["ppl"]) < 1e-3, (ppl_md, p["ppl"])
# the base header: magic, version, n_ctx, n_vocab, n_chunk, first; size as documented
raw = open(f"{d}/base.kld", "rb").read(32)
magic, ver, n_ctx, n_vocab, n_chunk, first, flags = struct.unpack("<8s6I", raw)
assert magic == b"EMBRKLD\0" and ver == 1 and n_ctx == 128 and n_chunk == 2 and first == 64, raw
assert os.path.getsize(f"{d}/base.kld") == 32 + 4 * 2 * 128 + 2 * 63 * (16 + 2 * ((n_vocab + 1) // 2 * 2))
# against its own base: the same PPL, KLD ~ 0, the same top token everywhere
assert abs(s["ppl"] - p["ppl"]) < 1e-6 * p["ppl"] and abs(s["ppl_base"] - p["ppl"]) < 1e-5 * p["ppl"], (s, p)
assert 0 <= s["kld_mean"] < 1e-6 and s["kld_max"] < 1e-5, s
assert s["same_top_pct"] == 100 and s["rms_dp"] < 1e-6, s
# a Q4_0 K cache changes the distribution measurably, not wildly
assert 1e-5 < q["kld_mean"] < 1 and q["kld_max"] >= q["kld_p99"] >= q["kld_median"] > 0, q
assert abs(q["ppl_base"] - p["ppl"]) < 1e-5 * p["ppl"] and q["ppl"] != q["ppl_base"], q
assert 50 <= q["same_top_pct"] <= 100 and q["rms_dp"] > 0, q
PY

# 5. The KL-divergence report in md: llama.cpp's sections.
"$tool" "${common[@]}" --chunks 1 --kl-divergence-base "$tmp/base.kld" --kl-divergence > "$tmp/kld.md" 2> /dev/null
for want in "Mean PPL(Q)" "Mean PPL(base)" "Mean    KLD:" "99.0%   KLD:" "Median  KLD:" "RMS Δp" "Same top p: 100.000"; do
    grep -qF "$want" "$tmp/kld.md" || { echo "md report lacks '$want':"; cat "$tmp/kld.md"; exit 1; }
done

# 6. Errors: exit status 1 and one line naming the problem, never a crash.
expect_fail() {  # expect_fail PATTERN ARGS...
    local pattern=$1 rc=0
    shift
    "$tool" "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
    if [[ $rc -ne 1 ]]; then echo "exit $rc (want 1) for: $*"; cat "$tmp/err"; exit 1; fi
    if [[ $(wc -l < "$tmp/err") -ne 1 ]] || ! grep -q "^ember-perplexity: .*$pattern" "$tmp/err"; then
        echo "want one line matching '$pattern' for: $*"; cat "$tmp/err"; exit 1
    fi
}
printf 'In the beginning God created the heaven and the earth.\n' > "$tmp/short.txt"
head -c 20 "$tmp/base.kld" > "$tmp/trunc.kld"
head -c 100000 "$tmp/base.kld" > "$tmp/cut.kld"
cat "$fallback" "$fallback" > "$tmp/other.txt"
cmp -s "$tmp/other.txt" "$tmp/text.txt" && printf 'And it came to pass.\n%.0s' {1..200} > "$tmp/other.txt"
expect_fail "required" -f "$tmp/text.txt"
expect_fail "-f TEXT is required" -m "$model"
expect_fail "unknown argument" -m "$model" -f "$tmp/text.txt" --bogus
expect_fail "bad value 'abc' for -c" -m "$model" -f "$tmp/text.txt" -c abc
expect_fail "bad value '2' for -c" -m "$model" -f "$tmp/text.txt" -c 2
expect_fail "bad value '0' for --chunks" -m "$model" -f "$tmp/text.txt" --chunks 0
expect_fail "needs a value" -m "$model" -f "$tmp/text.txt" -c
expect_fail "bad value 'xml' for -o" -m "$model" -f "$tmp/text.txt" -o xml
expect_fail "unknown K cache type 'q9'" -m "$model" -f "$tmp/text.txt" --ctk q9
expect_fail "cannot load model" -m "$tmp/nonexistent.gguf" -f "$tmp/text.txt"
expect_fail "cannot load model" -m "$tmp/text.txt" -f "$tmp/text.txt"
expect_fail "cannot read" -m "$model" -f "$tmp/nonexistent.txt"
expect_fail "needs at least 256" -m "$model" -f "$tmp/short.txt" -c 128
expect_fail "larger than the model's trained context" -m "$model" -f "$tmp/text.txt" -c 100000
expect_fail "needs --kl-divergence-base" -m "$model" -f "$tmp/text.txt" --kl-divergence
expect_fail "cannot open" -m "$model" --kl-divergence-base "$tmp/nonexistent.kld" --kl-divergence
expect_fail "not an ember-perplexity base file" -m "$model" --kl-divergence-base "$tmp/text.txt" --kl-divergence
expect_fail "not an ember-perplexity base file" -m "$model" --kl-divergence-base "$tmp/trunc.kld" --kl-divergence
expect_fail "truncated or corrupt" -m "$model" --kl-divergence-base "$tmp/cut.kld" --kl-divergence
expect_fail "made with -c 128, not -c 64" -m "$model" -c 64 --kl-divergence-base "$tmp/base.kld" --kl-divergence
expect_fail "differ from those in" -m "$model" -f "$tmp/other.txt" --kl-divergence-base "$tmp/base.kld" --kl-divergence
expect_fail "cannot create" -m "$model" -f "$tmp/text.txt" -c 128 --chunks 1 --kl-divergence-base "$tmp/no/such/dir/b.kld"
echo "ember-perplexity check passed"
