#!/usr/bin/env python3
"""Line chart as a standalone SVG from a CSV of `series,x,y` rows (header line first).

Standard library only, so the benchmark plots in docs/ can be regenerated on a bare
machine:

    python3 bench/plot_svg.py --csv docs/bench/shards.csv --out docs/bench/shards.svg \
        --title "..." --xlabel shards --ylabel "pods/s"

Each series is drawn as a polyline with markers, in the order of first appearance; x
values are numeric and placed on a linear (default) or log2 axis.
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
    args = ap.parse_args()

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

    tx = (lambda v: math.log2(v)) if args.log2x else (lambda v: v)
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x_lo, x_hi = tx(min(xs)), tx(max(xs))
    if x_hi == x_lo:
        x_hi = x_lo + 1
    y_ticks = nice_ticks(0, max(ys) * 1.05)
    y_hi = y_ticks[-1]
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        return LEFT + (tx(x) - x_lo) / (x_hi - x_lo) * pw

    def py(y):
        return TOP + ph - y / y_hi * ph

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
