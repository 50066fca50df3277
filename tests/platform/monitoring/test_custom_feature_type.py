"""A feature type registered from this module alone goes through the whole flow: refused at
registration until it exists, then validated and cleaned at ingest, stored, summarised in the
reference, drift-tested in a check with its own test, drawn in the heat map and its drill-down,
and a malformed value is refused naming row and field with nothing stored."""

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from monitoring.models import CheckDistribution, MonitoringPolicy, PredictionSample, QualityCheck
from monitoring.reference import reference_state
from monitoring.window import window_load
from registry.models import RegisteredModel
from tests.platform.conftest import stored_features
from workers.drift.distribution import DistributionDict, fractions, psi
from workers.drift.stats import StatTest, ks_pvalue
from workers.drift.summary import NumericalSummary, ReferenceSummary, finite_values, summarize_numerical
from workers.features import (
    DriftScore,
    FeatureKind,
    InvalidValue,
    register_feature_type,
    unregister_feature_type,
)

NAME = "shares"
# The toy type's own test: evidently's KS, under its own name, so the check shows which one ran.
PERCENT_KS = StatTest("percent_ks", "K-S p_value on percents", 0.05, higher_is_drift=False)
DECILES = np.linspace(0.0, 100.0, 11)


class Percent(FeatureKind[NumericalSummary]):
    """A share in percent: a JSON number from 0 to 100, drawn in deciles."""

    name = "percent"
    storage_dtype = "float64"
    encoding = "number"
    summary_arrays = ("",)
    array_prefix = "pct"
    distribution_note = "deciles of 0–100%"

    def clean(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
            raise InvalidValue(f"a percent is a number from 0 to 100, got {value!r}")
        return float(value)

    def parse_text(self, text: str) -> Any:
        try:
            return float(text.removesuffix("%"))
        except ValueError:
            raise InvalidValue(f"not a percent: {text[:40]!r}") from None

    def column(self, values: pd.Series) -> pd.Series:
        return pd.to_numeric(values, errors="coerce").astype("float64")

    def summarize(self, values: pd.Series) -> NumericalSummary:
        return summarize_numerical(values)

    def summary_dump(self, summary: NumericalSummary) -> tuple[Any, dict[str, np.ndarray]]:
        return {"std": summary.std, "n_unique": summary.n_unique}, {"": summary.sorted_values}

    def summary_load(self, meta: Any, arrays: Mapping[str, np.ndarray]) -> NumericalSummary:
        return NumericalSummary(arrays[""], float(meta["std"]), int(meta["n_unique"]))

    def default_stattest(self, n_reference: int, n_unique: int) -> StatTest:
        return PERCENT_KS

    def drift(self, summary: NumericalSummary, values: pd.Series) -> DriftScore | None:
        current = finite_values(values)
        if summary.n == 0 or current.size == 0:
            return None
        return DriftScore(PERCENT_KS, ks_pvalue(summary.sorted_values, current), int(current.size))

    def distribution(self, summary: NumericalSummary, values: pd.Series) -> DistributionDict | None:
        reference, current = summary.sorted_values, finite_values(values)
        if reference.size == 0 or current.size == 0:
            return None
        ref_counts = np.histogram(reference, DECILES)[0]
        cur_counts = np.histogram(current, DECILES)[0]
        return {
            "column_type": self.name,
            "labels": [f"{a:.0f}–{b:.0f}%" for a, b in zip(DECILES[:-1], DECILES[1:], strict=True)],
            "edges": DECILES.tolist(),
            "reference": fractions(ref_counts),
            "current": fractions(cur_counts),
            "n_reference": int(reference.size),
            "n_current": int(current.size),
            "psi": psi(ref_counts, cur_counts),
            "wasserstein_norm": None,
            "cramers_v": None,
        }

    def missing(self, values: pd.Series) -> np.ndarray:
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        return ~np.isfinite(numbers)


MODEL = {
    "name": NAME,
    "task": "classification",
    "classes": [0, 1],
    "features": [{"name": "share", "type": "percent"}, {"name": "x", "type": "numerical"}],
}


@pytest.fixture
def percent() -> Iterator[Percent]:
    kind = Percent()
    register_feature_type(kind)
    yield kind
    unregister_feature_type(kind.name)


@pytest.fixture
def api(client_for: Callable[[str], APIClient], percent: Percent) -> APIClient:
    return client_for("ingest")


def _hour() -> datetime:
    return timezone.now().replace(minute=0, second=0, microsecond=0)


def _rows(n: int, *, seed: int, low: float) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    share, x = rng.uniform(low, low + 40, n), rng.normal(0, 1, n)
    return [
        {
            "features": {"share": round(float(share[i]), 2), "x": float(x[i])},
            "prediction": int(x[i] > 0),
            "probabilities": {"0": 0.3, "1": 0.7} if x[i] > 0 else {"0": 0.7, "1": 0.3},
            "label": int(x[i] > 0),
        }
        for i in range(n)
    ]


def _samples(rows: list[dict[str, Any]], start: datetime, prefix: str) -> list[dict[str, Any]]:
    keep = ("features", "prediction", "probabilities")
    return [
        {"id": f"{prefix}{i}", "timestamp": (start + timedelta(seconds=i)).isoformat()}
        | {k: r[k] for k in keep}
        for i, r in enumerate(rows)
    ]


def _registered(api: APIClient) -> RegisteredModel:
    assert api.post("/api/v1/models", MODEL, format="json").status_code == 201
    response = api.post(
        f"/api/v1/models/{NAME}/reference", {"rows": _rows(600, seed=1, low=20)}, format="json"
    )
    assert response.status_code == 201, response.json()
    model = RegisteredModel.objects.get(name=NAME)
    MonitoringPolicy.objects.update_or_create(model=model, defaults={"min_samples": 100, "min_labels": 100})
    return model


def _checked(api: APIClient, start: datetime) -> QualityCheck:
    """A window whose shares moved from 20–60% to 50–90%, checked through the API."""
    samples = _samples(_rows(300, seed=2, low=50), start, "w")
    assert (
        api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json").status_code == 200
    )
    end = start + timedelta(hours=1)
    response = api.post(
        f"/api/v1/models/{NAME}/checks", {"start": start.isoformat(), "end": end.isoformat()}, format="json"
    )
    assert response.status_code in (200, 201), response.json()
    return QualityCheck.objects.get(pk=response.json()["id"])


def test_an_unregistered_type_is_refused_at_registration(client_for: Callable[[str], APIClient]) -> None:
    response = client_for("ingest").post("/api/v1/models", MODEL, format="json")
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert (error["row"], error["field"]) == (0, "features.type")
    assert not RegisteredModel.objects.filter(name=NAME).exists()


@pytest.mark.django_db
def test_values_of_the_new_type_are_cleaned_at_ingest_and_stored(api: APIClient) -> None:
    _registered(api)
    sample = _samples(_rows(1, seed=3, low=20), _hour(), "s")[0]
    sample["features"]["share"] = 42
    response = api.post(f"/api/v1/models/{NAME}/predictions", {"samples": [sample]}, format="json")
    assert response.json() == {"accepted": 1, "duplicates": 0}
    model = RegisteredModel.objects.get(name=NAME)
    stored = stored_features(model)["s0"]["share"]
    assert stored == 42.0 and isinstance(stored, float)
    loaded = window_load(model=model, start=None, end=_hour() + timedelta(hours=1)).frame
    assert loaded["share"].dtype == "float64" and loaded["share"].tolist() == [42.0]


@pytest.mark.django_db
def test_a_malformed_value_of_the_new_type_is_refused_naming_row_and_field(api: APIClient) -> None:
    _registered(api)
    samples = _samples(_rows(3, seed=4, low=20), _hour(), "bad")
    samples[1]["features"]["share"] = 140
    response = api.post(f"/api/v1/models/{NAME}/predictions", {"samples": samples}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"row": 1, "field": "features.share", "message": "a percent is a number from 0 to 100, got 140"}
    ]
    assert not PredictionSample.objects.filter(model__name=NAME).exists()


