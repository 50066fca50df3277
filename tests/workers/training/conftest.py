"""Small tabular data for the training engine tests."""

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from workers.demo import DEMO_CLASSES, DEMO_FEATURES, demo_frame
from workers.training.engine import make_schema
from workers.training.recipes import TABULAR_CLASSIFICATION, TABULAR_REGRESSION, Recipe


@pytest.fixture
def churn() -> tuple[pd.DataFrame, list[str]]:
    return demo_frame(600, seed=3)


@pytest.fixture
def churn_schema() -> dict[str, Any]:
    return make_schema("classification", DEMO_FEATURES, DEMO_CLASSES)


@pytest.fixture
def fast_recipe() -> Recipe:
    return replace(TABULAR_CLASSIFICATION, epochs=4, max_batch_size=64, early_stopping_patience=0)


@pytest.fixture
def regression_data() -> tuple[pd.DataFrame, list[float], dict[str, Any], Recipe]:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=800), rng.normal(size=800)
    kind = rng.choice(["x", "y"], 800)
    target = 3 * a - 2 * b + np.where(kind == "x", 1.0, -1.0) + rng.normal(scale=0.1, size=800)
    frame = pd.DataFrame({"a": a, "b": b, "kind": kind})
    schema = make_schema("regression", {"a": "numerical", "b": "numerical", "kind": "categorical"}, None)
    recipe = replace(TABULAR_REGRESSION, epochs=40, max_batch_size=64, early_stopping_patience=0)
    return frame, target.tolist(), schema, recipe
