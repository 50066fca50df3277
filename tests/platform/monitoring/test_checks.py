from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.checks import quality_check_run
from monitoring.models import Alert, CheckState, MonitoringPolicy, QualityCheck
from monitoring.serializers import CheckOut
from monitoring.window import range_window, scheduled_window
from tests.clock import T0
from tests.platform.monitoring.factories import monitored_model, rows, send


def run_check(model, end):  # type: ignore[no-untyped-def]
    policy = MonitoringPolicy.objects.get(model=model)
    return QualityCheck.objects.get(
        pk=quality_check_run(model_id=model.pk, window=scheduled_window(policy, end)).pk
    )


@pytest.mark.django_db
def test_check_stores_metrics_estimate_drift_and_label_stats() -> None:
    model = monitored_model()
    send(model, rows(1000, seed=2), start=T0, prefix="a")
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.state == CheckState.DONE
    assert (check.n_samples, check.n_labelled) == (1000, 1000)
    assert 0.85 < check.metrics["accuracy"] < 0.95
    assert check.metrics["accuracy_ci"][0] < check.metrics["accuracy"] < check.metrics["accuracy_ci"][1]
    assert abs(check.estimated["value"] - check.metrics["accuracy"]) < 0.05
    assert set(check.drift["columns"]) == {"x1", "x2", "segment"}
    assert check.decisions["data_drift"] is False and check.decisions["accuracy_drop"] is False
    assert check.labels["label_coverage"] == 1.0


@pytest.mark.django_db
def test_rerunning_a_check_for_the_same_window_changes_nothing() -> None:
    model = monitored_model()
    send(model, rows(500, seed=2), start=T0, prefix="a")
    first = CheckOut(run_check(model, T0 + timedelta(hours=1))).data
    second = CheckOut(run_check(model, T0 + timedelta(hours=1))).data
    assert first == second
    assert QualityCheck.objects.count() == 1


@pytest.mark.django_db
def test_drifted_traffic_shows_the_drop_and_opens_one_accuracy_alert() -> None:
    model = monitored_model()
    send(model, rows(1000, seed=2), start=T0, prefix="good")
    good = run_check(model, T0 + timedelta(hours=1))
    send(model, rows(1000, seed=3, shift=1.5, flip=0.4), start=T0 + timedelta(hours=1), prefix="bad")
    bad = run_check(model, T0 + timedelta(hours=2))
    again = run_check(model, T0 + timedelta(hours=3))
    assert good.metrics["accuracy"] - bad.metrics["accuracy"] > 0.2
    assert bad.decisions["accuracy_drop"] is True and again.decisions["accuracy_drop"] is True
    alerts = Alert.objects.filter(model=model, kind="accuracy_drop")
    assert alerts.count() == 1
    assert alerts.get().opened_by_id == bad.pk and alerts.get().state == "open"
    assert Alert.objects.filter(model=model, kind="data_drift").count() == 1


@pytest.mark.django_db
def test_alert_resolves_itself_when_accuracy_recovers() -> None:
    model = monitored_model(resolve_after=1)
    send(model, rows(1000, seed=3, flip=0.45), start=T0, prefix="bad")
    run_check(model, T0 + timedelta(hours=1))
    send(model, rows(1000, seed=4), start=T0 + timedelta(hours=1), prefix="good")
    run_check(model, T0 + timedelta(hours=2))
    alert = Alert.objects.get(model=model, kind="accuracy_drop")
    assert alert.state == "resolved" and alert.resolved_at is not None


@pytest.mark.django_db
def test_k_of_n_waits_for_k_breaching_windows() -> None:
    model = monitored_model(alert_k=2, alert_n=3, window_size=500)
    for hour in range(2):
        send(
            model, rows(500, seed=10 + hour, flip=0.45), start=T0 + timedelta(hours=hour), prefix=f"h{hour}-"
        )
        run_check(model, T0 + timedelta(hours=hour + 1))
        opened = Alert.objects.filter(model=model, kind="accuracy_drop").count()
        assert opened == hour, f"after {hour + 1} breaching window(s)"


@pytest.mark.django_db
def test_cooldown_stops_an_alert_reopening_at_once() -> None:
    model = monitored_model(cooldown_minutes=24 * 60, window_size=500, resolve_after=1)
    plan = [0.45, 0.05, 0.45]  # breach, recover (resolves), breach again inside the cooldown
    for hour, flip in enumerate(plan):
        send(
            model, rows(500, seed=20 + hour, flip=flip), start=T0 + timedelta(hours=hour), prefix=f"h{hour}-"
        )
        run_check(model, T0 + timedelta(hours=hour + 1))
    assert list(Alert.objects.filter(model=model, kind="accuracy_drop").values_list("state", flat=True)) == [
        "resolved"
    ]


@pytest.mark.django_db
def test_broken_feed_raises_data_quality_and_is_not_called_drift() -> None:
    model = monitored_model()
    data = rows(1000, seed=5)
    for r in data[:600]:
        r["features"]["x1"] = None  # a broken upstream join: most values missing
    send(model, data, start=T0, prefix="a")
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.decisions["data_quality"] is True
    assert check.decisions["data_drift"] is None and check.decisions["usable_for_training"] is False
    assert Alert.objects.filter(model=model, kind="data_quality", severity="critical").count() == 1
    assert not Alert.objects.filter(model=model, kind="data_drift").exists()


