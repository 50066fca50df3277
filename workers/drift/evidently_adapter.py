"""The one module that talks to evidently (0.7 API).

evidently is imported inside the functions, never at module import: it pulls in plotly,
pydantic models and hundreds of modules (~2 s), which a worker running only the numpy
engine should not pay for, and it keeps ``import workers.drift`` cheap.
"""

from __future__ import annotations

import datetime as dt
import warnings
from typing import Any

import pandas as pd

from workers.drift.summary import ColumnType

_VALUE_DRIFT = "evidently:metric_v2:ValueDrift"
_DRIFTED_COUNT = "evidently:metric_v2:DriftedColumnsCount"


def _datasets(
    reference_df: pd.DataFrame, current_df: pd.DataFrame, columns: dict[str, ColumnType]
) -> tuple[Any, Any]:
    from evidently import DataDefinition, Dataset

    # Explicit definition: evidently never guesses a column's type from its dtype.
    definition = DataDefinition(
        numerical_columns=[c for c, t in columns.items() if t == "numerical"],
        categorical_columns=[c for c, t in columns.items() if t == "categorical"],
    )
    names = list(columns)
    current = Dataset.from_pandas(current_df[names], data_definition=definition)
    reference = Dataset.from_pandas(reference_df[names], data_definition=definition)
    return reference, current


def _run_preset(
    reference_df: pd.DataFrame,
    current_df: pd.DataFrame,
    columns: dict[str, ColumnType],
    timestamp: dt.datetime | None,
) -> Any:
    from evidently import Report
    from evidently.presets import DataDriftPreset

    reference, current = _datasets(reference_df, current_df, columns)
    report = Report([DataDriftPreset()], include_tests=True)
    # Report.run defaults to a naive "now"; driftwatch keeps every datetime aware.
    when = timestamp or dt.datetime.now(dt.UTC)
    with warnings.catch_warnings():
        # evidently's chi-square divides by zero for categories absent from the reference.
        warnings.simplefilter("ignore", RuntimeWarning)
        return report.run(current, reference, timestamp=when)


def _parse_snapshot(snapshot: dict[str, Any]) -> dict[str, Any]:
    columns: dict[str, dict[str, Any]] = {}
    share, count = None, None
    for metric in snapshot["metrics"]:
        config = metric["config"]
        if config["type"] == _VALUE_DRIFT:
            columns[config["column"]] = {
                "method_display": config["method"],
                "threshold": config["threshold"],
                "score": metric["value"],
            }
        elif config["type"] == _DRIFTED_COUNT:
            share, count = metric["value"]["share"], metric["value"]["count"]
    for test in snapshot["tests"]:
        params = test["metric_config"]["params"]
        if params["type"] == _VALUE_DRIFT:
            columns[params["column"]]["drifted"] = test["status"] == "FAIL"
    return {"columns": columns, "share": share, "number_of_drifted_columns": count}


def evidently_data_drift(
    reference_df: pd.DataFrame,
    current_df: pd.DataFrame,
    columns: dict[str, ColumnType],
    *,
    timestamp: dt.datetime | None = None,
) -> dict[str, Any]:
    """Run evidently's ``DataDriftPreset`` and return its decisions in plain Python.

    ``{"columns": {name: {method_display, threshold, score, drifted}}, "share",
    "number_of_drifted_columns", "dataset_drift"}``; per-column values come from the
    ``ValueDrift`` metrics and their tests, the share from ``DriftedColumnsCount``.
    """
    snapshot = _run_preset(reference_df, current_df, columns, timestamp)
    result = _parse_snapshot(snapshot.dict())
    result["dataset_drift"] = result["share"] is not None and result["share"] >= 0.5
    return result


def render_drift_report_html(
    reference_df: pd.DataFrame,
    current_df: pd.DataFrame,
    columns: dict[str, ColumnType],
    *,
    timestamp: dt.datetime | None = None,
) -> str:
    """evidently's stand-alone HTML drift report of ``current_df`` against ``reference_df``."""
    snapshot = _run_preset(reference_df, current_df, columns, timestamp)
    return _script_safe_html(snapshot)


