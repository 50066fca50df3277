"""Detection benchmark: how soon the scheduled accuracy check catches an abrupt concept drift, and
how often it alarms without one, beside river's ADWIN and DDM on the same error stream.

    python bench/detection.py                 # 5 seeds (0-4)
    python bench/detection.py --quick         # 2 seeds
    python bench/detection.py --seeds 0 1 2 3 4 5 6

A logistic regression trained on SEA variant 0 (x0 + x1 > 8, 10% label noise) is frozen; its
reference is its own predictions on held-out pre-drift data. Its predictions go through the
ingestion API (one sample per 0.6 simulated seconds), each label LABEL_DELAY samples later. At
sample DRIFT_AT the concept switches abruptly to variant 3 (x0 + x1 > 9.5). Celery-beat is
simulated: every simulated minute (CHECK_EVERY samples) the check the beat would dispatch runs
in this process (`quality_check_run` on the policy's scheduled window, what the `check_model`
task calls); alerts come from the platform's own alert rules.
A control stream without drift (CONTROL_WINDOWS check windows) counts false alarms.

Delays are in samples after the drift, on one clock for every detector: our delay ends at the
window end of the first check that has post-drift labels and leaves an accuracy alert open;
ADWIN and DDM see each 0/1 error when its label arrives (same delay, same order). An alarm
whose evidence is pre-drift only is a false alarm.

Uses its own database: SQLite in a temporary folder, or `<name>_detection` when DATABASE_URL
is set (its bench models are replaced). Exit status 0 when the targets are met.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from river.datasets import synth
from river.drift import ADWIN
from river.drift.binary import DDM
from sklearn.linear_model import LogisticRegression

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import bench_database_url, ensure_database  # noqa: E402  (also puts platform/ on sys.path)

# Django and driftwatch modules are imported inside functions: only after django_setup() ran.

# The stream. SEA's classic setting: 10% label noise; variant 0 -> 3 moves the threshold 8 -> 9.5,
# which flips ~13% of the clean labels (accuracy ~0.89 -> ~0.79).
NOISE = 0.1
VARIANT_BEFORE, VARIANT_AFTER = 0, 3
N_TRAIN, N_REFERENCE = 5000, 5000
DRIFT_AT = 2000  # samples before the drift
AFTER_MAX = 3000  # samples after it; not detected by then: no detection
LABEL_DELAY = 100  # the label of sample i arrives with sample i + LABEL_DELAY

# The policy (fixed for every seed). A check every simulated minute = every CHECK_EVERY samples.
CHECK_EVERY = 100
WINDOW = 600  # last 600 samples; 500 of them labelled at LABEL_DELAY 100
TOLERANCE = 0.06  # ~4 standard errors of accuracy on 500 labels at ~0.89
CONTROL_WINDOWS = 50
POLICY = {
    "window_kind": "samples",
    "window_size": WINDOW,
    "check_every_minutes": 1,
    "min_samples": WINDOW,
    "min_labels": WINDOW - LABEL_DELAY,  # decide on full windows only
    "metric": "accuracy",
    "tolerance": TOLERANCE,
    "alert_k": 1,
    "alert_n": 1,
    # Cooldown is measured on the wall clock (alerts._in_cooldown); in simulated time a resolved
    # alert would silence every later one, so it is off here.
    "cooldown_minutes": 0,
}
T0 = datetime(2025, 1, 1, tzinfo=UTC)  # simulated time starts here (the API refuses the future)
TICK = timedelta(microseconds=60_000_000 // CHECK_EVERY)
ACCURACY_DROP = "accuracy_drop"


@dataclass(frozen=True)
class Stream:
    features: np.ndarray  # n x 3
    labels: np.ndarray  # n, 0/1
    proba: np.ndarray  # n x 2, the frozen model's probabilities

    @property
    def predictions(self) -> np.ndarray:
        return self.proba.argmax(axis=1)

    @property
    def errors(self) -> np.ndarray:
        return (self.predictions != self.labels).astype(int)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Alarms:
    """One detector on one stream: alarm times, and the last sample each alarm had seen."""

    times: list[int]
    evidence: list[int]


@dataclass(frozen=True)
class SeedResult:
    seed: int
    delay: dict[str, float]  # detector -> samples after the drift (inf: not detected)
    before: dict[str, int]  # detector -> false alarms before the drift
    control: dict[str, int]  # detector -> false alarms on the control stream
    control_checks: int  # control checks that reached a decision
    control_margin: float  # the closest a control check came to alerting (accuracy points)
    baseline: float  # the reference accuracy the platform derived


# --- data -------------------------------------------------------------------------------------


def sea(variant: int, seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rows = list(synth.SEA(variant=variant, noise=NOISE, seed=seed).take(n))
    features = np.array([[x[0], x[1], x[2]] for x, _ in rows], dtype=float)
    return features, np.array([int(y) for _, y in rows])


def model_train(seed: int) -> Any:
    features, labels = sea(VARIANT_BEFORE, seed, N_TRAIN)
    return LogisticRegression().fit(features, labels)


def stream_make(model: Any, parts: list[tuple[int, int, int]]) -> Stream:
    """Concatenated (variant, seed, n) segments, scored by the frozen model."""
    chunks = [sea(variant, seed, n) for variant, seed, n in parts]
    features = np.vstack([f for f, _ in chunks])
    return Stream(features, np.concatenate([y for _, y in chunks]), model.predict_proba(features))


# --- river baselines --------------------------------------------------------------------------


def river_alarms(errors: np.ndarray, detector: Any) -> Alarms:
    """Feed errors in label-arrival order. Sample i's label comes with sample i + LABEL_DELAY, so an
    alarm on it sounds when i + LABEL_DELAY + 1 samples have been predicted (our checks' clock)."""
    times, evidence = [], []
    for i, error in enumerate(errors):
        detector.update(int(error))
        if detector.drift_detected:
            times.append(i + LABEL_DELAY + 1)
            evidence.append(i)
    return Alarms(times, evidence)


def river_detectors() -> dict[str, Any]:
    return {"ADWIN": ADWIN(), "DDM": DDM()}


def first_detection(alarms: Alarms, limit: int) -> float:
    """Samples from the drift to the first alarm that had seen a post-drift label (inf: none)."""
    for t, seen in zip(alarms.times, alarms.evidence, strict=True):
        if seen >= DRIFT_AT and t - DRIFT_AT <= limit:
            return float(t - DRIFT_AT)
    return float("inf")


def pre_drift_alarms(alarms: Alarms) -> int:
    return sum(1 for seen in alarms.evidence if seen < DRIFT_AT)


# --- the platform -----------------------------------------------------------------------------


def django_setup(var_dir: str) -> None:
    """Own database and var folder, DEBUG off (it would keep every query)."""
    os.environ["DRIFTWATCH_VAR_DIR"] = var_dir
    os.environ.pop("DRIFTWATCH_MEDIA_ROOT", None)
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DJANGO_SETTINGS_MODULE"] = "driftwatch.settings"
    if os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = bench_database_url(suffix="_detection")
        ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def api_client() -> Any:
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from core.services import api_token_create

    user, _ = get_user_model().objects.get_or_create(username="bench-detection")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + api_token_create(user=user, scope="admin")[1])
    return client


