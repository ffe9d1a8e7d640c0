"""Time-series charts as inline SVG: the store pages draw them without a script or a CDN.

A chart spans the page's whole time window (so charts of one page line up), its y axis runs from 0
to a rounded maximum, and every data point is a marker (`class="pt"`): a circle on a line, or a
bar for counts per batch. Markers carry their value in a <title>, which browsers show on hover.
"""

from __future__ import annotations

import html
import math
from datetime import UTC, datetime

WIDTH, HEIGHT = 560, 190
LEFT, RIGHT, TOP, BOTTOM = 64, 14, 14, 30
MAX_MARKERS = 400  # beyond this a line is drawn without circles (they would hide it)


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above value (1 for 0 or less)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value * (1 - 1e-9))


def axis_top(value: float, unit: str) -> float:
    """The y axis' top: a nice ceiling in the unit its labels use (minutes or hours for long seconds)."""
    top = nice_ceiling(value)
    for scale in (60, 3600) if unit == "s" else ():
        if top >= 2 * scale:
            top = nice_ceiling(value / scale) * scale
    return top


def format_value(value: float, unit: str, like: float | None = None) -> str:
    """Short label: 1.2k, 3.4M; bytes in KiB/MiB/GiB; seconds in ms below 1, in min or h from 2 min
    on. like: the value whose size picks the unit (an axis labels every tick like its top)."""
    size_of = abs(value if like is None else like)
    if unit == "bytes":
        for size, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if size_of >= size:
                return f"{value / size:.3g} {name}"
        return f"{value:.0f} B"
    if unit == "s" and 0 < size_of < 1:
        return f"{value * 1000:.3g} ms"
    if unit == "s" and size_of >= 120:  # freshness of an idle store reads in minutes or hours
        return f"{value / 3600:.3g} h" if size_of >= 7200 else f"{value / 60:.3g} min"
    for size, name in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if size_of >= size:
            return f"{value / size:.3g}{name}"
    return f"{value:.3g}"


def _clock(ms: int, seconds: bool = False) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S" if seconds else "%H:%M")


def svg_chart(name: str, title: str, unit: str, points: list[list], since_ms: int, until_ms: int,
              bars: bool = False) -> str:
    """One chart of (epoch ms, value) points over [since_ms, until_ms]; bars for per-batch counts."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = max(1, until_ms - since_ms)
    top = axis_top(max((v for _, v in points), default=0), unit)

    def x(ms: int) -> float:
        return LEFT + plot_w * min(1.0, max(0.0, (ms - since_ms) / span))

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    parts = [f"<svg class='chart' id='chart-{name}' data-points='{len(points)}' viewBox='0 0 {WIDTH} {HEIGHT}' "
             f"width='100%' role='img' aria-label='{html.escape(title)}' xmlns='http://www.w3.org/2000/svg'>"]
    for frac in (0, 0.5, 1):  # y grid and labels
        gy = y(top * frac)
        parts.append(f"<line class='grid' x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{gy:.1f}' y2='{gy:.1f}'/>"
                     f"<text class='ylabel' x='{LEFT - 6}' y='{gy + 4:.1f}' text-anchor='end'>"
                     f"{html.escape(format_value(top * frac, unit, like=top))}</text>")
    for i in range(5):  # x labels, UTC clock time
        ms = since_ms + span * i // 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(f"<text class='xlabel' x='{x(ms):.1f}' y='{HEIGHT - 10}' text-anchor='{anchor}'>"
                     f"{_clock(ms, seconds=span < 20 * 60_000)}</text>")  # minutes repeat on a short axis
    parts.append(f"<line class='axis' x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{y(0):.1f}' y2='{y(0):.1f}'/>")
    label = lambda ms, v: f"<title>{_clock(ms, seconds=True)} UTC: {html.escape(format_value(v, unit))} {html.escape(unit)}</title>"  # noqa: E731
    if bars:
        for ms, v in points:
            h = y(0) - y(v)
            parts.append(f"<rect class='pt' x='{x(ms) - 1.5:.1f}' y='{y(v):.1f}' width='3' height='{max(h, 0.5):.1f}'>"
                         f"{label(ms, v)}</rect>")
    else:
        line = " ".join(f"{x(ms):.1f},{y(v):.1f}" for ms, v in points)
        parts.append(f"<polyline class='series' points='{line}'/>")
        if len(points) <= MAX_MARKERS:
            parts.extend(f"<circle class='pt' cx='{x(ms):.1f}' cy='{y(v):.1f}' r='2.5'>{label(ms, v)}</circle>"
                         for ms, v in points)
    parts.append("</svg>")
    return "".join(parts)


CHART_CSS = (".chart .grid{stroke:#e3e3e3}.chart .axis{stroke:#888}.chart text{font:11px sans-serif;fill:#555}"
             ".chart .series{fill:none;stroke:#1f6feb;stroke-width:1.5}.chart circle.pt{fill:#1f6feb}"
             ".chart rect.pt{fill:#d1242f}")

__all__ = ["CHART_CSS", "axis_top", "format_value", "nice_ceiling", "svg_chart"]
