"""Segments: the check once per segment value (top values by volume plus "other"), against the
same segment of the reference; alerts per segment under the same k-of-n and hysteresis rules."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from rest_framework.test import APIClient

from core.errors import InvalidInput
from monitoring.checks import quality_check_run
from monitoring.models import Alert, MonitoringPolicy, QualityCheck
from monitoring.policy import policy_update
from monitoring.segment_rules import bin_names, segment_entries
from monitoring.window import scheduled_window
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send

SEGMENTED = {
    "segments": [{"feature": "segment"}],
    "min_samples": 100,
    "min_labels": 100,
    "sequential_detector": False,  # the window rule alone, so the whole model's verdict is plain
}


def spoiled(n: int, *, seed: int, value: str = "c", flip: float = 0.4) -> list[dict[str, Any]]:
    """Traffic whose predictions go wrong (with probability ``flip``) only where segment == value."""
    rng = np.random.default_rng(seed + 1000)
    out = rows(n, seed=seed)
    for r in out:
        if r["features"]["segment"] == value and rng.random() < flip:
            r["prediction"] = 1 - r["label"]
            r["probabilities"] = {"0": r["probabilities"]["1"], "1": r["probabilities"]["0"]}
    return out


def check_at(model: Any, hours: int) -> QualityCheck:
    policy = MonitoringPolicy.objects.get(model=model)
    check = quality_check_run(model_id=model.pk, window=scheduled_window(policy, T0 + timedelta(hours=hours)))
    assert check is not None
    return check


def traffic(model: Any, hour: int, data: list[dict[str, Any]]) -> QualityCheck:
    """Send a window's traffic just before hour ``hour`` and check it."""
    send(model, data, start=T0 + timedelta(hours=hour - 1), prefix=f"h{hour}-")
    return check_at(model, hour)


def entry(check: QualityCheck, key: str) -> dict[str, Any]:
    return segment_entries(check.segments)[key]


@pytest.mark.django_db(transaction=True)
def test_a_segment_that_degrades_alerts_with_its_segment_and_the_whole_model_does_not() -> None:
    model = monitored_model(**SEGMENTED)
    check = traffic(model, 1, spoiled(1000, seed=5))
    values = [e["value"] for e in check.segments["segment"]["values"]]
    assert values == ["a", "b", "c"]  # by volume in the reference (0.5, 0.3, 0.2)
    bad, good = entry(check, "segment=c"), entry(check, "segment=a")
    assert bad["metrics"]["accuracy"] < 0.7 < 0.85 < good["metrics"]["accuracy"]
    assert (bad["decisions"]["accuracy_drop"], good["decisions"]["accuracy_drop"]) == (True, False)
    assert (
        bad["estimated"]["value"] is not None and bad["estimated"]["realised"] == bad["metrics"]["accuracy"]
    )
    assert check.decisions["accuracy_drop"] is False
    alerts = list(Alert.objects.filter(model=model, kind="accuracy_drop").values_list("segment", flat=True))
    assert alerts == ["segment=c"]
    alert = Alert.objects.get(model=model, kind="accuracy_drop")
    assert alert.details["segment"] == "segment=c" and alert.message.startswith("segment=c: ")


@pytest.mark.django_db(transaction=True)
def test_a_segment_is_held_against_the_same_segment_of_the_reference() -> None:
    """Segment "c" is 20% of the reference; a window of only "c" rows drifts for the whole model
    (the category's share) but not within segment c, whose own reference rows are all "c"."""
    model = monitored_model(**SEGMENTED)
    only_c = [r for r in rows(4000, seed=9) if r["features"]["segment"] == "c"][:600]
    check = traffic(model, 1, only_c)
    assert check.drift["columns"]["segment"]["drifted"] is True
    assert entry(check, "segment=c")["drift"]["columns"]["segment"]["drifted"] is False
    assert entry(check, "segment=c")["n_samples"] == 600


@pytest.mark.django_db(transaction=True)
def test_top_values_by_volume_then_other() -> None:
    model = monitored_model(**SEGMENTED, segment_limit=1)
    check = traffic(model, 1, rows(1000, seed=5))
    values = check.segments["segment"]["values"]
    assert [v["value"] for v in values] == ["a", "other"]
    assert sum(v["n_samples"] for v in values) == check.n_samples == 1000


