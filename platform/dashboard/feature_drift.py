"""One feature's drift over time (a point per check, from the check rows) and its distributions in
the reference and in one check's window (stored by the check), with the effect sizes."""

import html
from datetime import datetime
from typing import Any

from django.utils.safestring import mark_safe

from dashboard.charts import HLine, Marker, Series, chart_svg, line_chart
from dashboard.heatmap import drift_cell
from dashboard.numbers import finite, fixed
from workers.drift.result import StoredScore

HIST_W, HIST_H = 900, 240
SCATTER_W, SCATTER_H, SCATTER_PAD = 900, 360, 40
HIST_LEFT, HIST_RIGHT, HIST_TOP, HIST_BOTTOM = 48, 12, 12, 64
EFFECT_LABELS = {
    "psi": "PSI (population stability index; < 0.1 stable, > 0.25 a large shift)",
    "wasserstein_norm": "Wasserstein distance / reference std",
    "cramers_v": "Cramér's V (0 same mix, 1 disjoint)",
}


def score_chart(points: list[dict[str, Any]], effects: dict[int, float], query: str) -> dict[str, Any] | None:
    """The stored drift score of each check on a time axis, the test's threshold, and a mark on
    each check that drifted (a link to its distributions: ``?<query>&check=<id>``). ``points``:
    {"id", "window_end", "column"} (a ``StoredScore`` or None), oldest first."""
    if not points:
        return None
    columns: list[StoredScore] = [p["column"] or StoredScore() for p in points]
    latest = next((c for c in reversed(columns) if c.method), StoredScore())
    # One axis, one test: a p-value and a distance do not share a scale. Checks scored by another
    # test (a new reference can change evidently's choice) are left out of the line and counted.
    same_test = [c.method == latest.method for c in columns]
    scores = [c.score if same else None for c, same in zip(columns, same_test, strict=True)]
    titles = [_point_title(p, effects.get(p["id"])) for p in points]
    times = [_seconds(p["window_end"]) for p in points]
    threshold = latest.threshold
    hlines = [HLine("threshold", "h-tolerance", threshold)] if threshold is not None else []
    markers = [
        Marker(t, "breach", f"check #{p['id']}: drifted", href=f"?{query}&check={p['id']}#distribution")
        for t, p, c in zip(times, points, columns, strict=True)
        if c.drifted
    ]
    chart = line_chart(
        times=times,
        series=[Series("drift score", "s-realised", scores, titles=titles)],
        hlines=hlines,
        clamp=(0.0, 1.0) if latest.is_p_value else None,
        y_format="{:.3g}",
        y_label=_y_label(latest),
        markers=markers,
    )
    if chart is not None:
        chart["svg"] = mark_safe(chart_svg(chart))  # noqa: S308 (every value is escaped in chart_svg)
        chart["other_test"] = sum(
            1 for p, same in zip(points, same_test, strict=True) if p["column"] is not None and not same
        )
    return chart


def _y_label(column: StoredScore) -> str:
    name = column.name
    rule = "below" if column.is_p_value else "above"
    return f"{name} ({rule} the threshold = drift)"


def _point_title(point: dict[str, Any], effect: float | None) -> str:
    cell = drift_cell(point["column"])
    psi = f" · PSI {fixed(effect)}" if effect is not None else ""
    return f"check #{point['id']} · {point['window_end']:%Y-%m-%d %H:%M} · {cell['title']}{psi}"


def _seconds(moment: datetime) -> float:
    return moment.timestamp()


def effect_rows(distribution: dict[str, Any]) -> list[dict[str, str]]:
    """The effect sizes the check stored for this column, with what each one means."""
    rows = []
    for key, label in EFFECT_LABELS.items():
        value = finite(distribution.get(key))
        if value is not None:
            rows.append({"key": key, "label": label, "value": fixed(value, 4)})
    return rows


