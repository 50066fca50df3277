"""The one module that talks to evidently (0.7 API).

evidently is imported inside the functions, never at module import: it pulls in plotly,
pydantic models and hundreds of modules (~2 s), which a worker running only the numpy
engine should not pay for, and it keeps ``import workers.drift`` cheap.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workers.features.registry import ColumnType, feature_type, prediction_type

_VALUE_DRIFT = "evidently:metric_v2:ValueDrift"
_EVIDENTLY_TYPES = {"number": "numerical", "category": "categorical"}


def _evidently_columns(columns: dict[str, ColumnType]) -> dict[str, list[str]]:
    """How evidently sees each column, from its feature type's encoding: numbers as numerical,
    categories as categorical; a type with neither is left out of evidently's report."""
    split: dict[str, list[str]] = {"numerical": [], "categorical": []}
    for name, kind in columns.items():
        encoding = feature_type(kind).encoding
        if encoding is not None:
            split[_EVIDENTLY_TYPES[encoding]].append(name)
    return split


_DRIFTED_COUNT = "evidently:metric_v2:DriftedColumnsCount"


def _datasets(
    reference_df: pd.DataFrame, current_df: pd.DataFrame, columns: dict[str, ColumnType]
) -> tuple[Any, Any]:
    from evidently import DataDefinition, Dataset  # lazy: see the module docstring

    # Explicit definition: evidently never guesses a column's type from its dtype.
    split = _evidently_columns(columns)
    definition = DataDefinition(
        numerical_columns=split["numerical"], categorical_columns=split["categorical"]
    )
    names = [c for c in columns if c in split["numerical"] or c in split["categorical"]]
    current = Dataset.from_pandas(current_df[names], data_definition=definition)
    reference = Dataset.from_pandas(reference_df[names], data_definition=definition)
    return reference, current


def _run_preset(
    reference_df: pd.DataFrame,
    current_df: pd.DataFrame,
    columns: dict[str, ColumnType],
    timestamp: dt.datetime | None,
) -> Any:
    # lazy: see the module docstring
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
    return _script_safe_html([_group(snapshot._widgets), *snapshot._tests_widgets])


_TARGET, _PREDICTION = "target", "prediction"  # the names the report shows


@dataclass(frozen=True)
class ReportColumns:
    """What each window column is to the report. Only ``features`` are drift-tested as inputs
    (and counted in the drifted share); the prediction has its own drift test; the target,
    prediction and probabilities feed the quality section; ids and timestamps are left out."""

    features: dict[str, ColumnType]
    prediction: str
    target: str
    task: str  # "classification" or "regression"
    classes: tuple[Any, ...] = ()
    probabilities: tuple[str, ...] = ()  # one column per class, in class order; () if not logged


def render_check_report_html(
    reference_df: pd.DataFrame,
    current_df: pd.DataFrame,
    columns: ReportColumns,
    *,
    drift_share: float = 0.5,
    timestamp: dt.datetime | None = None,
) -> str:
    """A check's report: data drift of the features (and of the prediction) against the
    reference, then the window's model quality on its labelled rows, or why there is none."""
    from evidently.legacy.renderers.html_widgets import header_text

    when = timestamp or dt.datetime.now(dt.UTC)
    drift = _run_check_drift(reference_df, current_df, columns, drift_share, when)
    widgets = [header_text(label="Data drift of the features"), _group(drift._widgets)]
    labelled = _labelled(current_df, columns)
    kind = "Classification" if columns.task == "classification" else "Regression"
    if len(labelled):
        baseline = _labelled(reference_df, columns)
        quality = _run_quality(labelled, baseline if len(baseline) else None, columns, when)
        label = f"{kind} quality on the {len(labelled)} labelled of {len(current_df)} predictions"
        label += " (and on the reference)" if len(baseline) else " (the reference logged no predictions)"
        widgets += [header_text(label=label), _group(quality._widgets)]
    else:
        label = f"No {kind.lower()} quality: none of the {len(current_df)} predictions has its label yet"
        widgets.append(header_text(label=label))
    return _script_safe_html([*widgets, *drift._tests_widgets])


