"""Detection benchmark: how soon the platform's alerts catch a drift, and how often they alarm
without one, beside river's ADWIN and DDM on the same error stream. Four runs:

- `window`: the scheduled accuracy check (last 600 samples) on SEA, labels 100 samples late;
- `labelled`: labels delivered in batches every LABEL_BATCH samples; a "last 800 samples"
  policy (the smallest that always holds 500 labels) against a "last 500 labelled samples" one;
- `persistent`: five of nine features drift by DRIFT_SHIFT sd and stay drifted; the data-drift
  alert with resolve_after 3 against resolve_after 1 (openings and resolutions);
- `sequential`: the window rule plus the platform's persisted ADWIN on the error stream, fed
  label by label as each check runs, against river's ADWIN fed the same errors directly.

    python bench/detection.py                 # 5 seeds (0-4), every run
    python bench/detection.py --quick         # 2 seeds
    python bench/detection.py --runs labelled persistent --seeds 0 1 2 3 4 5 6

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
ADWIN and DDM see each 0/1 error when its label reaches the platform (with the batch it came
in, same order), so every detector is timed on the one clock. An alarm whose evidence is
pre-drift only is a false alarm.

Uses its own database: SQLite in a temporary folder, or `<name>_detection` when DATABASE_URL
is set (its bench models are replaced). Exit status 0 when the targets are met.
"""

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from river.datasets import synth
from river.drift import ADWIN
from river.drift.binary import DDM
from sklearn.linear_model import LogisticRegression

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import admin_api_client, bench_database_url, ensure_database  # noqa: E402  (also puts platform/ on sys.path)

# Django and driftwatch modules are imported inside functions: only after django_setup() ran.