@pytest.mark.django_db(transaction=True)
def test_a_segment_too_small_says_so_and_decides_nothing() -> None:
    model = monitored_model(**{**SEGMENTED, "segments": [{"feature": "x1", "bins": [-2.0, 2.0]}]})
    check = traffic(model, 1, spoiled(1000, seed=5, value="a", flip=1.0))
    assert [v["value"] for v in check.segments["x1"]["values"]] == ["[-2, 2)", ">=2", "<-2"]
    small = entry(check, "x1=<-2")
    assert 0 < small["n_samples"] < 100
    assert small["decisions"]["undecided"].startswith("too small for a decision")
    assert all(small["decisions"][k] is None for k in ("accuracy_drop", "data_drift", "prediction_drift"))
    assert not Alert.objects.filter(model=model, segment="x1=<-2").exists()
    assert entry(check, "x1=[-2, 2)")["decisions"]["accuracy_drop"] is True


@pytest.mark.django_db(transaction=True)
def test_segment_alerts_follow_k_of_n_and_resolve_after_clear_checks() -> None:
    model = monitored_model(**SEGMENTED, alert_k=2, alert_n=3, resolve_after=2)
    traffic(model, 1, spoiled(1000, seed=11))
    assert not Alert.objects.filter(model=model, segment="segment=c").exists()  # 1 of 3
    traffic(model, 2, spoiled(1000, seed=12))
    alert = Alert.objects.get(model=model, segment="segment=c", kind="accuracy_drop")
    assert alert.state == "open"
    traffic(model, 3, rows(1000, seed=13))
    alert.refresh_from_db()
    assert alert.state == "open"  # one clear check: hysteresis keeps it
    traffic(model, 4, rows(1000, seed=14))
    alert.refresh_from_db()
    assert alert.state == "resolved"
    assert not Alert.objects.filter(model=model, kind="accuracy_drop", segment="").exists()


@pytest.mark.django_db(transaction=True)
def test_a_segment_alert_whose_segment_is_no_longer_measured_resolves_after_resolve_after_checks() -> None:
    model = monitored_model(**SEGMENTED, resolve_after=2)
    traffic(model, 1, spoiled(1000, seed=11))
    alert = Alert.objects.get(model=model, segment="segment=c", kind="accuracy_drop")
    # The policy stops segmenting by "segment": nothing can decide the alert clear any more.
    policy_update(policy=MonitoringPolicy.objects.get(model=model), changes={"segments": []})
    traffic(model, 2, spoiled(1000, seed=12))
    alert.refresh_from_db()
    assert alert.state == "open"  # one check without it: not yet
    traffic(model, 3, spoiled(1000, seed=13))
    alert.refresh_from_db()
    assert (
        alert.state == "resolved" and "not measured by the last 2 checks" in alert.details["resolved_because"]
    )
    assert not Alert.objects.filter(model=model, kind="accuracy_drop", segment="").exists()


def test_bin_names_cover_the_line() -> None:
    assert bin_names([30, 50]) == ["<30", "[30, 50)", ">=50"]
    assert bin_names([0.5]) == ["<0.5", ">=0.5"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("segments", "row", "message"),
    [
        ([{"feature": "nope"}], 0, "not a feature of this model"),
        ([{"feature": "segment"}, {"feature": "x1"}], 1, "give its bin edges"),
        ([{"feature": "x1", "bins": [2, 1]}], 0, "strictly increasing"),
        ([{"feature": "x1", "bins": [1, float("nan")]}], 0, "finite numbers"),
        ([{"feature": "segment", "bins": [1]}], 0, "takes no bins"),
        ([{"feature": "segment"}, {"feature": "segment"}], 1, "named twice"),
        ([{"feature": "segment", "limit": 3}], 0, "unknown keys: limit"),
        (["segment"], 0, 'with a "feature" name'),
        ({"feature": "segment"}, None, "must be a list"),
    ],
)
def test_bad_segments_are_refused_naming_row_and_nothing_is_stored(
    segments: Any, row: Any, message: str
) -> None:
    model = monitored_model()
    policy = MonitoringPolicy.objects.get(model=model)
    with pytest.raises(InvalidInput) as raised:
        policy_update(policy=policy, changes={"segments": segments, "segment_limit": 3})
    (error,) = raised.value.errors
    assert (error.row, error.field) == (row, "segments") and message in error.message
    assert MonitoringPolicy.objects.get(model=model).segments == []