def histogram(distribution: dict[str, Any]) -> dict[str, Any] | None:
    """Reference and window side by side per bin (or category), as fractions of their rows."""
    labels = distribution.get("labels") or []
    reference, current = distribution.get("reference") or [], distribution.get("current") or []
    if not labels or len(reference) != len(labels) or len(current) != len(labels):
        return None
    top = max([*reference, *current, 1e-9])
    plot_w = HIST_W - HIST_LEFT - HIST_RIGHT
    plot_h = HIST_H - HIST_TOP - HIST_BOTTOM
    slot = plot_w / len(labels)
    bar = slot * 0.4
    groups = []
    for i, (label, r, c) in enumerate(zip(labels, reference, current, strict=True)):
        x = HIST_LEFT + i * slot + slot * 0.1
        groups.append(
            {
                "label": label,
                "ref": _bar(x, bar, r, top, plot_h),
                "cur": _bar(x + bar, bar, c, top, plot_h),
                "title": f"{label}: reference {100 * r:.1f}% · window {100 * c:.1f}%",
                "text_x": f"{x + bar:.1f}",
            }
        )
    chart = {"groups": groups, "top": top, "label_every": max(1, len(labels) // 10)}
    chart["svg"] = mark_safe(_histogram_svg(chart))  # noqa: S308 (labels are escaped in _histogram_svg)
    return chart


def _bar(x: float, width: float, fraction: float, top: float, plot_h: float) -> dict[str, str]:
    height = plot_h * fraction / top
    return {
        "x": f"{x:.1f}",
        "y": f"{HIST_TOP + plot_h - height:.1f}",
        "w": f"{width:.1f}",
        "h": f"{height:.1f}",
    }


def _histogram_svg(chart: dict[str, Any]) -> str:
    bottom = HIST_H - HIST_BOTTOM
    out = [
        f'<svg viewBox="0 0 {HIST_W} {HIST_H}" role="img" aria-label="reference and window distributions" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<line class="axis" x1="{HIST_LEFT}" x2="{HIST_W - HIST_RIGHT}" y1="{bottom}" y2="{bottom}"/>',
        f'<text class="tick" x="{HIST_LEFT - 6}" y="{HIST_TOP + 4}" text-anchor="end">'
        f"{100 * chart['top']:.0f}%</text>",
        f'<text class="tick" x="{HIST_LEFT - 6}" y="{bottom}" text-anchor="end">0%</text>',
    ]
    for i, g in enumerate(chart["groups"]):
        title = f"<title>{html.escape(g['title'])}</title>"
        for side, css in (("ref", "bar-ref"), ("cur", "bar-cur")):
            b = g[side]
            out.append(
                f'<rect class="{css}" x="{b["x"]}" y="{b["y"]}" width="{b["w"]}" height="{b["h"]}">{title}</rect>'
            )
        if i % chart["label_every"] == 0:
            out.append(
                f'<text class="tick bin-label" x="{g["text_x"]}" y="{bottom + 12}" text-anchor="end" '
                f'transform="rotate(-35 {g["text_x"]} {bottom + 12})">{html.escape(_short(g["label"]))}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def _short(label: str, limit: int = 18) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def scatter(distribution: dict[str, Any]) -> dict[str, Any] | None:
    """An embedding's sampled reference and window points on the reference's first two principal
    components (``distribution["points"]``), as an SVG; None for other columns."""
    points = distribution.get("points") or {}
    reference, current = points.get("reference") or [], points.get("current") or []
    if not reference or not current:
        return None
    xs = [p[0] for p in reference + current]
    ys = [p[1] for p in reference + current]
    box = (min(xs), max(xs), min(ys), max(ys))
    chart: dict[str, Any] = {"n_reference": len(reference), "n_current": len(current)}
    chart["svg"] = mark_safe(_scatter_svg(reference, current, box))  # noqa: S308 (numbers only)
    return chart


def _scatter_svg(reference: list[list[float]], current: list[list[float]], box: tuple[float, ...]) -> str:
    x0, x1, y0, y1 = box
    plot_w, plot_h = SCATTER_W - 2 * SCATTER_PAD, SCATTER_H - 2 * SCATTER_PAD

    def at(x: float, y: float) -> str:
        cx = SCATTER_PAD + plot_w * (x - x0) / ((x1 - x0) or 1)
        cy = SCATTER_PAD + plot_h * (1 - (y - y0) / ((y1 - y0) or 1))
        return f'cx="{cx:.1f}" cy="{cy:.1f}"'

    bottom = SCATTER_H - SCATTER_PAD
    out = [
        f'<svg viewBox="0 0 {SCATTER_W} {SCATTER_H}" role="img" xmlns="http://www.w3.org/2000/svg" '
        'aria-label="reference and window on the reference\'s first two principal components">',
        f'<line class="axis" x1="{SCATTER_PAD}" x2="{SCATTER_W - SCATTER_PAD}" y1="{bottom}" y2="{bottom}"/>',
        f'<line class="axis" x1="{SCATTER_PAD}" x2="{SCATTER_PAD}" y1="{SCATTER_PAD}" y2="{bottom}"/>',
        f'<text class="tick" x="{SCATTER_W / 2:.0f}" y="{SCATTER_H - 8}" text-anchor="middle">'
        f"PC1 ({fixed(x0, 2)} … {fixed(x1, 2)})</text>",
        f'<text class="tick" x="12" y="{SCATTER_H / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {SCATTER_H / 2:.0f})">PC2 ({fixed(y0, 2)} … {fixed(y1, 2)})</text>',
    ]
    for css, side in (("dot-ref", reference), ("dot-cur", current)):
        out += [f'<circle class="{css}" {at(x, y)} r="2.5"/>' for x, y in side]
    out.append("</svg>")
    return "".join(out)
