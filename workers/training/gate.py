"""The promotion gate: challenger and champion scored on the same holdout rows, paired.

- classification: exact McNemar test on the discordant pairs (one-sided: the challenger is right
  where the champion is wrong more often than the reverse); improvement = accuracy difference;
- regression: paired bootstrap of the absolute-error differences (one-sided p = share of
  resampled mean differences <= 0); improvement = relative MAE reduction.

Promote when improvement >= ``min_improvement`` and p <= ``alpha``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True)
class GateResult:
    test: str  # "mcnemar_exact" or "paired_bootstrap_abs_error"
    metric: str  # "accuracy" or "mae"
    champion: float | None
    challenger: float
    improvement: float | None
    p_value: float | None
    min_improvement: float
    alpha: float
    n: int
    passed: bool
    reason: str
    discordant: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mcnemar_exact(champion_right: np.ndarray, challenger_right: np.ndarray) -> tuple[float, int, int]:
    """One-sided exact McNemar p-value; b = only the champion right, c = only the challenger."""
    from scipy.stats import binomtest  # lazy: scipy costs ~0.3 s to import

    b = int(np.sum(champion_right & ~challenger_right))
    c = int(np.sum(~champion_right & challenger_right))
    if b + c == 0:
        return 1.0, b, c
    return float(binomtest(c, b + c, 0.5, alternative="greater").pvalue), b, c


def paired_bootstrap(champion_err: np.ndarray, challenger_err: np.ndarray, *, seed: int = 0) -> float:
    """One-sided p that the challenger's mean absolute error is not lower than the champion's."""
    diff = np.abs(champion_err) - np.abs(challenger_err)
    if len(diff) == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    means = np.empty(BOOTSTRAP_SAMPLES)
    for i in range(BOOTSTRAP_SAMPLES):
        means[i] = diff[rng.integers(0, len(diff), len(diff))].mean()
    return float((np.sum(means <= 0) + 1) / (BOOTSTRAP_SAMPLES + 1))


def gate(
    *,
    task: str,
    labels: Sequence[Any],
    challenger: Sequence[Any],
    champion: Sequence[Any] | None,
    min_improvement: float,
    alpha: float,
    seed: int = 0,
) -> GateResult:
    """Decide on paired predictions for the same rows; no champion → the challenger passes."""
    if task == "classification":
        return _classification(labels, challenger, champion, min_improvement, alpha)
    return _regression(labels, challenger, champion, min_improvement, alpha, seed)


def _classification(
    labels: Sequence[Any],
    challenger: Sequence[Any],
    champion: Sequence[Any] | None,
    min_improvement: float,
    alpha: float,
) -> GateResult:
    truth = np.asarray([str(v) for v in labels], dtype=object)
    chal_right = truth == np.asarray([str(v) for v in challenger], dtype=object)
    base: dict[str, Any] = dict(
        test="mcnemar_exact", metric="accuracy", min_improvement=min_improvement, alpha=alpha
    )
    if champion is None:
        acc = float(chal_right.mean()) if len(truth) else 0.0
        return GateResult(**base, champion=None, challenger=acc, improvement=None, p_value=None,
                          n=len(truth), passed=True, reason="no champion to compare with")  # fmt: skip
    champ_right = truth == np.asarray([str(v) for v in champion], dtype=object)
    p, b, c = mcnemar_exact(champ_right, chal_right)
    improvement = float(chal_right.mean() - champ_right.mean())
    passed, reason = _decide(improvement, p, min_improvement, alpha)
    return GateResult(
        **base,
        champion=float(champ_right.mean()),
        challenger=float(chal_right.mean()),
        improvement=improvement,
        p_value=p,
        n=len(truth),
        passed=passed,
        reason=reason,
        discordant={"champion_only": b, "challenger_only": c},
    )


def _regression(
    labels: Sequence[Any],
    challenger: Sequence[Any],
    champion: Sequence[Any] | None,
    min_improvement: float,
    alpha: float,
    seed: int,
) -> GateResult:
    truth = np.asarray(labels, dtype="float64")
    chal_err = np.abs(np.asarray(challenger, dtype="float64") - truth)
    base: dict[str, Any] = dict(
        test="paired_bootstrap_abs_error", metric="mae", min_improvement=min_improvement, alpha=alpha
    )
    if champion is None:
        return GateResult(**base, champion=None, challenger=float(chal_err.mean()), improvement=None,
                          p_value=None, n=len(truth), passed=True, reason="no champion to compare with")  # fmt: skip
    champ_err = np.abs(np.asarray(champion, dtype="float64") - truth)
    champ_mae, chal_mae = float(champ_err.mean()), float(chal_err.mean())
    improvement = (champ_mae - chal_mae) / champ_mae if champ_mae > 0 else 0.0
    p = paired_bootstrap(champ_err, chal_err, seed=seed)
    passed, reason = _decide(improvement, p, min_improvement, alpha)
    return GateResult(
        **base,
        champion=champ_mae,
        challenger=chal_mae,
        improvement=improvement,
        p_value=p,
        n=len(truth),
        passed=passed,
        reason=reason,
    )


def _decide(improvement: float, p: float, min_improvement: float, alpha: float) -> tuple[bool, str]:
    if improvement < min_improvement:
        return False, f"improvement {improvement:+.4f} below the minimum {min_improvement:.4f}"
    if p > alpha:
        return False, f"not significant: p={p:.4g} > alpha={alpha}"
    return True, f"better by {improvement:+.4f} (p={p:.4g} <= {alpha})"
