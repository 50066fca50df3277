"""NannyML's side of bench/nannyml.py: runs in the peers venv (never driftwatch's), prints JSON.

    /work/venvs/est-peers/bin/python bench/_nannyml_peer.py var/nannyml

Writes each shipped dataset's reference and analysis (with its targets joined) as CSV under the
given folder, fits CBPE (classifiers) or DLE (the regressor) with NannyML's defaults (default
chunking: 10 chunks), and prints per dataset the chunks' row ranges and, per metric and chunk,
the estimate, its confidence band, the realised value, NannyML's thresholds and its alert.
"""

import contextlib
import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("NML_DISABLE_USAGE_LOGGING", "1")  # no network from the bench
# The script's folder holds bench/nannyml.py, which would shadow the nannyml package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import nannyml as nml  # noqa: E402
import pandas as pd  # noqa: E402

warnings.filterwarnings("ignore")
# pandas 3 reads strings as Arrow arrays, which NannyML 0.13.1's encoders cannot reshape.
pd.set_option("future.infer_string", False)

CAR_LOAN_FEATURES = [
    "car_value",
    "salary_range",
    "debt_to_income_ratio",
    "loan_length",
    "repaid_loan_on_prev_car",
    "size_of_downpayment",
    "driver_tenure",
]
MC_FEATURES = [
    "acq_channel",
    "app_behavioral_score",
    "requested_credit_limit",
    "app_channel",
    "credit_bureau_score",
    "stated_income",
    "is_customer",
]
MC_PROBA = {c: f"y_pred_proba_{c}" for c in ("prepaid_card", "highstreet_card", "upmarket_card")}
PRICE_FEATURES = ["car_age", "km_driven", "price_new", "accident_count", "door_count", "fuel", "transmission"]
CLASSIFIER_METRICS = ["roc_auc", "f1", "precision", "recall", "accuracy"]
REGRESSOR_METRICS = ["mae", "mse", "rmse"]


def _frames(loader, target: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    reference, analysis, targets = loader()
    analysis = analysis.merge(targets, on="id", how="left")
    return reference, analysis


def _records(result, metrics: list[str]) -> dict:
    frame = result.filter(period="analysis").to_df()
    out = {
        "chunks": [
            [int(s), int(e) + 1]
            for s, e in zip(frame[("chunk", "start_index")], frame[("chunk", "end_index")], strict=True)
        ],
        "metrics": {},
    }
    for metric in metrics:
        column = frame[metric]
        out["metrics"][metric] = {
            "estimated": column["value"].astype(float).tolist(),
            "lower": column["lower_confidence_boundary"].astype(float).tolist(),
            "upper": column["upper_confidence_boundary"].astype(float).tolist(),
            "realised": column["realized"].astype(float).tolist(),
            "alert": column["alert"].astype(bool).tolist(),
            "lower_threshold": _float(column["lower_threshold"].iloc[0]),
            "upper_threshold": _float(column["upper_threshold"].iloc[0]),
        }
    return out


def _float(value) -> float | None:
    return None if pd.isna(value) else float(value)


def main(folder: Path) -> None:
    with contextlib.redirect_stdout(sys.stderr):  # LightGBM logs to stdout: keep it for the JSON
        out = _run(folder)
    print(json.dumps(out))


def _run(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    reference, analysis = _frames(nml.load_synthetic_car_loan_dataset, "repaid")
    cbpe = nml.CBPE(
        y_pred_proba="y_pred_proba",
        y_pred="y_pred",
        y_true="repaid",
        timestamp_column_name="timestamp",
        metrics=CLASSIFIER_METRICS,
        problem_type="classification_binary",
    ).fit(reference)
    out["car_loan"] = _records(cbpe.estimate(analysis), CLASSIFIER_METRICS)
    reference.to_csv(folder / "car_loan_reference.csv", index=False)
    analysis.to_csv(folder / "car_loan_analysis.csv", index=False)

    reference, analysis = _frames(nml.load_synthetic_multiclass_classification_dataset, "y_true")
    cbpe = nml.CBPE(
        y_pred_proba=MC_PROBA,
        y_pred="y_pred",
        y_true="y_true",
        timestamp_column_name="timestamp",
        metrics=CLASSIFIER_METRICS,
        problem_type="classification_multiclass",
    ).fit(reference)
    out["multiclass"] = _records(cbpe.estimate(analysis), CLASSIFIER_METRICS)
    reference.to_csv(folder / "multiclass_reference.csv", index=False)
    analysis.to_csv(folder / "multiclass_analysis.csv", index=False)

    reference, analysis = _frames(nml.load_synthetic_car_price_dataset, "y_true")
    dle = nml.DLE(
        feature_column_names=PRICE_FEATURES,
        y_pred="y_pred",
        y_true="y_true",
        timestamp_column_name="timestamp",
        metrics=REGRESSOR_METRICS,
    ).fit(reference)
    out["car_price"] = _records(dle.estimate(analysis), REGRESSOR_METRICS)
    reference.to_csv(folder / "car_price_reference.csv", index=False)
    analysis.to_csv(folder / "car_price_analysis.csv", index=False)
    return out


if __name__ == "__main__":
    main(Path(sys.argv[1]))
