"""SVG geometry for server-rendered charts: no JavaScript, no CDN, so the dashboard works offline.

Pure Python (no Django): the selectors feed it numbers, the template draws what it returns.
"""

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

WIDTH, HEIGHT = 900, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 14, 34


@dataclass(frozen=True)
class Series:
    label: str
    css: str  # a class in driftwatch.css: colour and dash
    values: Sequence[float | None]
    band: Sequence[tuple[float, float] | None] | None = None
    titles: Sequence[str] = field(default_factory=list)


@dataclass(frozen=True)
class HLine:
    label: str
    css: str
    value: float


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def y_domain(
    series: Sequence[Series], hlines: Sequence[HLine], clamp: tuple[float, float] | None
) -> tuple[float, float]:
    """The smallest padded range holding every value, band and line; clamped for bounded metrics."""
    values = [float(v) for s in series for v in s.values if v is not None and _finite(v)]
    values += [float(x) for s in series for b in (s.band or []) if b for x in b if _finite(x)]
    values += [h.value for h in hlines if _finite(h.value)]
    if not values:
        return (0.0, 1.0)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or max(abs(hi) * 0.05, 0.01)
    lo, hi = lo - pad, hi + pad
    if clamp is not None:
        lo, hi = max(lo, clamp[0]), min(hi, clamp[1])
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    raw = (hi - lo) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step) + 1)]


TIME_STEPS = [  # seconds between x ticks, smallest first
    60,
    300,
    900,
    1800,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    2 * 86400,
    7 * 86400,
    14 * 86400,
    30 * 86400,
]


class _Frame:
    """Maps x positions (seconds since the epoch, or indexes when no times are given) and values."""

    def __init__(
        self, xs: Sequence[float], lo: float, hi: float, x_range: tuple[float, float] | None = None
    ) -> None:
        self.n, self.lo, self.hi = len(xs), lo, hi
        self.x0, self.x1 = x_range if x_range else ((min(xs), max(xs)) if xs else (0.0, 1.0))
        self.xs = list(xs)
        self.plot_w, self.plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(self, i: int) -> float:
        return self.at(self.xs[i])

    def at(self, t: float) -> float:
        if self.x1 <= self.x0:
            return LEFT + self.plot_w / 2
        return LEFT + self.plot_w * (t - self.x0) / (self.x1 - self.x0)

    def y(self, v: float) -> float:
        v = min(max(v, self.lo), self.hi)  # a value outside a clamped axis sits on its edge
        return TOP + self.plot_h * (1 - (v - self.lo) / (self.hi - self.lo))


def _line_path(frame: _Frame, values: Sequence[float | None]) -> str:
    """Broken where a value is missing: a gap says 'no data', not 'interpolated'."""
    parts, pen_down = [], False
    for i, v in enumerate(values):
        if not _finite(v):
            pen_down = False
            continue
        assert v is not None
        parts.append(f"{'L' if pen_down else 'M'}{frame.x(i):.1f},{frame.y(v):.1f}")
        pen_down = True
    return " ".join(parts)


def _band_path(frame: _Frame, band: Sequence[tuple[float, float] | None]) -> tuple[str, str]:
    """(area path, whisker path): runs of two or more intervals fill an area; a lone interval is an
    error bar, never a sliver of area."""
    segments: list[list[tuple[int, float, float]]] = [[]]
    for i, b in enumerate(band):
        if b and _finite(b[0]) and _finite(b[1]):
            segments[-1].append((i, b[0], b[1]))
        elif segments[-1]:
            segments.append([])
    areas, whiskers = [], []
    for seg in filter(None, segments):
        if len(seg) == 1:
            i, lo, hi = seg[0]
            x, top, bottom = frame.x(i), frame.y(hi), frame.y(lo)
            whiskers.append(
                f"M{x - 4:.1f},{top:.1f} L{x + 4:.1f},{top:.1f} M{x:.1f},{top:.1f} L{x:.1f},{bottom:.1f} "
                f"M{x - 4:.1f},{bottom:.1f} L{x + 4:.1f},{bottom:.1f}"
            )
            continue
        upper = [(frame.x(i), frame.y(hi)) for i, _, hi in seg]
        lower = [(frame.x(i), frame.y(lo)) for i, lo, _ in reversed(seg)]
        areas.append("M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower) + " Z")
    return " ".join(areas), " ".join(whiskers)


@dataclass(frozen=True)
class Marker:
    """A moment on the time axis: a breach, an alert, a retrain job, a promotion."""

    t: float  # seconds since the epoch
    kind: str  # breach | alert | retrain | promotion (a css class)
    title: str
    href: str = ""


def time_ticks(x0: float, x1: float, count: int = 6) -> list[tuple[float, str]]:
    """Round instants between x0 and x1 (UTC), each labelled once, with its year."""
    span = max(x1 - x0, 1.0)
    step = next((s for s in TIME_STEPS if span / s <= count), TIME_STEPS[-1])
    fmt = "%Y-%m-%d" if step >= 86400 else "%Y-%m-%d %H:%M"
    first = math.ceil(x0 / step) * step
    ticks, t = [], float(first)
    while t <= x1:
        ticks.append((t, datetime.fromtimestamp(t, UTC).strftime(fmt)))
        t += step
    return ticks


def line_chart(
    *,
    times: Sequence[float],
    series: Sequence[Series],
    hlines: Sequence[HLine] = (),
    clamp: tuple[float, float] | None = None,
    y_format: str = "{:.2f}",
    y_label: str = "",
    x_range: tuple[float, float] | None = None,
    markers: Sequence[Marker] = (),
) -> dict[str, Any] | None:
    """Everything the template needs to draw one chart on a time axis (seconds since the epoch):
    paths, points, bands, axes, markers, legend. None when no series has a value to draw."""
    if not any(_finite(v) for s in series for v in s.values):
        return None
    lo, hi = y_domain(series, hlines, clamp)
    if x_range is None or x_range[1] <= x_range[0]:
        pad = max((max(times) - min(times)) * 0.03, 1800.0)
        x_range = (min(times) - pad, max(times) + pad)
    frame = _Frame(times, lo, hi, x_range)
    drawn = []
    for s in series:
        points = [
            {
                "x": f"{frame.x(i):.1f}",
                "y": f"{frame.y(v):.1f}",
                "title": s.titles[i] if i < len(s.titles) else "",
            }
            for i, v in enumerate(s.values)
            if _finite(v) and v is not None
        ]
        band, whiskers = _band_path(frame, s.band) if s.band else ("", "")
        path = _line_path(frame, s.values)
        drawn.append(
            {
                "label": s.label,
                "css": s.css,
                "path": path,
                "band": band,
                "whiskers": whiskers,
                "points": points,
            }
        )
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": WIDTH - RIGHT,
        "top": TOP,
        "bottom": HEIGHT - BOTTOM,
        "mid_y": f"{TOP + (HEIGHT - TOP - BOTTOM) / 2:.1f}",
        "y_label": y_label,
        "series": drawn,
        "hlines": [
            {
                "label": h.label,
                "css": h.css,
                "y": f"{frame.y(h.value):.1f}",
                "value": y_format.format(h.value),
            }
            for h in hlines
            if _finite(h.value) and lo <= h.value <= hi
        ],
        "y_ticks": [{"y": f"{frame.y(t):.1f}", "label": y_format.format(t)} for t in nice_ticks(lo, hi)],
        "x_ticks": [{"x": f"{frame.at(t):.1f}", "label": label} for t, label in time_ticks(*x_range)],
        "markers": [
            {"x": f"{frame.at(m.t):.1f}", "kind": m.kind, "title": m.title, "href": m.href}
            for m in markers
            if x_range[0] <= m.t <= x_range[1]
        ],
        "marker_kinds": sorted({m.kind for m in markers if x_range[0] <= m.t <= x_range[1]}),
    }


