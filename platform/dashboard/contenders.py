"""Champion vs challenger on the model page: each version's lineage, its latest realised and
estimated quality, and the paired gate that compared them.

The challenger is the newest candidate newer than the champion (retraining.selectors). Quality
comes from the latest finished checks: a version's realised metric on its own predictions
(``per_version``), or, when the window's predictions carry no version, the window's metric while
that version was champion. The CBPE estimate covers a whole window, so it belongs to the version
that was champion when the check ran.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from dashboard import selectors
from dashboard.numbers import finite, fixed
from monitoring.models import QualityCheck
from registry.models import ModelVersion, RegisteredModel
from registry.selectors import champion_get
from retraining.models import RetrainJob
from retraining.selectors import challenger_get, job_that_made
from workers.drift.result import estimate_read, metrics_read, per_version_read

QUALITY_CHECKS = 50  # latest finished checks searched for a version's numbers
OWN_PREDICTIONS = "on its own predictions"
WHILE_CHAMPION = "on the window it served as champion"


@dataclass(frozen=True)
class Reading:
    """One number with the check it comes from; value None: no check measured it."""

    value: float | None
    check_id: int | None = None
    at: datetime | None = None
    basis: str = ""


@dataclass(frozen=True)
class Contender:
    role: str  # champion | challenger
    version: ModelVersion
    job: RetrainJob | None  # the retrain job that made it; None for an upload
    realised: Reading
    estimated: Reading


@dataclass(frozen=True)
class Versus:
    metric: str
    champion: Contender | None
    challenger: Contender | None
    gate: list[tuple[str, str]] = field(default_factory=list)  # the challenger's paired gate, as rows
    gate_passed: bool | None = None

    @property
    def sides(self) -> list[Contender]:
        """The columns drawn: the champion, then the challenger, each when there is one."""
        return [c for c in (self.champion, self.challenger) if c is not None]


def _unversioned(check: QualityCheck) -> bool:
    """The window's predictions named no version, so all of them were the champion's."""
    return set(check.per_version or {}) <= {"unversioned"}


def _realised(version: ModelVersion, checks: list[QualityCheck], metric: str) -> Reading:
    key = f"v{version.version}"
    for check in checks:
        versions = per_version_read(check.per_version)
        own = versions[key].value(metric) if key in versions else None
        if own is not None:
            return Reading(own, check.pk, check.window_end, OWN_PREDICTIONS)
        window = metrics_read(check.metrics).value(metric)
        if check.version_id == version.pk and _unversioned(check) and window is not None:
            return Reading(window, check.pk, check.window_end, WHILE_CHAMPION)
    return Reading(None)


def _estimated(version: ModelVersion, checks: list[QualityCheck]) -> Reading:
    for check in checks:
        value = estimate_read(check.estimated).value
        if check.version_id == version.pk and value is not None:
            return Reading(value, check.pk, check.window_end, WHILE_CHAMPION)
    return Reading(None)


def _contender(role: str, version: ModelVersion, checks: list[QualityCheck], metric: str) -> Contender:
    return Contender(
        role=role,
        version=version,
        job=job_that_made(version=version),
        realised=_realised(version, checks, metric),
        estimated=_estimated(version, checks),
    )


def gate_rows(gate: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A stored gate result (workers.training.gate.GateResult) as label/text rows."""
    if not gate.get("test"):
        return []
    metric = gate.get("metric", "")
    rows = [
        ("paired test", f"{gate['test']} on {gate.get('n', '?')} holdout rows"),
        (
            str(metric),
            f"champion {fixed(finite(gate.get('champion')), 4)} · challenger {fixed(finite(gate.get('challenger')), 4)}",
        ),
    ]
    improvement, p_value = finite(gate.get("improvement")), finite(gate.get("p_value"))
    if improvement is not None:
        rows.append(("improvement", f"{improvement:+.4f} (needs ≥ {gate.get('min_improvement')})"))
    if p_value is not None:
        rows.append(("p-value", f"{p_value:.4g} (needs ≤ {gate.get('alpha')})"))
    discordant = gate.get("discordant") or {}
    if discordant:
        rows.append(
            (
                "discordant pairs",
                f"only the champion right {discordant.get('champion_only')} · "
                f"only the challenger right {discordant.get('challenger_only')}",
            )
        )
    rows.append(("verdict", f"{'passed' if gate.get('passed') else 'failed'}: {gate.get('reason', '')}"))
    return rows


def champion_vs_challenger(*, model: RegisteredModel, metric: str) -> Versus:
    """Both sides when a challenger exists; the champion alone (or nothing) otherwise."""
    champion = champion_get(model=model)
    challenger = challenger_get(model=model, champion=champion)
    if champion is None and challenger is None:
        return Versus(metric=metric, champion=None, challenger=None)
    checks = selectors.done_checks_newest_first(model=model, limit=QUALITY_CHECKS, light=True)
    versus = Versus(
        metric=metric,
        champion=_contender("champion", champion, checks, metric) if champion else None,
        challenger=_contender("challenger", challenger, checks, metric) if challenger else None,
    )
    job = versus.challenger.job if versus.challenger else None
    if job is None or not job.gate:
        return versus
    return replace(versus, gate=gate_rows(job.gate), gate_passed=bool(job.gate.get("passed")))