@pytest.mark.django_db
def test_too_few_samples_make_no_decision() -> None:
    model = monitored_model()
    send(model, rows(50, seed=6, flip=0.5), start=T0, prefix="a")
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.decisions["accuracy_drop"] is None and check.decisions["data_drift"] is None
    assert not Alert.objects.exists()


@pytest.mark.django_db
def test_estimate_is_available_before_labels_arrive() -> None:
    model = monitored_model()
    send(model, rows(1000, seed=7), start=T0, prefix="a", labelled=False)
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.n_labelled == 0 and check.metrics == {}
    assert 0.8 < check.estimated["value"] < 1.0


@pytest.mark.django_db
def test_range_window_counts_only_samples_inside_it() -> None:
    model = monitored_model()
    send(model, rows(300, seed=8), start=T0, prefix="a", step=timedelta(minutes=1))
    check = quality_check_run(model_id=model.pk, window=range_window(T0, T0 + timedelta(minutes=100)))
    assert check is not None and QualityCheck.objects.get(pk=check.pk).n_samples == 100


@pytest.mark.django_db
def test_a_stale_running_check_is_taken_over() -> None:
    model = monitored_model()
    send(model, rows(300, seed=9), start=T0, prefix="a")
    policy = MonitoringPolicy.objects.get(model=model)
    window = scheduled_window(policy, T0 + timedelta(hours=1))
    QualityCheck.objects.create(
        model=model,
        window_spec=window.spec,
        window_start=T0,
        window_end=window.end,
        state=CheckState.RUNNING,
        started_at=timezone.now() - timedelta(hours=1),
        attempts=1,
    )
    check = quality_check_run(model_id=model.pk, window=window)
    assert check is not None
    row = QualityCheck.objects.get(pk=check.pk)
    assert (row.state, row.attempts, row.n_samples) == (CheckState.DONE, 2, 300)


@pytest.mark.django_db
def test_a_fresh_running_check_is_left_to_its_worker() -> None:
    model = monitored_model()
    policy = MonitoringPolicy.objects.get(model=model)
    window = scheduled_window(policy, T0)
    QualityCheck.objects.create(
        model=model,
        window_spec=window.spec,
        window_start=T0,
        window_end=T0,
        state=CheckState.RUNNING,
        started_at=timezone.now(),
        attempts=1,
    )
    quality_check_run(model_id=model.pk, window=window)
    assert QualityCheck.objects.get().state == CheckState.RUNNING


@pytest.mark.django_db
def test_cooldown_is_measured_in_check_time_not_wall_clock() -> None:
    model = monitored_model(cooldown_minutes=90, window_size=500, resolve_after=1)
    plan = [
        0.45,
        0.05,
        0.05,
        0.45,
    ]  # breach, recover at 2h, fine at 3h, breach at 4h: 2h after, past cooldown
    for hour, flip in enumerate(plan):
        send(
            model, rows(500, seed=30 + hour, flip=flip), start=T0 + timedelta(hours=hour), prefix=f"h{hour}-"
        )
        run_check(model, T0 + timedelta(hours=hour + 1))
    states = sorted(Alert.objects.filter(model=model, kind="accuracy_drop").values_list("state", flat=True))
    assert states == ["open", "resolved"]


@pytest.mark.django_db
def test_window_reads_timestamps_with_and_without_fractions() -> None:
    model = monitored_model()
    send(model, rows(300, seed=40), start=T0, prefix="a", step=timedelta(milliseconds=500))
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.state == CheckState.DONE and check.n_samples == 300


