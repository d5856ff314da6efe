"""A line chart as a small standalone SVG, for the bench's curves (cost against size): people would
rather look at a curve than read forty rows. Standard library only; the figures' table stays the
source, the chart repeats it with the load average it was measured under.

    line_chart(Path("docs/charts/x.svg"), "title", "x label", "y label",
               {"index p50": [(1000, 0.4), (10000, 0.9)], "scan p50": [...]}, log_x=True, note=load_average())
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

W, H = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 40, 48
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    step = 10 ** math.floor(math.log10(max(hi - lo, 1e-9)))
    for mult in (1, 2, 5, 10):
        if (hi - lo) / (step * mult) <= 6:
            step *= mult
            break
    first = math.floor(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 2)]


def _label(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:g}"


def line_chart(path: Path, title: str, x_label: str, y_label: str, series: dict[str, list[tuple[float, float]]],
               *, log_x: bool = False, log_y: bool = False, note: str = "") -> Path:
    """Write the chart to `path` (folders made) and return it. Points with a non-finite y are left out."""
    pts = {name: [(x, y) for x, y in s if math.isfinite(y) and (not log_y or y > 0)] for name, s in series.items()}
    xs = [x for s in pts.values() for x, _ in s]
    ys = [y for s in pts.values() for _, y in s]
    if not xs:
        raise ValueError(f"{title}: no points to draw")
    x_ticks = _ticks(min(xs), max(xs), log_x)
    y_ticks = _ticks(min(ys) if log_y else 0.0, max(ys), log_y)
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def fx(x: float) -> float:
        t = (math.log10(x) - math.log10(x0)) / ((math.log10(x1) - math.log10(x0)) or 1) if log_x \
            else (x - x0) / ((x1 - x0) or 1)
        return LEFT + t * (W - LEFT - RIGHT)

    def fy(y: float) -> float:
        t = (math.log10(y) - math.log10(y0)) / ((math.log10(y1) - math.log10(y0)) or 1) if log_y \
            else (y - y0) / ((y1 - y0) or 1)
        return H - BOTTOM - t * (H - TOP - BOTTOM)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    for t in x_ticks:
        out.append(f'<line x1="{fx(t):.1f}" y1="{TOP}" x2="{fx(t):.1f}" y2="{H - BOTTOM}" stroke="#eee"/>')
        out.append(f'<text x="{fx(t):.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">{_label(t)}</text>')
    for t in y_ticks:
        out.append(f'<line x1="{LEFT}" y1="{fy(t):.1f}" x2="{W - RIGHT}" y2="{fy(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{fy(t) + 4:.1f}" text-anchor="end">{_label(t)}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}" '
               'fill="none" stroke="#888"/>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 14}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(16 {(TOP + H - BOTTOM) / 2}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    for i, (name, s) in enumerate(pts.items()):
        colour = COLOURS[i % len(COLOURS)]
        line = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in sorted(s))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{line}">'
                   f'<title>{escape(name)}</title></polyline>')
        out += [f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{colour}"><title>{escape(name)}: '
                f'{_label(x)}, {y:g}</title></circle>' for x, y in s]
        out.append(f'<line x1="{W - RIGHT + 12}" y1="{TOP + 10 + 18 * i}" x2="{W - RIGHT + 32}" '
                   f'y2="{TOP + 10 + 18 * i}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{W - RIGHT + 36}" y="{TOP + 14 + 18 * i}">{escape(name)}</text>')
    if note:
        out.append(f'<text x="{W - 8}" y="{H - 4}" text-anchor="end" fill="#666" font-size="9">{escape(note)}</text>')
    out.append("</svg>\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out), encoding="utf-8")
    return path