def _attr(value: Any) -> str:
    return html.escape(str(value), quote=True)


def chart_svg(chart: dict[str, Any]) -> str:
    """The chart as SVG markup, built here rather than in a template loop: a long range draws
    about a thousand elements, which Django's template engine renders a hundred times slower."""
    c, out = chart, []
    left, right, top, bottom = c["left"], c["right"], c["top"], c["bottom"]
    out.append(
        f'<svg viewBox="0 0 {c["width"]} {c["height"]}" role="img" aria-label="{_attr(c.get("metric", ""))} over time" '
        'xmlns="http://www.w3.org/2000/svg">'
    )
    for t in c["y_ticks"]:
        out.append(f'<line class="grid-line" x1="{left}" x2="{right}" y1="{t["y"]}" y2="{t["y"]}"/>')
        out.append(
            f'<text class="tick" x="{left - 6}" y="{t["y"]}" text-anchor="end" dominant-baseline="middle">{t["label"]}</text>'
        )
    out.append(
        f'<text class="y-label" transform="translate(12 {c["mid_y"]}) rotate(-90)" text-anchor="middle">'
        f"{_attr(c['y_label'])}</text>"
    )
    for t in c["x_ticks"]:
        out.append(f'<line class="grid-line x-grid" x1="{t["x"]}" x2="{t["x"]}" y1="{top}" y2="{bottom}"/>')
        out.append(
            f'<text class="tick x-tick" x="{t["x"]}" y="{bottom + 18}" text-anchor="middle">{t["label"]}</text>'
        )
    out.append(f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>')
    for m in c["markers"]:
        shape = (
            f'<line x1="{m["x"]}" x2="{m["x"]}" y1="{top}" y2="{bottom}"/>'
            f'<rect x="{m["x"]}" y="{bottom - 7}" width="7" height="7" transform="rotate(45 {m["x"]} {bottom - 7})"/>'
        )
        if m["href"]:
            shape = f'<a href="{_attr(m["href"])}">{shape}</a>'
        out.append(f'<g class="marker m-{m["kind"]}">{shape}<title>{_attr(m["title"])}</title></g>')
    for s in c["series"]:
        if s["band"]:
            out.append(f'<path class="band {s["css"]}" d="{s["band"]}"/>')
        if s["whiskers"]:
            out.append(f'<path class="whisker {s["css"]}" d="{s["whiskers"]}"/>')
    for h in c["hlines"]:
        label = _attr(f"{h['label']} {h['value']}")
        out.append(
            f'<line class="{h["css"]}" x1="{left}" x2="{right}" y1="{h["y"]}" y2="{h["y"]}"><title>{label}</title></line>'
        )
        out.append(
            f'<text class="hlabel {h["css"]}" x="{right}" y="{h["y"]}" dy="-4" text-anchor="end">{label}</text>'
        )
    for s in c["series"]:
        out.append(f'<path class="line {s["css"]}" d="{s["path"]}"/>')
        for p in s["points"]:
            title = f"<title>{_attr(p['title'])}</title>" if p["title"] else ""
            out.append(f'<circle class="pt {s["css"]}" cx="{p["x"]}" cy="{p["y"]}" r="3.2">{title}</circle>')
    out.append("</svg>")
    return "".join(out)