# JSON never has `<`, `>` or `&` outside strings, so escaping them keeps the JSON equal and makes
# `</script>` or `<!--` in a category value, feature name or class label unable to end the
# <script> element it is embedded in (evidently's own template embeds raw json.dumps output).
_SCRIPT_SAFE = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def script_safe_json(value: Any) -> str:
    """JSON text that is safe to place inside an HTML <script> element."""
    import json

    from evidently.legacy.utils import NumpyEncoder

    return json.dumps(value, cls=NumpyEncoder).translate(_SCRIPT_SAFE)


def _script_safe_html(snapshot: Any) -> str:
    """evidently's stand-alone report (``Snapshot.get_html_str``), its data embedded escaped."""
    import uuid

    from evidently.legacy.model.dashboard import DashboardInfo
    from evidently.legacy.model.widget import AdditionalGraphInfo, BaseWidgetInfo
    from evidently.legacy.renderers.base_renderer import DetailsInfo
    from evidently.legacy.renderers.html_widgets import group_widget
    from evidently.legacy.utils.dashboard import TemplateParams, file_html_template

    widgets = [group_widget(title="", widgets=snapshot._widgets), *snapshot._tests_widgets]
    graphs: dict[str, Any] = {}
    for widget in widgets:
        for graph in widget.get_additional_graphs():
            info = graph.params if isinstance(graph, AdditionalGraphInfo) else graph
            detail = DetailsInfo(title="", info=info, id=graph.id)
            graphs[f"{detail.id}"] = (
                detail.info.dict() if isinstance(detail.info, BaseWidgetInfo) else detail.info
            )
    dashboard_id = "metric_" + uuid.uuid4().hex
    info = DashboardInfo(name="Report", widgets=widgets).dict()
    for widget_dict in info["widgets"]:
        widget_dict.pop("additionalGraphs", None)
    params = TemplateParams(
        dashboard_id=dashboard_id,
        dashboard_info=DashboardInfo(name="Report", widgets=[]),
        additional_graphs={},
        embed_data=False,
    )
    data = (
        f"<script>\n    var {dashboard_id} = {script_safe_json(info)};\n"
        f"    var additional_graphs_{dashboard_id} = {script_safe_json(graphs)};\n</script>"
    )
    html = file_html_template(params)
    marker = "<!-- no embedded data -->"
    if html.count(marker) != 1:
        raise RuntimeError("evidently's report template changed: cannot embed the data safely")
    return html.replace(marker, data)


def evidently_dataset_level_scores(
    reference_df: pd.DataFrame, current_df: pd.DataFrame, columns: dict[str, ColumnType]
) -> dict[str, tuple[float, bool]]:
    """Per-column ``(score, drifted)`` from the dataset-level drift table that evidently's
    ``DriftedColumnsCount`` (and the preset's HTML table) is computed from.

    It differs from the per-column ``ValueDrift`` metric in one way: it only drops ±inf from
    a column that also holds NaN, so ±inf reaches the statistics (NaN or inf scores).
    """
    from evidently.legacy.metrics import DataDriftTable
    from evidently.legacy.pipeline.column_mapping import ColumnMapping
    from evidently.legacy.report import Report as LegacyReport

    mapping = ColumnMapping(
        numerical_features=[c for c, t in columns.items() if t == "numerical"],
        categorical_features=[c for c, t in columns.items() if t == "categorical"],
    )
    report = LegacyReport(metrics=[DataDriftTable(columns=list(columns))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        report.run(
            reference_data=reference_df[list(columns)],
            current_data=current_df[list(columns)],
            column_mapping=mapping,
        )
        # The legacy report computes lazily: the ±inf arithmetic warns here, not in run().
        by_column = report.as_dict()["metrics"][0]["result"]["drift_by_columns"]
    return {name: (float(r["drift_score"]), bool(r["drift_detected"])) for name, r in by_column.items()}