def _group(widgets: list[Any]) -> Any:
    from evidently.legacy.renderers.html_widgets import group_widget

    return group_widget(title="", widgets=widgets)


def _run_check_drift(
    reference_df: pd.DataFrame,
    current_df: pd.DataFrame,
    columns: ReportColumns,
    drift_share: float,
    when: dt.datetime,
) -> Any:
    from evidently import Report
    from evidently.metrics import ValueDrift
    from evidently.presets import DataDriftPreset

    typed = _drift_types(reference_df, columns)
    # The preset's columns are the features only: the prediction is no input to count as drifted.
    metrics: list[Any] = [DataDriftPreset(columns=list(columns.features), drift_share=drift_share)]
    metrics += [ValueDrift(column=name) for name in typed if name not in columns.features]
    current, reference = (_drift_dataset(frame, columns, typed) for frame in (current_df, reference_df))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # chi-square on categories new to the window
        return Report(metrics, include_tests=True).run(current, reference, timestamp=when)


def _drift_types(reference_df: pd.DataFrame, columns: ReportColumns) -> dict[str, ColumnType]:
    """The features, and the prediction (when the reference has one) under a readable name
    unless a feature already has that name."""
    typed: dict[str, ColumnType] = dict(columns.features)
    if columns.prediction in reference_df and reference_df[columns.prediction].notna().any():
        shown = _PREDICTION if _PREDICTION not in typed else columns.prediction
        typed[shown] = prediction_type(columns.task)
    return typed


def _drift_dataset(frame: pd.DataFrame, columns: ReportColumns, typed: dict[str, ColumnType]) -> Any:
    from evidently import DataDefinition, Dataset

    data = frame[list(columns.features)].copy()
    for name in typed.keys() - columns.features.keys():
        data[name] = _as_type(frame[columns.prediction], typed[name])
    split = _evidently_columns(typed)
    definition = DataDefinition(
        numerical_columns=split["numerical"], categorical_columns=split["categorical"]
    )
    names = [c for c in typed if c in split["numerical"] or c in split["categorical"]]
    return Dataset.from_pandas(data[names], data_definition=definition)


def _as_type(values: pd.Series, kind: ColumnType) -> pd.Series:
    """Class labels as text (ints and strings alike), numbers as floats."""
    if kind == "categorical":
        return values.map(_label_text)
    return pd.to_numeric(values, errors="coerce").astype("float64")


def _label_text(value: Any) -> str | None:
    """A class label as text; an integer class read back as a float (a parquet column of ints
    with a gap is float64) is the same class: 1.0 → "1", never a new category."""
    if value is None or value != value:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _labelled(frame: pd.DataFrame, columns: ReportColumns) -> pd.DataFrame:
    """The rows with both a label and a prediction (a reference may have logged no predictions)."""
    if columns.target not in frame or columns.prediction not in frame:
        return frame.iloc[:0]
    return frame[frame[columns.target].notna() & frame[columns.prediction].notna()]


def _run_quality(
    labelled: pd.DataFrame, baseline: pd.DataFrame | None, columns: ReportColumns, when: dt.datetime
) -> Any:
    """evidently's classification or regression preset on the window's labelled rows, beside
    the reference's own (when it logged predictions)."""
    from evidently import Dataset, Report
    from evidently.presets import ClassificationPreset, RegressionPreset

    frames = [labelled] if baseline is None else [labelled, baseline]
    if columns.task == "classification":
        # Probabilities only when both sides have them: the two datasets share one definition.
        with_probabilities = all(_probabilities(f, columns) is not None for f in frames)
        built = [_classification_data(f, columns, with_probabilities) for f in frames]
        preset: Any = ClassificationPreset()
    else:
        built = [_regression_data(f, columns) for f in frames]
        preset = RegressionPreset()
    datasets = [Dataset.from_pandas(data, data_definition=definition) for data, definition in built]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return Report([preset]).run(datasets[0], datasets[1] if len(datasets) > 1 else None, timestamp=when)


