#!/usr/bin/env python3
"""Where two decode runs differ, kernel by kernel: joins two tables of scripts/kernel-trace.py
(best with --by-grid, so each product is its own row) on the kernel column and prints each
kernel's critical-path us per token on both sides, B - A, and its time per launch, largest
change first. An A/B that moved tg128 says which launch moved it.

    scripts/kernel-trace-diff.py trace-A.txt trace-B.txt [--top 12] [--names A B]

scripts/ab-gpu.sh writes such tables and prints this diff with EMBER_AB_TRACE=1.
"""
import argparse
import re
import sys


def read_table(path):
    """(GPU us per token or None, {kernel: (launches per token, critical us/token, us each)})."""
    per_token, rows = None, {}
    with open(path) as f:
        for line in f:
            m = re.search(r"([0-9.]+) us of GPU time per token", line)
            if m:
                per_token = float(m.group(1))
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 5 or not line.startswith("|") or cells[0] in ("kernel", "---"):
                continue
            try:
                rows[cells[0]] = (float(cells[1]), float(cells[2]), float(cells[4]))
            except ValueError:
                continue
    return per_token, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=12, help="rows to print (largest |B - A| first)")
    ap.add_argument("--names", nargs=2, default=["A", "B"], metavar=("A", "B"))
    args = ap.parse_args()
    ta, ra = read_table(args.a)
    tb, rb = read_table(args.b)
    if not ra or not rb:
        print(f"kernel-trace-diff: no kernel table in {args.a if not ra else args.b}", file=sys.stderr)
        return 1
    na, nb = args.names
    if ta is not None and tb is not None:
        print(f"GPU time per token: {na} {ta:.1f} us, {nb} {tb:.1f} us ({tb - ta:+.1f})")
    print(f"| kernel | {na} us/token | {nb} us/token | {nb} - {na} | us each {na} -> {nb} |")
    print("| --- | ---: | ---: | ---: | --- |")
    keys = set(ra) | set(rb)
    zero = (0.0, 0.0, 0.0)

    def delta(k):
        return rb.get(k, zero)[1] - ra.get(k, zero)[1]

    for k in sorted(keys, key=lambda k: -abs(delta(k)))[: args.top]:
        a, b = ra.get(k), rb.get(k)
        each = f"{a[2]:.2f} -> {b[2]:.2f}" if a and b else ("only " + (na if a else nb))
        print(f"| {k} | {a[1] if a else 0:.1f} | {b[1] if b else 0:.1f} | {delta(k):+.1f} | {each} |")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # quiet under | head
        sys.exit(0)