@pytest.mark.django_db
@pytest.mark.parametrize("limit", [0, 51, "5", True])
def test_a_bad_segment_limit_is_refused(limit: Any) -> None:
    policy = MonitoringPolicy.objects.get(model=monitored_model())
    with pytest.raises(InvalidInput) as raised:
        policy_update(policy=policy, changes={"segment_limit": limit})
    assert [e.field for e in raised.value.errors] == ["segment_limit"]


@pytest.mark.django_db(transaction=True)
def test_the_api_sets_segments_and_returns_them_with_checks_and_alerts(
    client_for: Callable[[str], APIClient],
) -> None:
    model = monitored_model(min_samples=100, min_labels=100, sequential_detector=False)
    admin = client_for("admin")
    response = admin.patch(
        "/api/v1/models/sea/policy", {"segments": [{"feature": "segment"}], "segment_limit": 2}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["segments"] == [{"feature": "segment"}]
    traffic(model, 1, spoiled(1000, seed=5))
    checks = client_for("read").get("/api/v1/models/sea/checks").json()
    body = checks["results"][0] if isinstance(checks, dict) else checks[0]
    keys = [v["key"] for v in body["segments"]["segment"]["values"]]
    assert keys == ["segment=a", "segment=b", "segment=other"]
    alerts = client_for("read").get("/api/v1/models/sea/alerts").json()
    listed = alerts["results"] if isinstance(alerts, dict) else alerts
    assert [a["segment"] for a in listed if a["kind"] == "accuracy_drop"] == ["segment=other"]


@pytest.mark.django_db(transaction=True)
def test_late_labels_fill_in_each_segments_realised_quality() -> None:
    from monitoring.checks import check_labels_refresh
    from monitoring.services import labels_ingest

    model = monitored_model(**SEGMENTED)
    data = spoiled(1000, seed=5)
    send(model, data, start=T0, prefix="late", labelled=False)
    check = check_at(model, 1)
    assert entry(check, "segment=c")["metrics"] == {}
    labels = [{"id": f"late{i}", "label": r["label"]} for i, r in enumerate(data)]
    labels_ingest(model=model, body={"labels": labels})
    assert check_labels_refresh(check=check)
    check.refresh_from_db()
    late = entry(check, "segment=c")
    assert late["n_labelled"] == late["n_samples"] > 100
    assert late["metrics"]["accuracy"] < 0.7
    assert late["estimated"]["realised"] == late["metrics"]["accuracy"]
    assert late["decisions"]["accuracy_drop"] is None  # decided when the check ran, without labels


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("segments", [[{"feature": "segment"}], []])
def test_a_refresh_reads_no_feature_but_those_its_segments_are_cut_by(
    segments: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import monitoring.checks as checks
    from monitoring.services import labels_ingest

    model = monitored_model(**(SEGMENTED | {"segments": segments}))
    data = spoiled(1000, seed=5)
    send(model, data, start=T0, prefix="late", labelled=False)
    check = check_at(model, 1)
    labels_ingest(
        model=model, body={"labels": [{"id": f"late{i}", "label": r["label"]} for i, r in enumerate(data)]}
    )
    read: list[list[str]] = []

    def window_load(**kwargs: Any) -> Any:
        window = load(**kwargs)
        read.append([c for c in window.frame.columns if c in data[0]["features"]])
        return window

    load = checks.window_load
    monkeypatch.setattr(checks, "window_load", window_load)
    assert checks.check_labels_refresh(check=check)
    assert read == [[s["feature"] for s in segments]]
    check.refresh_from_db()
    assert check.n_labelled == check.n_samples == 1000
    assert 0.7 < check.metrics["accuracy"] < 0.95  # segment c's flips (40% of a fifth) in the whole
    if segments:
        assert entry(check, "segment=c")["metrics"]["accuracy"] < 0.7
