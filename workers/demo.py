"""Synthetic demo data: a churn-like tabular problem whose inputs drift slowly over time."""

from typing import Any

import numpy as np
import pandas as pd

DEMO_MODEL = "demo-churn"
DEMO_FEATURES = {
    "tenure_months": "numerical",
    "monthly_charges": "numerical",
    "support_calls": "numerical",
    "contract": "categorical",
    "region": "categorical",
}
DEMO_CLASSES = ["stay", "churn"]
CONTRACTS = ["monthly", "yearly", "two-year"]
REGIONS = ["north", "south", "east", "west"]


def demo_frame(n: int, *, drift: float = 0.0, seed: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """Rows and true labels; `drift` in [0, 1] shifts charges up and contracts to monthly."""
    rng = np.random.default_rng(seed)
    tenure = rng.gamma(2.0, 12.0, n)
    charges = rng.normal(60 + 25 * drift, 15, n).clip(10, None)
    calls = rng.poisson(1.0 + 2 * drift, n).astype(float)
    contract_p = np.array([0.5 + 0.3 * drift, 0.3 - 0.15 * drift, 0.2 - 0.15 * drift])
    contract = rng.choice(CONTRACTS, n, p=contract_p / contract_p.sum())
    region = rng.choice(REGIONS, n)
    # The true relation also moves with drift (concept drift), so accuracy really drops.
    logit = (
        -1.5
        - 0.05 * tenure
        + 0.03 * (charges - 60)
        + 0.5 * calls
        # Concept drift: the monthly-contract effect fades and reverses, the south churns more.
        + np.where(contract == "monthly", 1.2 - 2.4 * drift, -0.8 + 1.6 * drift)
        + drift * 2.0 * (region == "south")
    )
    churn = rng.random(n) < 1 / (1 + np.exp(-logit))
    frame = pd.DataFrame(
        {
            "tenure_months": tenure.round(1),
            "monthly_charges": charges.round(2),
            "support_calls": calls,
            "contract": contract,
            "region": region,
        }
    )
    return frame, ["churn" if c else "stay" for c in churn]


def frame_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
        for row in frame.to_dict("records")
    ]
