"""The planner's margin comes from the estimator's measured error per kind of layer."""

import pytest
import torch.nn as nn

from tests.workers.memory.conftest import TinyClassifier, table_batch, xent
from workers.memory import plan_batch_size
from workers.memory.margins import (
    FLOOR,
    KINDS,
    UNMEASURED_MARGIN,
    error_margin,
    layer_kinds,
    load_table,
    margin_for_kinds,
)

TABLE = {
    "devices": {
        "cpu": {
            "linear": {"count": 4, "min": -0.001, "max": 0.0, "mean": 0.0, "std": 0.0},
            "conv_transpose": {"count": 4, "min": -0.05, "max": 0.01, "mean": -0.02, "std": 0.01},
        }
    }
}


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(nn.init.ones_(nn.Linear(1, 4).weight))


def test_a_transformer_block_counts_as_attention_not_its_linear_parts():
    model = nn.Sequential(nn.Embedding(10, 8), nn.TransformerEncoderLayer(8, 2, 16, batch_first=True))
    assert layer_kinds(model) == {"embedding", "attention"}


def test_a_parameterised_module_of_no_known_kind_is_other():
    assert layer_kinds(nn.Sequential(nn.Linear(4, 4), _Scaled())) == {"linear", "other"}


def test_the_margin_is_the_worst_under_estimate_plus_three_spreads_of_the_worst_kind():
    assert margin_for_kinds({"linear"}, "cpu", TABLE) == pytest.approx(FLOOR + 0.001)
    assert margin_for_kinds({"linear", "conv_transpose"}, "cpu", TABLE) == pytest.approx(FLOOR + 0.05 + 0.03)


def test_an_unmeasured_kind_or_device_gets_the_old_constant():
    assert margin_for_kinds({"linear", "recurrent"}, "cpu", TABLE) == UNMEASURED_MARGIN
    assert margin_for_kinds({"linear"}, "cuda", TABLE) == UNMEASURED_MARGIN


def test_the_checked_in_table_measures_every_kind_on_cpu():
    rows = load_table()["devices"]["cpu"]
    assert {kind for kind, _ in KINDS} <= set(rows)
    assert all(row["count"] >= 4 for row in rows.values())


def test_the_planner_default_margin_is_read_from_the_table():
    model = TinyClassifier()
    plan = plan_batch_size(model, table_batch, 400_000, loss_fn=xent, device="cpu", max_batch=100_000)
    assert plan.margin == error_margin(model, "cpu")
    assert FLOOR <= plan.margin < UNMEASURED_MARGIN
    assert plan.estimated_bytes <= plan.usable_bytes == int(400_000 * (1 - plan.margin))
