#!/usr/bin/env python3
"""Line chart as a standalone SVG from a CSV of `series,x,y` rows (header line first).

Standard library only, so the benchmark plots in docs/ can be regenerated on a bare
machine:

    python3 bench/plot_svg.py --csv docs/bench/shards.csv --out docs/bench/shards.svg \
        --title "..." --xlabel shards --ylabel "pods/s"

Each series is drawn as a polyline with markers, in the order of first appearance; x
values are numeric and placed on a linear (default), log2 (--log2x) or log10 (--logx)
axis; y on a linear axis from 0 (default) or a log10 axis (--logy). Log axes need values
above 0. `phalanx-bench suite` draws its log-log growth plots with this script.
"""

import argparse
import csv
import math
import sys
from collections import OrderedDict

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]
W, H = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 80, 170, 40, 60


def nice_ticks(lo, hi, count=5):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    return ticks


def log_ticks(lo, hi):
    """1, 2, 5 x 10^k ticks covering [lo, hi] (lo > 0): the largest at or below lo to the
    smallest at or above hi. Only powers of ten when the range spans many decades."""
    steps = (1, 2, 5) if math.log10(hi / lo) < 4 else (1,)
    cands = [m * 10 ** k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
             for m in steps]
    below = [c for c in cands if c <= lo * (1 + 1e-9)]
    above = [c for c in cands if c >= hi * (1 - 1e-9)]
    first, last = max(below), min(above)
    return [c for c in cands if first <= c <= last]


def fmt(v):
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if v == int(v):
        return str(int(v))
    return f"{v:g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--xlabel", default="x")
    ap.add_argument("--ylabel", default="y")
    ap.add_argument("--log2x", action="store_true")
    ap.add_argument("--logx", action="store_true", help="log10 x axis")
    ap.add_argument("--logy", action="store_true", help="log10 y axis")
    args = ap.parse_args()
    if args.log2x and args.logx:
        sys.exit("--log2x and --logx: choose one")

    series = OrderedDict()
    with open(args.csv, newline="") as f:
        rows = csv.DictReader(f)
        missing = {"series", "x", "y"} - set(rows.fieldnames or [])
        if missing:
            sys.exit(f"{args.csv}: missing columns {sorted(missing)} (need series,x,y)")
        for n, row in enumerate(rows, start=2):
            try:
                x, y = float(row["x"]), float(row["y"])
            except ValueError:
                sys.exit(f"{args.csv}:{n}: x={row['x']!r} y={row['y']!r} are not numbers")
            series.setdefault(row["series"], []).append((x, y))
    if not series:
        sys.exit(f"{args.csv}: no rows")

    tx = math.log2 if args.log2x else math.log10 if args.logx else (lambda v: v)
    ty = math.log10 if args.logy else (lambda v: v)
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    for flag, on, vals in (("--log2x/--logx", args.log2x or args.logx, xs), ("--logy", args.logy, ys)):
        if on and min(vals) <= 0:
            sys.exit(f"{args.csv}: {flag} needs values above 0 (found {min(vals)})")
    x_lo, x_hi = tx(min(xs)), tx(max(xs))
    if x_hi == x_lo:
        x_hi = x_lo + 1
    if args.logy:
        y_ticks = log_ticks(min(ys), max(ys)) if max(ys) > min(ys) else log_ticks(min(ys) / 2, max(ys) * 2)
    else:
        y_ticks = nice_ticks(0, max(ys) * 1.05)
    y_lo, y_hi = ty(y_ticks[0]) if args.logy else 0, ty(y_ticks[-1])
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        return LEFT + (tx(x) - x_lo) / (x_hi - x_lo) * pw

    def py(y):
        return TOP + ph - (ty(y) - y_lo) / (y_hi - y_lo) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{args.title}</text>',
    ]
    for t in y_ticks:
        y = py(t)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    for x in sorted(set(xs)):
        X = px(x)
        out.append(f'<line x1="{X:.1f}" y1="{TOP + ph}" x2="{X:.1f}" y2="{TOP + ph + 5}" stroke="#333"/>')
        out.append(f'<text x="{X:.1f}" y="{TOP + ph + 18}" text-anchor="middle">{fmt(x)}</text>')
    out.append(
        f'<polyline points="{LEFT},{TOP} {LEFT},{TOP + ph} {LEFT + pw},{TOP + ph}" '
        f'fill="none" stroke="#333"/>'
    )
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 15}" text-anchor="middle">{args.xlabel}</text>')
    out.append(
        f'<text x="18" y="{TOP + ph / 2}" text-anchor="middle" '
        f'transform="rotate(-90 18 {TOP + ph / 2})">{args.ylabel}</text>'
    )
    for i, (name, pts) in enumerate(series.items()):
        c = COLORS[i % len(COLORS)]
        pts = sorted(pts)
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{c}"/>')
        ly = TOP + 10 + i * 20
        out.append(f'<line x1="{W - RIGHT + 15}" y1="{ly}" x2="{W - RIGHT + 40}" y2="{ly}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{W - RIGHT + 46}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