# The stream. SEA's classic setting: 10% label noise; variant 0 -> 3 moves the threshold 8 -> 9.5,
# which flips ~13% of the clean labels (accuracy ~0.89 -> ~0.79).
NOISE = 0.1
VARIANT_BEFORE, VARIANT_AFTER = 0, 3
N_TRAIN, N_REFERENCE = 5000, 5000
DRIFT_AT = 2000  # samples before the drift
AFTER_MAX = 3000  # samples after it; not detected by then: no detection
LABEL_DELAY = 100  # the label of sample i arrives with sample i + LABEL_DELAY
LABEL_BATCH = 300  # `labelled` run: every LABEL_BATCH samples, the labels of all samples before

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
    "resolve_after": 1,
    "sequential_detector": False,  # the window rule alone; the `sequential` run turns it on
    # Cooldown is measured in check time; off here so a resolved alert never hides a later one.
    "cooldown_minutes": 0,
}
# `sequential` run: the same window rule, plus the model's persisted ADWIN on its error stream.
SEQUENTIAL_POLICY = POLICY | {"sequential_detector": True}
# `labelled` run: both decide on 500 labels; 800 samples is the smallest sample window that holds
# 500 labels at every check when labels come in batches of LABEL_BATCH.
LABELLED_POLICIES = {
    "samples800": POLICY | {"window_size": 500 + LABEL_BATCH, "min_samples": 500, "min_labels": 500},
    "labelled500": POLICY
    | {"window_kind": "labelled", "window_size": 500, "min_samples": 500, "min_labels": 500},
}
# `persistent` run: five of nine features shift by DRIFT_SHIFT reference sd and stay shifted, so
# the drifted share (5/9 = 0.56 against 0.5) dips under the threshold whenever one feature's
# score dips under its own.
N_FEATURES, N_DRIFTED, DRIFT_SHIFT = 9, 5, 0.19
PERSISTENT_BEFORE, PERSISTENT_AFTER = 1000, 2000
PERSISTENT_POLICIES = {f"resolve-after-{k}": POLICY | {"resolve_after": k} for k in (3, 1)}
# Simulated time starts at a midnight a week back: the streams (hours long) end in the past, as
# the API refuses the future, whatever day the bench runs.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=7)
TICK = timedelta(microseconds=60_000_000 // CHECK_EVERY)
ACCURACY_DROP, DATA_DRIFT = "accuracy_drop", "data_drift"


@dataclass(frozen=True)
class Labels:
    """When each label reaches the platform, counted in samples predicted so far."""

    delay: int = LABEL_DELAY  # fixed: label i comes once sample i + delay has been predicted
    batch: int = 0  # batched: every `batch` samples, the labels of all samples before

    def arrival(self, i: int) -> int:
        return (i // self.batch + 1) * self.batch if self.batch else i + self.delay + 1

    def tick(self, i: int) -> int:
        """The check tick whose ingestion brings label i (labels are posted with each batch)."""
        return -(-self.arrival(i) // CHECK_EVERY) * CHECK_EVERY

    def newest(self, at: int) -> int:
        """The newest sample whose label has arrived once `at` samples were predicted."""
        if self.batch:
            return at // self.batch * self.batch - 1
        return at - self.delay - 1

    def describe(self) -> str:
        if self.batch:
            return f"labels in batches every {self.batch} samples (delay 1-{self.batch})"
        return f"labels {self.delay} samples late"


@dataclass(frozen=True)
class Stream:
    features: np.ndarray  # n x k
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


@dataclass
class SeedResult:
    seed: int
    delay: dict[str, float] = field(default_factory=dict)  # detector -> samples after the drift
    before: dict[str, int] = field(default_factory=dict)  # detector -> false alarms before the drift
    control: dict[str, int] = field(default_factory=dict)  # detector -> false alarms, control stream
    control_checks: int = 0  # control checks that reached a decision (first platform detector)
    extra: dict[str, Any] = field(default_factory=dict)


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


def gaussian_stream(seed: int, n: int, shift_from: int | None) -> Stream:
    """N_FEATURES standard normals; from `shift_from` on, the first N_DRIFTED shift by DRIFT_SHIFT.
    The model scores x0 + x1 (right 90% of the time); only the inputs matter in this run."""
    rng = np.random.default_rng(seed)
    features = rng.normal(0, 1, (n, N_FEATURES))
    if shift_from is not None:
        features[shift_from:, :N_DRIFTED] += DRIFT_SHIFT
    p1 = 1 / (1 + np.exp(-3 * (features[:, 0] + features[:, 1])))
    truth = (rng.random(n) < np.clip(p1, 0.1, 0.9)).astype(int)
    return Stream(features, truth, np.column_stack([1 - p1, p1]))


# --- river baselines --------------------------------------------------------------------------


def river_alarms(errors: np.ndarray, detector: Any, labels: Labels) -> Alarms:
    """Feed errors in label-arrival order; an alarm sounds at the tick that brought its label."""
    times, evidence = [], []
    for i in sorted(range(len(errors)), key=labels.arrival):
        detector.update(int(errors[i]))
        if detector.drift_detected:
            times.append(labels.tick(i))
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
    os.environ["DRIFTWATCH_DEBUG"] = "0"
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ["DJANGO_SETTINGS_MODULE"] = "driftwatch.settings"
    if os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = bench_database_url(suffix="_detection")
        ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    logging.getLogger("monitoring.sequential").setLevel(logging.WARNING)  # a line per check
    logging.getLogger("core.audit").setLevel(logging.WARNING)  # a line per policy edit
    call_command("migrate", interactive=False, verbosity=0)


def call(client: Any, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = getattr(client, method)("/api/v1/" + path, body, format="json")
    if response.status_code not in (200, 201):
        raise SystemExit(f"{method.upper()} {path}: {response.status_code} {response.content[:500]!r}")
    return dict(response.json())


def stamp(i: int) -> datetime:
    return T0 + i * TICK


def iso(i: int) -> str:
    return stamp(i).isoformat().replace("+00:00", "Z")


def sample_row(stream: Stream, i: int) -> dict[str, Any]:
    p1 = round(float(stream.proba[i, 1]), 6)
    return {
        "features": {
            f"x{k}": round(float(stream.features[i, k]), 6) for k in range(stream.features.shape[1])
        },
        "prediction": int(stream.predictions[i]),
        "probabilities": {"0": round(1 - p1, 6), "1": p1},
    }


def model_create(client: Any, name: str, reference: Stream, policy: dict[str, Any]) -> int:
    """Register, post the reference (the model's own pre-drift predictions), set the policy."""
    from registry.models import RegisteredModel

    RegisteredModel.objects.filter(name=name).delete()  # a rerun on the same database
    features = [{"name": f"x{k}", "type": "numerical"} for k in range(reference.features.shape[1])]
    call(
        client,
        "post",
        "models",
        {"name": name, "task": "classification", "features": features, "classes": [0, 1]},
    )
    rows = [sample_row(reference, i) | {"label": int(reference.labels[i])} for i in range(len(reference))]
    call(client, "post", f"models/{name}/reference", {"rows": rows})
    call(client, "patch", f"models/{name}/policy", policy)
    return int(RegisteredModel.objects.get(name=name).pk)


def ingest(client: Any, name: str, stream: Stream, start: int, end: int, labels: Labels) -> None:
    """Predictions [start, end) and the labels that arrive meanwhile, stamped with their arrival."""
    samples = [sample_row(stream, i) | {"id": str(i), "timestamp": iso(i)} for i in range(start, end)]
    call(client, "post", f"models/{name}/predictions", {"samples": samples})
    arrived = [i for i in range(end) if start < labels.arrival(i) <= end]
    if arrived:
        body = [
            {"id": str(i), "label": int(stream.labels[i]), "timestamp": iso(labels.arrival(i))}
            for i in arrived
        ]
        call(client, "post", f"models/{name}/labels", {"labels": body})


@dataclass(frozen=True)
class Tick:
    at: int  # samples predicted so far = the window end, in samples
    newest_label: int  # the newest sample whose label had arrived
    breach: bool | None  # the check's decision for the watched alert kind
    margin: float | None  # realised accuracy minus the alert threshold (baseline - tolerance)
    opened: int  # alerts of the kind this check opened
    resolved: int  # alerts of the kind this check resolved
    live: bool  # an alert of the kind is open after it


def beat_tick(model_id: int, at: int, kind: str, labels: Labels) -> Tick:
    """One simulated beat: run the check it would dispatch (a failure fails the bench), then read
    the check and the alerts."""
    from monitoring.checks import quality_check_run
    from monitoring.models import LIVE_ALERT_STATES, Alert, MonitoringPolicy, QualityCheck
    from monitoring.scheduling import window_end_for
    from monitoring.window import scheduled_window

    policy = MonitoringPolicy.objects.get(model_id=model_id)
    quality_check_run(model_id=model_id, window=scheduled_window(policy, window_end_for(policy, stamp(at))))
    check = QualityCheck.objects.get(model_id=model_id, window_end=stamp(at))
    alerts = Alert.objects.filter(model_id=model_id, kind=kind)
    return Tick(
        at=at,
        newest_label=labels.newest(at),
        breach=check.decisions.get(kind),
        margin=decision_margin(check.decisions),
        opened=alerts.filter(opened_by=check).count(),
        resolved=alerts.filter(resolved_by_check=check).count(),
        live=alerts.filter(state__in=LIVE_ALERT_STATES).exists(),
    )


def decision_margin(decisions: dict[str, Any]) -> float | None:
    value, baseline = decisions.get("value"), decisions.get("baseline")
    if value is None or baseline is None:
        return None
    return float(value - (baseline - decisions["tolerance"]))


def is_detection(tick: Tick) -> bool:
    return tick.newest_label >= DRIFT_AT and bool(tick.breach) and tick.live


@dataclass(frozen=True)
class Monitored:
    """One stream watched by one platform policy."""

    client: Any
    name: str
    reference: Stream
    policy: dict[str, Any]
    labels: Labels
    kind: str = ACCURACY_DROP


def monitor(m: Monitored, stream: Stream, stop: Callable[[Tick], bool] | None = None) -> list[Tick]:
    model_id = model_create(m.client, m.name, m.reference, m.policy)
    ticks = []
    for at in range(CHECK_EVERY, len(stream) + 1, CHECK_EVERY):
        ingest(m.client, m.name, stream, at - CHECK_EVERY, at, m.labels)
        ticks.append(beat_tick(model_id, at, m.kind, m.labels))
        if stop is not None and stop(ticks[-1]):
            break
    call(m.client, "patch", f"models/{m.name}/policy", {"enabled": False})  # out of later beats
    return ticks


def platform_alarms(ticks: list[Tick]) -> Alarms:
    """Alerts opened, with the last labelled sample their check had seen."""
    opened = [t for t in ticks for _ in range(t.opened)]
    return Alarms([t.at for t in opened], [t.newest_label for t in opened])


def platform_delay(ticks: list[Tick]) -> float:
    return next((float(t.at - DRIFT_AT) for t in ticks if is_detection(t)), float("inf"))


# --- the SEA runs -----------------------------------------------------------------------------


def streams_make(seed: int) -> tuple[Stream, Stream, Stream]:
    """The reference, the drifting stream and the control stream, all scored by one frozen model."""
    base = 1000 * (seed + 1)
    model = model_train(base + 1)
    reference = stream_make(model, [(VARIANT_BEFORE, base + 2, N_REFERENCE)])
    drifting = stream_make(
        model, [(VARIANT_BEFORE, base + 3, DRIFT_AT), (VARIANT_AFTER, base + 4, AFTER_MAX)]
    )
    control_len = WINDOW + 300 + (CONTROL_WINDOWS - 1) * CHECK_EVERY
    return reference, drifting, stream_make(model, [(VARIANT_BEFORE, base + 5, control_len)])


def sea_seed(
    client: Any, seed: int, run: str, policies: dict[str, dict[str, Any]], labels: Labels
) -> SeedResult:
    """Each platform policy and each river detector on the same drifting and control streams."""
    reference, drifting, control = streams_make(seed)
    result = SeedResult(seed)
    for key, policy in policies.items():
        watched = Monitored(client, f"{run}-{key}-{seed}", reference, policy, labels)
        ticks = monitor(watched, drifting, is_detection)
        control_ticks = monitor(
            Monitored(client, f"{run}-{key}-control-{seed}", reference, policy, labels), control
        )
        result.delay[key] = platform_delay(ticks)
        result.before[key] = pre_drift_alarms(platform_alarms(ticks))
        result.control[key] = len(platform_alarms(control_ticks).times)
        if not result.control_checks:
            result.control_checks = sum(1 for t in control_ticks if t.breach is not None)
            margins = [t.margin for t in control_ticks if t.margin is not None]
            result.extra["closest"] = min(margins) if margins else float("nan")
    for key, detector in river_detectors().items():
        alarms = river_alarms(drifting.errors, detector, labels)
        result.delay[key], result.before[key] = first_detection(alarms, AFTER_MAX), pre_drift_alarms(alarms)
    for key, detector in river_detectors().items():
        result.control[key] = len(river_alarms(control.errors, detector, labels).times)
    return result


# --- report -----------------------------------------------------------------------------------


def fmt_delay(value: float) -> str:
    return "none" if value == float("inf") else f"{value:.0f}"


def table_row(label: str, groups: list[list[str]], width: int) -> str:
    return f"{label:>7} | " + " | ".join(" ".join(f"{c:>{width}}" for c in g) for g in groups)


def report_table(results: list[SeedResult], detectors: list[str]) -> dict[str, float]:
    """Per seed: delay, false alarms before the drift, on the control stream; then medians/sums."""
    width = max(7, *(len(d) for d in detectors))
    blank = [""] * (len(detectors) - 1)
    print(
        table_row(
            "", [["delay", *blank], ["false", "before", *blank[1:]], ["false", "ctrl", *blank[1:]]], width
        )
    )
    print(table_row("seed", [detectors] * 3 + [["checks"]], width))
    rule = "-" * (10 + 3 * (len(detectors) * (width + 1) + 2) + width)
    print(rule)
    for r in results:
        groups = [
            [fmt_delay(r.delay[k]) for k in detectors],
            [str(r.before[k]) for k in detectors],
            [str(r.control[k]) for k in detectors],
            [str(r.control_checks)],
        ]
        print(table_row(str(r.seed), groups, width), flush=True)
    medians = {k: statistics.median(r.delay[k] for r in results) for k in detectors}
    print(rule)
    totals = [
        [fmt_delay(medians[k]) for k in detectors],
        [str(sum(r.before[k] for r in results)) for k in detectors],
        [str(sum(r.control[k] for r in results)) for k in detectors],
        [str(sum(r.control_checks for r in results))],
    ]
    print(table_row("summary", totals, width))
    print("(summary: median delays in samples after the drift; false alarms and control checks summed)")
    return medians


def target(text: str, ok: bool) -> bool:
    print(f"target: {text}: {'MET' if ok else 'NOT MET'}")
    return ok


def quiet(results: list[SeedResult], key: str) -> bool:
    return all(r.control[key] == 0 and r.before[key] == 0 for r in results)


def run_window(client: Any, seeds: list[int]) -> bool:
    labels = Labels()
    print(
        f"== window: SEA variant {VARIANT_BEFORE} -> {VARIANT_AFTER} at sample {DRIFT_AT}, {labels.describe()}"
    )
    print(
        f"policy: last {WINDOW} samples (>= {POLICY['min_labels']} labels), a check every {CHECK_EVERY} "
        f"samples, accuracy tolerance {TOLERANCE}, alert 1 of 1; ADWIN(delta=0.002), DDM() defaults"
    )
    results = [sea_seed(client, s, "window", {"ours": POLICY}, labels) for s in seeds]
    medians = report_table(results, ["ours", "ADWIN", "DDM"])
    checks = all(r.control_checks >= CONTROL_WINDOWS for r in results)
    ok = target(
        f"no false alarm, >= {CONTROL_WINDOWS} decided control windows, every seed",
        quiet(results, "ours") and checks,
    )
    fast = medians["ours"] <= medians["ADWIN"] + CHECK_EVERY
    return (
        target(
            f"median delay {fmt_delay(medians['ours'])} <= ADWIN {fmt_delay(medians['ADWIN'])} + {CHECK_EVERY}",
            fast,
        )
        and ok
    )


def run_sequential(client: Any, seeds: list[int]) -> bool:
    labels = Labels()
    print(f"\n== sequential: SEA as in `window`, {labels.describe()}, batches of {CHECK_EVERY}")
    print("policy: the window rule above + the model's persisted ADWIN(delta=0.002) fed at each check")
    results = [sea_seed(client, s, "sequential", {"ours": SEQUENTIAL_POLICY}, labels) for s in seeds]
    medians = report_table(results, ["ours", "ADWIN", "DDM"])
    ok = target(
        "no false alarm on the control stream or before the drift, every seed", quiet(results, "ours")
    )
    fast = medians["ours"] <= medians["ADWIN"]
    text = f"median delay {fmt_delay(medians['ours'])} <= river ADWIN's {fmt_delay(medians['ADWIN'])}"
    return target(text, fast) and ok


def run_labelled(client: Any, seeds: list[int]) -> bool:
    labels = Labels(batch=LABEL_BATCH)
    print(f"\n== labelled: SEA as above, {labels.describe()}")
    print(
        "policies: last 800 samples (>= 500 labels) vs last 500 labelled samples; tolerance, checks as above"
    )
    results = [sea_seed(client, s, "labelled", LABELLED_POLICIES, labels) for s in seeds]
    medians = report_table(results, [*LABELLED_POLICIES, "ADWIN"])
    gain = medians["samples800"] - medians["labelled500"]
    ok = target(
        f"labelled window sooner by >= one batch ({CHECK_EVERY}): {fmt_delay(gain)} samples",
        gain >= CHECK_EVERY,
    )
    new = sum(r.before["labelled500"] + r.control["labelled500"] for r in results)
    old = sum(r.before["samples800"] + r.control["samples800"] for r in results)
    return target(f"no new false alarm: {new} vs {old}", new <= old) and ok


def persistent_seed(client: Any, seed: int) -> dict[str, list[Tick]]:
    base = 7000 + 10 * seed
    reference = gaussian_stream(base, N_REFERENCE, None)
    stream = gaussian_stream(base + 1, PERSISTENT_BEFORE + PERSISTENT_AFTER, PERSISTENT_BEFORE)
    out = {}
    for key, policy in PERSISTENT_POLICIES.items():
        watched = Monitored(client, f"persistent-{key}-{seed}", reference, policy, Labels(), DATA_DRIFT)
        out[key] = monitor(watched, stream)
    return out


def run_persistent(client: Any, seeds: list[int]) -> bool:
    print(
        f"\n== persistent: {N_DRIFTED} of {N_FEATURES} features shift by {DRIFT_SHIFT} sd at sample "
        f"{PERSISTENT_BEFORE} and stay shifted for {PERSISTENT_AFTER}; last {WINDOW} samples, drift share 0.5"
    )
    print(
        f"{'seed':>7} | {'policy':>16} | {'opened':>6} {'resolved':>8} {'open at end':>11} | data_drift per check"
    )
    ok = True
    for seed in seeds:
        for key, ticks in persistent_seed(client, seed).items():
            opened, resolved = sum(t.opened for t in ticks), sum(t.resolved for t in ticks)
            trace = "".join("D" if t.breach else ("." if t.breach is False else "-") for t in ticks)
            print(
                f"{seed:>7} | {key:>16} | {opened:>6} {resolved:>8} {str(ticks[-1].live):>11} | {trace}",
                flush=True,
            )
            if key == "resolve-after-3":
                ok = ok and opened == 1 and resolved == 0 and ticks[-1].live
                ok = ok and not any(t.opened for t in ticks if t.at <= PERSISTENT_BEFORE)
    return target("resolve_after=3: the data-drift alert opens once and stays open, every seed", ok)


RUNS: dict[str, Callable[[Any, list[int]], bool]] = {
    "window": run_window,
    "labelled": run_labelled,
    "persistent": run_persistent,
    "sequential": run_sequential,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--quick", action="store_true", help="the first two seeds only")
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    args = parser.parse_args()
    seeds = args.seeds[:2] if args.quick else args.seeds
    var_dir = tempfile.mkdtemp(prefix="driftwatch-detection-")
    try:
        django_setup(var_dir)
        client = admin_api_client("bench-detection")
        began = time.perf_counter()
        ok = all([RUNS[name](client, seeds) for name in args.runs])
        print(f"\n{len(seeds)} seed(s), runs {', '.join(args.runs)}, in {time.perf_counter() - began:.0f} s")
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