@pytest.mark.django_db
def test_late_labels_fill_in_the_realised_side_of_a_finished_check() -> None:
    from monitoring.checks import checks_labels_refresh
    from monitoring.services import labels_ingest

    model = monitored_model()
    data = rows(1000, seed=50, flip=0.3)
    send(model, data, start=T0, prefix="a", labelled=False)
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.metrics == {} and "realised" not in check.estimated
    drift_before, decisions_before = check.drift, check.decisions
    labels_ingest(
        model=model, body={"labels": [{"id": f"a{i}", "label": r["label"]} for i, r in enumerate(data)]}
    )
    assert checks_labels_refresh(now=T0 + timedelta(hours=2)) == 1
    check.refresh_from_db()
    assert check.n_labelled == 1000 and 0.6 < check.metrics["accuracy"] < 0.8
    assert check.estimated["realised"] == check.metrics["accuracy"]
    assert check.estimated["error"] == check.estimated["value"] - check.metrics["accuracy"]
    assert check.drift == drift_before, "drift stays as taken"
    assert decisions_before["value"] is None and decisions_before["accuracy_drop"] is None
    assert check.decisions["value"] == check.metrics["accuracy"] and check.decisions["accuracy_drop"] is True
    unchanged = ("data_drift", "prediction_drift", "estimated_accuracy_drop", "data_quality")
    assert {k: check.decisions[k] for k in unchanged} == {k: decisions_before[k] for k in unchanged}
    assert checks_labels_refresh(now=T0 + timedelta(hours=2)) == 0, "nothing new: no work"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kind", "bad"),
    [("accuracy_drop", {"flip": 0.45}), ("data_drift", {"shift": 1.5})],
)
def test_an_alert_stays_open_through_one_clear_check_and_resolves_after_resolve_after(
    kind: str, bad: dict[str, float]
) -> None:
    model = monitored_model(window_size=500, resolve_after=3)
    plan = [bad, {}, bad, {}, {}, {}]  # breach, one dip under, breach again, then clear for three
    states = []
    for hour, kwargs in enumerate(plan):
        send(model, rows(500, seed=60 + hour, **kwargs), start=T0 + timedelta(hours=hour), prefix=f"h{hour}-")
        check = run_check(model, T0 + timedelta(hours=hour + 1))
        assert check.decisions[kind] is bool(kwargs), f"check {hour}"
        states.append(list(Alert.objects.filter(model=model, kind=kind).values_list("state", flat=True)))
    assert states[:5] == [["open"]] * 5, "one alert, open through the dip"
    assert states[5] == ["resolved"]
    assert Alert.objects.get(model=model, kind=kind).resolved_by_check == check


@pytest.mark.django_db
def test_a_reference_with_no_wrong_prediction_marks_the_estimate_unavailable() -> None:
    model = monitored_model(reference_flip=0.0)
    send(model, rows(1000, seed=2, flip=0.45), start=T0, prefix="a")
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.estimated["available"] is False and check.estimated["value"] is None
    assert "every reference prediction is right" in check.estimated["reason"]
    assert check.decisions["estimated_accuracy_drop"] is None
    assert check.metrics["accuracy"] < 0.7, "the realised side still sees the drop"


@pytest.mark.django_db
def test_labelled_window_reads_the_newest_n_labelled_samples() -> None:
    model = monitored_model(window_kind="labelled", window_size=300, min_samples=100, min_labels=100)
    data = rows(600, seed=70)
    send(model, data[:500], start=T0, prefix="a")  # labelled
    send(model, data[500:], start=T0 + timedelta(seconds=500), prefix="b", labelled=False)  # label delay
    check = run_check(model, T0 + timedelta(hours=1))
    assert check.window_spec == "300labelled"
    assert (check.n_samples, check.n_labelled) == (300, 300)
    assert check.window_start == T0 + timedelta(seconds=200), "samples a200..a499, the newest labelled"
    assert check.metrics["n"] == 300


@pytest.mark.django_db
def test_a_sample_window_of_the_same_size_has_only_the_labels_that_arrived() -> None:
    model = monitored_model(window_kind="samples", window_size=300, min_samples=100, min_labels=100)
    data = rows(600, seed=70)
    send(model, data[:500], start=T0, prefix="a")
    send(model, data[500:], start=T0 + timedelta(seconds=500), prefix="b", labelled=False)
    check = run_check(model, T0 + timedelta(hours=1))
    assert (check.n_samples, check.n_labelled) == (300, 200)


@pytest.mark.django_db
def test_metrics_per_version_are_each_versions_own_and_a_lone_version_has_the_windows() -> None:
    from monitoring.services import labels_ingest, predictions_ingest
    from registry.models import ModelVersion

    model = monitored_model()
    for number in (1, 2):
        ModelVersion.objects.create(model=model, version=number)
    served = {1: rows(600, seed=2, flip=0.05), 2: rows(400, seed=3, flip=0.3)}
    for number, data in served.items():
        samples = [
            {
                "id": f"v{number}-{i}",
                "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
                "version": number,
                "features": r["features"],
                "prediction": r["prediction"],
                "probabilities": r["probabilities"],
            }
            for i, r in enumerate(data)
        ]
        predictions_ingest(model=model, body={"samples": samples})
        labels = [{"id": f"v{number}-{i}", "label": r["label"]} for i, r in enumerate(data)]
        labels_ingest(model=model, body={"labels": labels})
    both = run_check(model, T0 + timedelta(hours=1))
    for number, data in served.items():
        right = sum(r["prediction"] == r["label"] for r in data) / len(data)
        assert both.per_version[f"v{number}"]["n"] == len(data)
        assert both.per_version[f"v{number}"]["accuracy"] == pytest.approx(right)
    assert both.per_version["v1"]["accuracy"] != pytest.approx(both.metrics["accuracy"])
    lone = quality_check_run(
        model_id=model.pk, window=range_window(T0 + timedelta(seconds=400), T0 + timedelta(hours=1))
    )
    assert lone is not None and set(lone.per_version) == {"v1"}  # v2's samples end at second 399
    assert lone.per_version["v1"]["n"] == lone.metrics["n"] == 200
    assert lone.per_version["v1"]["accuracy"] == lone.metrics["accuracy"]
    assert lone.per_version["v1"]["f1_macro"] == lone.metrics["f1_macro"]
