#!/usr/bin/env python3
"""Per-kernel critical-path table of a decode run from scripts/kernel-trace.cpp's CSV.

Kernels are taken in start order over the last `--tokens` tokens (a token begins where the
previous kernel ended more than --gap-us earlier, i.e. at a host round trip). A kernel's share
of the critical path is how far it moved the latest end time: max(0, end - max(previous ends)).
With programmatic dependent launch a kernel starts (and waits) before its predecessor ends, so
"busy" (end - start) overstates it; the critical-path column is what it costs the token.

    scripts/kernel-trace.py /tmp/trace.csv [--tokens 16] [--gap-us 20] [--by-grid [--by-prev]]
"""
import argparse
import collections
import csv
import os
import re
import shutil
import subprocess
import sys


def short(names):
    """Demangled, argument lists and namespaces dropped: 'mvr_kernel<2, 1, 4, false>'."""
    out = {n: n for n in names}
    if shutil.which("c++filt"):
        dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
        for n, d in zip(names, dem):
            out[n] = d or n
    for n, d in out.items():
        d = d.replace("(anonymous namespace)::", "")
        if d.endswith(")"):  # the parameter list: from the "(" that matches the last ")"
            depth = 0
            for i in range(len(d) - 1, -1, -1):
                depth += d[i] == ")"
                depth -= d[i] == "("
                if depth == 0:
                    d = d[:i]
                    break
        d = re.sub(r"^void ", "", d)
        out[n] = d[:70]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--gap-us", type=float, default=20.0)
    ap.add_argument("--split-before", default="",
                    help="tokens start at each row whose name matches this regular expression (and the row "
                         "before's does not), for steps that run back to back (queued decode steps leave no "
                         "gap): 'rms_norm_dec_kernel<\\d, false' is layer 0's norm, once a step (its input "
                         "is the embedding row, no residual ADD); 'memcpy HtoD' (EMBER_TRACE_MEMCPY=1) "
                         "matches the step's input copies, which may come in two places of a step. Several "
                         "expressions separated by '||' are tried in turn: the first that cuts the trace into "
                         "3 tokens or more is used (a form that removes the first norm's launch falls back "
                         "to the next, e.g. 'scatter_flat_kernel')")
    ap.add_argument("--by-grid", action="store_true",
                    help="one row per kernel and grid size, so the launches of one kernel for different "
                         "products (Q/K/V, O, gate/up, down) are told apart")
    ap.add_argument("--by-prev", action="store_true",
                    help="with --by-grid: also split each row by the kernel (and grid) that started just "
                         "before it, so a small kernel's cost after each product is told apart (the norm "
                         "after the O product against the norm after the FFN down product)")
    a = ap.parse_args()
    splits = [re.compile(e) for e in a.split_before.split("||") if e] if a.split_before else []
    rows = []
    with open(a.csv) as f:
        for r in csv.DictReader(f):
            rows.append((int(r["start"]), int(r["end"]), r["name"], int(r["gx"]) * int(r["gy"]) * int(r["gz"]), int(r["bx"])))
    rows.sort()
    if not rows:
        print("kernel-trace: no kernels")
        return
    names = short(sorted({r[2] for r in rows}))
    # token boundaries: a kernel starting gap-us after every earlier kernel ended, or a row
    # whose (demangled) name matches --split-before (the first of its expressions that finds 3 tokens)
    def boundaries(split):
        starts, latest = [0], rows[0][1]
        for i in range(1, len(rows)):
            if split:
                if split.search(names[rows[i][2]]) and not split.search(names[rows[i - 1][2]]):
                    starts.append(i)
            elif rows[i][0] - latest > a.gap_us * 1e3:
                starts.append(i)
            latest = max(latest, rows[i][1])
        return starts

    starts = boundaries(splits[0] if splits else None)
    for k, split in enumerate(splits[1:], 1):
        if len(starts) >= 3:
            break
        print(f"kernel-trace: --split-before '{splits[k - 1].pattern}' found {len(starts)} token(s); trying '{split.pattern}'")
        starts = boundaries(split)
    starts.append(len(rows))
    toks = [(starts[i], starts[i + 1]) for i in range(len(starts) - 1)]
    # the usual decode token: the most common kernel count among the last ones
    last = toks[-a.tokens:] if len(toks) > a.tokens else toks
    agg = collections.defaultdict(lambda: [0, 0.0, 0.0, 0, 0])
    tok_us, gaps = [], []
    for (b, e) in last:
        latest = rows[b][0]
        for i in range(b, e):
            s, t, n, g, bx = rows[i]
            crit = max(0, t - latest)  # latest starts at the token's first start
            latest = max(latest, t)
            key = f"{names[n]} [{g}]" if a.by_grid else names[n]
            if a.by_prev and i > b:
                key += f" after {names[rows[i - 1][2]]} [{rows[i - 1][3]}]"
            x = agg[key]
            x[0] += 1
            x[1] += crit / 1e3
            x[2] += (t - s) / 1e3
            x[3], x[4] = g, bx
        tok_us.append((latest - rows[b][0]) / 1e3)
        if e < len(rows):
            gaps.append((rows[e][0] - latest) / 1e3)
    n = len(last)
    tot = sum(x[1] for x in agg.values())
    print(f"{len(rows)} kernels, {len(toks)} tokens; last {n}: {sum(tok_us) / n:.1f} us of GPU time per token "
          f"({last[-1][1] - last[-1][0]} kernels in the last), host gap between tokens {sum(gaps) / max(1, len(gaps)):.1f} us")
    print("| kernel | per token | critical path us/token | % | us each | busy us each | grid x block |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, x in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {x[0] / n:.0f} | {x[1] / n:.1f} | {100 * x[1] / tot:.1f} | {x[1] / x[0]:.2f} | {x[2] / x[0]:.2f} | {x[3]} x {x[4]} |")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the table piped into head: a quiet end
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