def call(client: Any, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = getattr(client, method)("/api/v1/" + path, body, format="json")
    if response.status_code not in (200, 201):
        raise SystemExit(f"{method.upper()} {path}: {response.status_code} {response.content[:500]!r}")
    return dict(response.json())


def stamp(i: int) -> datetime:
    return T0 + i * TICK


def sample_row(stream: Stream, i: int) -> dict[str, Any]:
    p1 = round(float(stream.proba[i, 1]), 6)
    return {
        "features": {f"x{k}": round(float(stream.features[i, k]), 6) for k in range(3)},
        "prediction": int(stream.predictions[i]),
        "probabilities": {"0": round(1 - p1, 6), "1": p1},
    }


def model_create(client: Any, name: str, reference: Stream) -> int:
    """Register, post the reference (the model's own pre-drift predictions), set the policy."""
    from registry.models import RegisteredModel

    RegisteredModel.objects.filter(name=name).delete()  # a rerun on the same database
    features = [{"name": f"x{k}", "type": "numerical"} for k in range(3)]
    call(
        client,
        "post",
        "models",
        {"name": name, "task": "classification", "features": features, "classes": [0, 1]},
    )
    rows = [sample_row(reference, i) | {"label": int(reference.labels[i])} for i in range(len(reference))]
    call(client, "post", f"models/{name}/reference", {"rows": rows})
    call(client, "patch", f"models/{name}/policy", POLICY)
    return int(RegisteredModel.objects.get(name=name).pk)


def ingest(client: Any, name: str, stream: Stream, start: int, end: int) -> None:
    """Predictions [start, end) and the labels that have arrived by then."""
    samples = [
        sample_row(stream, i) | {"id": str(i), "timestamp": stamp(i).isoformat().replace("+00:00", "Z")}
        for i in range(start, end)
    ]
    call(client, "post", f"models/{name}/predictions", {"samples": samples})
    labelled = range(max(0, start - LABEL_DELAY), max(0, end - LABEL_DELAY))
    if len(labelled):
        labels = [{"id": str(i), "label": int(stream.labels[i])} for i in labelled]
        call(client, "post", f"models/{name}/labels", {"labels": labels})


@dataclass(frozen=True)
class Tick:
    at: int  # samples predicted so far = the window end, in samples
    breach: bool | None  # the check's accuracy_drop decision
    margin: float | None  # realised accuracy minus the alert threshold (baseline - tolerance)
    opened: int  # accuracy alerts this check opened
    live: bool  # an accuracy alert is open after it


def beat_tick(model_id: int, at: int) -> Tick:
    """One simulated beat: run the check it would dispatch (a failure fails the bench), then read
    the check and the alerts."""
    from monitoring.alerts import LIVE
    from monitoring.checks import quality_check_run
    from monitoring.models import Alert, MonitoringPolicy, QualityCheck
    from monitoring.scheduling import window_end_for
    from monitoring.window import scheduled_window

    policy = MonitoringPolicy.objects.get(model_id=model_id)
    quality_check_run(model_id=model_id, window=scheduled_window(policy, window_end_for(policy, stamp(at))))
    check = QualityCheck.objects.get(model_id=model_id, window_end=stamp(at))
    alerts = Alert.objects.filter(model_id=model_id, kind=ACCURACY_DROP)
    return Tick(
        at=at,
        breach=check.decisions.get(ACCURACY_DROP),
        margin=decision_margin(check.decisions),
        opened=alerts.filter(opened_by=check).count(),
        live=alerts.filter(state__in=LIVE).exists(),
    )


def decision_margin(decisions: dict[str, Any]) -> float | None:
    value, baseline = decisions.get("value"), decisions.get("baseline")
    if value is None or baseline is None:
        return None
    return float(value - (baseline - decisions["tolerance"]))


def is_detection(tick: Tick) -> bool:
    return tick.at - LABEL_DELAY > DRIFT_AT and bool(tick.breach) and tick.live


def monitor(client: Any, name: str, model_id: int, stream: Stream, stop_on_detection: bool) -> list[Tick]:
    ticks = []
    for at in range(CHECK_EVERY, len(stream) + 1, CHECK_EVERY):
        ingest(client, name, stream, at - CHECK_EVERY, at)
        ticks.append(beat_tick(model_id, at))
        if stop_on_detection and is_detection(ticks[-1]):
            break
    call(client, "patch", f"models/{name}/policy", {"enabled": False})  # out of later beats
    return ticks


def platform_alarms(ticks: list[Tick]) -> Alarms:
    """Alerts opened, with the last labelled sample their check had seen."""
    opened = [t for t in ticks for _ in range(t.opened)]
    return Alarms([t.at for t in opened], [t.at - LABEL_DELAY - 1 for t in opened])


def platform_delay(ticks: list[Tick]) -> float:
    return next((float(t.at - DRIFT_AT) for t in ticks if is_detection(t)), float("inf"))


# --- one seed ---------------------------------------------------------------------------------


def streams_make(seed: int) -> tuple[Stream, Stream, Stream]:
    """The reference, the drifting stream and the control stream, all scored by one frozen model."""
    base = 1000 * (seed + 1)
    model = model_train(base + 1)
    reference = stream_make(model, [(VARIANT_BEFORE, base + 2, N_REFERENCE)])
    drifting = stream_make(
        model, [(VARIANT_BEFORE, base + 3, DRIFT_AT), (VARIANT_AFTER, base + 4, AFTER_MAX)]
    )
    control_len = WINDOW + (CONTROL_WINDOWS - 1) * CHECK_EVERY
    return reference, drifting, stream_make(model, [(VARIANT_BEFORE, base + 5, control_len)])


def baseline_of(model_id: int) -> float:
    from registry.models import ReferenceDataset

    reference = ReferenceDataset.objects.get(model_id=model_id, is_active=True)
    return float(reference.baseline_metrics["accuracy"])


def run_seed(client: Any, seed: int) -> SeedResult:
    reference, drifting, control = streams_make(seed)
    drift_id = model_create(client, f"sea-drift-{seed}", reference)
    ticks = monitor(client, f"sea-drift-{seed}", drift_id, drifting, True)
    control_id = model_create(client, f"sea-control-{seed}", reference)
    control_ticks = monitor(client, f"sea-control-{seed}", control_id, control, False)
    delay = {"ours": platform_delay(ticks)}
    before = {"ours": pre_drift_alarms(platform_alarms(ticks))}
    false_control = {"ours": len(platform_alarms(control_ticks).times)}
    for key, detector in river_detectors().items():
        alarms = river_alarms(drifting.errors, detector)
        delay[key], before[key] = first_detection(alarms, AFTER_MAX), pre_drift_alarms(alarms)
    for key, detector in river_detectors().items():
        false_control[key] = len(river_alarms(control.errors, detector).times)
    return SeedResult(
        seed=seed,
        delay=delay,
        before=before,
        control=false_control,
        control_checks=sum(1 for t in control_ticks if t.breach is not None),
        control_margin=min(t.margin for t in control_ticks if t.margin is not None),
        baseline=baseline_of(drift_id),
    )


# --- report -----------------------------------------------------------------------------------

DETECTORS = ("ours", "ADWIN", "DDM")
RULE = "-" * 104


def fmt_delay(value: float) -> str:
    return "none" if value == float("inf") else f"{value:.0f}"


def row(label: str, delays: list[str], before: list[str], control: list[str], extra: list[str]) -> str:
    groups = [" ".join(f"{c:>6}" for c in g) for g in (delays, before, control)]
    return f"{label:>7} | " + " | ".join(groups) + f" | {extra[0]:>7} {extra[1]:>8} | {extra[2]:>8}"


def report_header() -> None:
    print(
        f"SEA noise={NOISE}, variant {VARIANT_BEFORE} -> {VARIANT_AFTER} at sample {DRIFT_AT} "
        f"(then up to {AFTER_MAX} samples), label delay {LABEL_DELAY} samples"
    )
    print(
        f"policy: last {WINDOW} samples (>= {POLICY['min_labels']} labels), a check every "
        f"{CHECK_EVERY} samples (1 simulated minute), accuracy tolerance {TOLERANCE}, "
        f"alert 1 of 1, cooldown off; river ADWIN(delta=0.002), DDM() defaults"
    )
    print(f"control: no drift, {CONTROL_WINDOWS} check windows; delays in samples after the drift\n")
    print(
        row(
            "",
            ["delay", "", ""],
            ["false", "alarms", "before"],
            ["false", "alarms", "ctrl"],
            ["ctrl", "closest", "baseline"],
        )
    )
    print(row("seed", [*DETECTORS], [*DETECTORS], [*DETECTORS], ["checks", "(acc.)", "accuracy"]))
    print(RULE)


def report_seed(r: SeedResult) -> None:
    delays = [fmt_delay(r.delay[k]) for k in DETECTORS]
    before = [str(r.before[k]) for k in DETECTORS]
    control = [str(r.control[k]) for k in DETECTORS]
    extra = [str(r.control_checks), f"+{r.control_margin:.4f}", f"{r.baseline:.4f}"]
    print(row(str(r.seed), delays, before, control, extra), flush=True)


def report_summary(results: list[SeedResult], elapsed: float) -> bool:
    """Medians of the delays, totals of the false alarms and checks; then the targets."""
    medians = {k: statistics.median(r.delay[k] for r in results) for k in DETECTORS}
    before = [str(sum(r.before[k] for r in results)) for k in DETECTORS]
    control = [str(sum(r.control[k] for r in results)) for k in DETECTORS]
    checks = str(sum(r.control_checks for r in results))
    closest = f"+{min(r.control_margin for r in results):.4f}"
    print(RULE)
    print(row("summary", [fmt_delay(medians[k]) for k in DETECTORS], before, control, [checks, closest, ""]))
    print("(summary: median delays; false alarms and control checks summed over seeds; closest: minimum)")
    quiet = all(r.control["ours"] == 0 and r.control_checks >= CONTROL_WINDOWS for r in results)
    fast = medians["ours"] <= medians["ADWIN"] + CHECK_EVERY
    print(
        f"\ntarget: no false alarm on the control stream over >= {CONTROL_WINDOWS} windows, every seed: "
        f"{'MET' if quiet else 'NOT MET'}"
    )
    print(
        f"target: median delay {fmt_delay(medians['ours'])} <= ADWIN {fmt_delay(medians['ADWIN'])} "
        f"+ one check window ({CHECK_EVERY}): {'MET' if fast else 'NOT MET'}"
    )
    print(f"{len(results)} seed(s) in {elapsed:.0f} s")
    return quiet and fast


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--quick", action="store_true", help="the first two seeds only")
    args = parser.parse_args()
    seeds = args.seeds[:2] if args.quick else args.seeds
    var_dir = tempfile.mkdtemp(prefix="driftwatch-detection-")
    try:
        django_setup(var_dir)
        client = api_client()
        began = time.perf_counter()
        report_header()
        results = []
        for seed in seeds:
            results.append(run_seed(client, seed))
            report_seed(results[-1])
        ok = report_summary(results, time.perf_counter() - began)
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
