"""SVG geometry for server-rendered charts: no JavaScript, no CDN, so the dashboard works offline.

Pure Python (no Django): the selectors feed it numbers, the template draws what it returns.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
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


class _Frame:
    def __init__(self, n: int, lo: float, hi: float) -> None:
        self.n, self.lo, self.hi = n, lo, hi
        self.plot_w, self.plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(self, i: int) -> float:
        if self.n <= 1:
            return LEFT + self.plot_w / 2
        return LEFT + self.plot_w * i / (self.n - 1)

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


def _band_path(frame: _Frame, band: Sequence[tuple[float, float] | None]) -> str:
    segments: list[list[tuple[int, float, float]]] = [[]]
    for i, b in enumerate(band):
        if b and _finite(b[0]) and _finite(b[1]):
            segments[-1].append((i, b[0], b[1]))
        elif segments[-1]:
            segments.append([])
    paths = []
    for seg in filter(None, segments):
        # A lone point gets a narrow bar so its interval still shows.
        half = 3.0 if len(seg) == 1 else 0.0
        upper = [(frame.x(i) - half, frame.y(hi)) for i, _, hi in seg]
        lower = [(frame.x(i) + half, frame.y(lo)) for i, lo, _ in reversed(seg)]
        if half:
            upper.append((frame.x(seg[0][0]) + half, frame.y(seg[0][2])))
            lower.append((frame.x(seg[0][0]) - half, frame.y(seg[0][1])))
        paths.append("M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower) + " Z")
    return " ".join(paths)


def line_chart(
    *,
    x_labels: Sequence[str],
    series: Sequence[Series],
    hlines: Sequence[HLine] = (),
    clamp: tuple[float, float] | None = None,
    y_format: str = "{:.2f}",
) -> dict[str, Any]:
    """Everything the template needs to draw one chart: paths, points, axes, legend."""
    lo, hi = y_domain(series, hlines, clamp)
    frame = _Frame(len(x_labels), lo, hi)
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
        drawn.append(
            {
                "label": s.label,
                "css": s.css,
                "path": _line_path(frame, s.values),
                "band": _band_path(frame, s.band) if s.band else "",
                "points": points,
            }
        )
    every = max(1, math.ceil(len(x_labels) / 7))
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": WIDTH - RIGHT,
        "top": TOP,
        "bottom": HEIGHT - BOTTOM,
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
        "x_ticks": _x_ticks(frame, x_labels, every),
    }


def _x_ticks(frame: _Frame, labels: Sequence[str], every: int) -> list[dict[str, str]]:
    last = len(labels) - 1
    # The last label always shows; the regular one before it is dropped when they would overlap.
    keep = [i for i in range(0, last, every) if frame.x(last) - frame.x(i) >= 120]
    ticks = [{"x": f"{frame.x(i):.1f}", "label": labels[i], "anchor": "middle"} for i in keep]
    if labels:
        ticks.append(
            {"x": f"{frame.x(last):.1f}", "label": labels[last], "anchor": "end" if last else "middle"}
        )
    return ticks