def _regression_data(labelled: pd.DataFrame, columns: ReportColumns) -> tuple[pd.DataFrame, Any]:
    from evidently import DataDefinition, Regression

    data = pd.DataFrame(
        {
            _TARGET: _as_type(labelled[columns.target], "numerical").to_numpy(),
            _PREDICTION: _as_type(labelled[columns.prediction], "numerical").to_numpy(),
        }
    )
    definition = DataDefinition(
        numerical_columns=[_TARGET, _PREDICTION],
        regression=[Regression(target=_TARGET, prediction=_PREDICTION)],
    )
    return data, definition


def _classification_data(
    labelled: pd.DataFrame, columns: ReportColumns, with_probabilities: bool
) -> tuple[pd.DataFrame, Any]:
    from evidently import BinaryClassification, DataDefinition, MulticlassClassification

    classes = [str(c) for c in columns.classes]
    data = pd.DataFrame(
        {
            _TARGET: _as_type(labelled[columns.target], "categorical").to_numpy(),
            _PREDICTION: _as_type(labelled[columns.prediction], "categorical").to_numpy(),
        }
    )
    probabilities = _probabilities(labelled, columns) if with_probabilities else None
    task: Any
    if len(classes) == 2:
        positive = classes[1]
        if probabilities is not None:
            data["probability"] = probabilities[positive]
        task = BinaryClassification(
            target=_TARGET,
            prediction_labels=_PREDICTION,
            prediction_probas="probability" if probabilities is not None else None,
            pos_label=positive,
        )
    else:
        if probabilities is not None:
            for cls in classes:
                data[cls] = probabilities[cls]  # evidently names each class's column by the class
        task = MulticlassClassification(
            target=_TARGET,
            prediction_labels=_PREDICTION,
            prediction_probas=classes if probabilities is not None else None,
        )
    return data, DataDefinition(categorical_columns=[_TARGET, _PREDICTION], classification=[task])


def _probabilities(labelled: pd.DataFrame, columns: ReportColumns) -> dict[str, Any] | None:
    """Each class's probability column, when every labelled row logged every class's."""
    classes = [str(c) for c in columns.classes]
    if len(columns.probabilities) != len(classes) or not classes or {_TARGET, _PREDICTION} & set(classes):
        return None
    if any(name not in labelled for name in columns.probabilities):
        return None  # a reference uploaded without probabilities
    values = {
        cls: pd.to_numeric(labelled[col], errors="coerce").to_numpy()
        for cls, col in zip(classes, columns.probabilities, strict=True)
    }
    if any(pd.isna(v).any() for v in values.values()):
        return None
    # evidently takes the most probable class as the prediction when it has probabilities: only
    # when that is the logged prediction do its label metrics equal the check's.
    most_probable = np.asarray(classes)[np.argmax(np.column_stack(list(values.values())), axis=1)]
    agree = most_probable == _as_type(labelled[columns.prediction], "categorical").to_numpy()
    return values if agree.all() else None


# JSON never has `<`, `>` or `&` outside strings, so escaping them keeps the JSON equal and makes
# `</script>` or `<!--` in a category value, feature name or class label unable to end the
# <script> element it is embedded in (evidently's own template embeds raw json.dumps output).
_SCRIPT_SAFE = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def script_safe_json(value: Any) -> str:
    """JSON text that is safe to place inside an HTML <script> element."""
    from evidently.legacy.utils import NumpyEncoder  # lazy: see the module docstring

    return json.dumps(value, cls=NumpyEncoder).translate(_SCRIPT_SAFE)


def _script_safe_html(widgets: list[Any]) -> str:
    """evidently's stand-alone report (``Snapshot.get_html_str``) of these widgets, its data
    embedded escaped."""
    # lazy: see the module docstring
    from evidently.legacy.model.dashboard import DashboardInfo
    from evidently.legacy.model.widget import AdditionalGraphInfo, BaseWidgetInfo
    from evidently.legacy.renderers.base_renderer import DetailsInfo
    from evidently.legacy.utils.dashboard import TemplateParams, file_html_template

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
    # lazy: see the module docstring
    from evidently.legacy.metrics import DataDriftTable
    from evidently.legacy.pipeline.column_mapping import ColumnMapping
    from evidently.legacy.report import Report as LegacyReport

    split = _evidently_columns(columns)
    mapping = ColumnMapping(numerical_features=split["numerical"], categorical_features=split["categorical"])
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
