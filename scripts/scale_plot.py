#!/usr/bin/env python3
"""scale_plot.py: the SVG plot of issue 29's runs (docs/tiers.md, "Tables larger than memory").

No matplotlib on this machine: the SVG is written by hand. Two panels:
  left:  RSS over time of each run (the rss.csv samples/scale writes), with the host budget;
  right: samples/s against the table's size (multiple of RAM), at scale and in memory.

  scripts/scale_plot.py --out docs/tiers-scale.svg --budget_gib 2.94 \
      --rss 0.25x=/path/rss.csv --rss 1x=/path/rss.csv \
      --point 0.25:51178:71921 --point 1.0:...   (ram multiple : samples/s : in-memory samples/s)
"""
import argparse
import csv

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
W, H, M = 460, 320, 50  # panel size and margin


def panel(x0, title, xlabel, ylabel, xmax, ymax, series, hline=None):
    out = [f'<g transform="translate({x0},0)">']
    out.append(f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>')
    px = lambda x: M + (W - 2 * M) * x / xmax
    py = lambda y: H - M - (H - 2 * M) * y / ymax
    out.append(f'<line x1="{M}" y1="{H - M}" x2="{W - M}" y2="{H - M}" stroke="black"/>')
    out.append(f'<line x1="{M}" y1="{M}" x2="{M}" y2="{H - M}" stroke="black"/>')
    for i in range(6):
        xv, yv = xmax * i / 5, ymax * i / 5
        out.append(f'<text x="{px(xv)}" y="{H - M + 15}" text-anchor="middle" '
                   f'font-size="10">{xv:.3g}</text>')
        out.append(f'<text x="{M - 5}" y="{py(yv) + 3}" text-anchor="end" '
                   f'font-size="10">{yv:.3g}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle" font-size="11">{xlabel}</text>')
    out.append(f'<text x="12" y="{H / 2}" text-anchor="middle" font-size="11" '
               f'transform="rotate(-90 12 {H / 2})">{ylabel}</text>')
    if hline is not None:
        y, label = hline
        out.append(f'<line x1="{M}" y1="{py(y)}" x2="{W - M}" y2="{py(y)}" stroke="gray" '
                   f'stroke-dasharray="4 3"/>')
        out.append(f'<text x="{W - M}" y="{py(y) - 4}" text-anchor="end" font-size="10" '
                   f'fill="gray">{label}</text>')
    for i, (name, pts, marker) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="1.5"/>')
        if marker:
            for x, y in pts:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        out.append(f'<text x="{M + 8}" y="{M + 14 * i}" font-size="10" fill="{c}">{name}</text>')
    out.append("</g>")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget_gib", type=float, required=True)
    ap.add_argument("--rss", action="append", default=[])
    ap.add_argument("--point", action="append", default=[])
    a = ap.parse_args()
    rss_series, tmax, ymax = [], 1.0, a.budget_gib * 1.2
    for spec in a.rss:
        name, path = spec.split("=", 1)
        pts = []
        with open(path) as f:
            for row in csv.DictReader(f):
                pts.append((float(row["seconds"]), int(row["rss_bytes"]) / 2**30))
        step = max(1, len(pts) // 300)  # at most ~300 points a line
        pts = pts[::step]
        tmax = max(tmax, max(t for t, _ in pts))
        ymax = max(ymax, max(r for _, r in pts) * 1.1)
        rss_series.append((name, pts, False))
    scale, mem = [], []
    for spec in a.point:
        x, s, m = (float(v) for v in spec.split(":"))
        scale.append((x, s / 1000))
        mem.append((x, m / 1000))
    pmax = max([y for _, y in scale + mem] + [1]) * 1.15
    xmax = max([x for x, _ in scale] + [0.1]) * 1.1
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>']
    svg += panel(0, "RSS over time", "seconds since start (baseline, prefill, at scale)",
                 "RSS (GiB)", tmax, ymax, rss_series,
                 (a.budget_gib, f"host budget {a.budget_gib} GiB"))
    svg += panel(W, "samples/s against table size", "tables (rows + slots) / RAM",
                 "k samples/s", xmax, pmax,
                 [("tables on SSD (host budget fixed)", sorted(scale), True),
                  ("same model, tables in memory", sorted(mem), True)])
    svg.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