@pytest.mark.django_db
def test_the_reference_summarises_the_new_type_with_its_own_summary(api: APIClient) -> None:
    state = reference_state(model=_registered(api))
    assert state is not None
    summary = state.summary
    assert summary.columns["share"] == "percent"
    assert summary.column("share").n == 600 and summary.column("share").sorted_values.min() >= 20
    restored = ReferenceSummary.from_bytes(summary.to_bytes())
    assert np.array_equal(restored.column("share").sorted_values, summary.column("share").sorted_values)


@pytest.mark.django_db
def test_a_check_tests_the_new_type_with_its_own_test_and_stores_its_distribution(api: APIClient) -> None:
    _registered(api)
    check = _checked(api, _hour() - timedelta(hours=1))
    share = check.drift["columns"]["share"]
    assert (share["column_type"], share["method"], share["drifted"]) == ("percent", "percent_ks", True)
    assert share["n_current"] == 300 and share["higher_is_drift"] is False
    assert check.drift["columns"]["x"]["method"] == "ks"  # the built-in type beside it, unchanged
    assert check.data_quality["columns"]["share"]["missing_count"] == 0
    payload = CheckDistribution.objects.get(quality_check=check, column="share").payload
    assert payload["column_type"] == "percent" and len(payload["labels"]) == 10


@pytest.mark.django_db
def test_the_heat_map_and_the_drill_down_draw_the_new_type(api: APIClient) -> None:
    _registered(api)
    check = _checked(api, _hour() - timedelta(hours=1))
    client = Client()
    client.force_login(User.objects.create_user("ops", password="pw-ops-12345", is_staff=True))
    page = client.get(f"/models/{NAME}/").content.decode()
    assert f"/models/{NAME}/drift/?feature=share&amp;range=" in page
    assert "K-S p_value on percents" in page
    drill = client.get(f"/models/{NAME}/drift/?feature=share&range=all&check={check.pk}")
    assert drill.status_code == 200
    assert "deciles of 0–100%" in drill.content.decode() and "50–60%" in drill.content.decode()
