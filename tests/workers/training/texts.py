"""Tiny review texts whose concept can flip, and the tiny text recipe that learns them in seconds."""

from dataclasses import replace

import numpy as np
import pandas as pd

from workers.training.recipes import TEXT_CLASSIFICATION

WORDS = ["the", "a", "service", "was", "very", "quite", "food", "staff", "room", "and", "it"]
TEXT_FEATURES = {"review": "text", "stars": "numerical"}
TINY = {"d_model": 8, "heads": 2, "layers": 1, "ff": 16, "max_tokens": 24, "vocab_size": 40, "dropout": 0.1}
TEXT_RECIPE = replace(
    TEXT_CLASSIFICATION, hyperparameters=TINY, epochs=3, max_batch_size=16, warmup_steps=3,
    early_stopping_patience=0,
)  # fmt: skip


def reviews(n: int, *, seed: int, concept: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """Texts of 3 to 20 words; concept 0: "yes" when "good" is in the text, concept 1: when "bad" is."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(n):
        words = list(rng.choice(WORDS, int(rng.integers(2, 20))))
        word = str(rng.choice(["good", "bad"]))
        words.insert(int(rng.integers(0, len(words))), word)
        texts.append(" ".join(words))
        labels.append("yes" if (word == "bad") == bool(concept) else "no")
    return pd.DataFrame({"review": texts, "stars": rng.normal(size=n).round(4)}), labels
