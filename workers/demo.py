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


# -- the second demo model: a ticket router serving from a text embedding and the raw text

TICKETS_MODEL = "demo-tickets"
TICKETS_DIM = 32
TICKETS_FEATURES = [
    {"name": "ticket_embedding", "type": "embedding", "dim": TICKETS_DIM},
    {"name": "ticket_text", "type": "text"},
]
TICKETS_CLASSES = ["billing", "technical"]
_WORDS = {
    "billing": ["invoice", "refund", "charge", "payment", "card", "plan", "receipt", "price"],
    "technical": ["login", "error", "crash", "password", "screen", "update", "sync", "slow"],
}
_FILLER = ["my", "the", "is", "please", "help", "again", "today", "with", "account", "not"]
# Words of a product launched after the reference was taken: they enter the drifted tickets.
_NEW_WORDS = ["quollabox", "zentrix", "hubmesh", "podlink", "syncbar", "nimbusio"]


def _tickets_space() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fixed directions: the classes' axis (what the router's linear head reads), two cluster
    centres along it, and a new topic's direction orthogonal to it (the head cannot see it)."""
    rng = np.random.default_rng(2024)
    head = rng.normal(size=TICKETS_DIM)
    head /= np.linalg.norm(head)
    topic = rng.normal(size=TICKETS_DIM)
    topic -= topic @ head * head
    topic /= np.linalg.norm(topic)
    return head, np.stack([1.2 * head, -1.2 * head]), topic


def tickets_frame(n: int, *, drift: float = 0.0, seed: int = 0) -> tuple[pd.DataFrame, list[str], list[str]]:
    """Rows (an embedding and a text per ticket), true labels and the router's predictions.
    ``drift`` in [0, 1]: a growing share of tickets are about a new product, a cluster off the
    head's axis in the embedding and new words in the text. The router's predictions, their
    mix and their accuracy stay as they were, so only the embedding and text tests see it."""
    rng = np.random.default_rng(seed)
    head, centres, topic = _tickets_space()
    is_tech = rng.random(n) < 0.5
    vectors = centres[is_tech.astype(int)] + rng.normal(size=(n, TICKETS_DIM)) * 0.6
    new_topic = rng.random(n) < 0.6 * drift
    vectors[new_topic] += 2.5 * topic
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = []
    for tech, new in zip(is_tech, new_topic, strict=True):
        words = list(rng.choice(_WORDS["technical" if tech else "billing"], 3)) + list(rng.choice(_FILLER, 4))
        if new:
            words[rng.integers(len(words))] = str(rng.choice(_NEW_WORDS))
        rng.shuffle(words)
        texts.append(" ".join(words))
    # The router reads the head's side; the new topic is orthogonal to the head, so it moves
    # neither the predictions nor their accuracy (about 98%).
    predicted = np.where(vectors @ head < 0, "technical", "billing").tolist()
    labels = np.where(is_tech, "technical", "billing").tolist()
    frame = pd.DataFrame({"ticket_embedding": [v.round(5).tolist() for v in vectors], "ticket_text": texts})
    return frame, labels, predicted
