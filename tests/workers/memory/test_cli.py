"""Factory loading, size parsing, the breakdown table and the management command."""

import os
import sys
import textwrap

import pytest

from workers.memory import estimate_training_memory
from workers.memory.cli import breakdown_table, load_factory, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16GiB", 16 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("8GB", 8 * 10**9),
        ("1.5 GiB", 3 * 1024**3 // 2),
        ("4096", 4096),
    ],
)
def test_sizes_parse_binary_and_decimal_units(text, expected):
    assert parse_size(text) == expected


def test_unknown_size_unit_is_rejected():
    with pytest.raises(ValueError, match="not a size"):
        parse_size("16 parsecs")


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    (tmp_path / "memfactory_demo.py").write_text(
        textwrap.dedent("""
        import torch
        def build():
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
            return model, lambda n: torch.randn(n, 8), lambda out, batch: out.pow(2).mean()
        def broken():
            return 42
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "memfactory_demo"
    sys.modules.pop("memfactory_demo", None)


def test_factory_returns_model_batch_maker_and_loss(factory_module):
    factory = load_factory(f"{factory_module}:build")
    assert tuple(factory.make_batch(4).shape) == (4, 8)
    assert factory.loss_fn is not None


def test_factory_with_a_wrong_return_value_is_rejected(factory_module):
    with pytest.raises(ValueError, match="must return"):
        load_factory(f"{factory_module}:broken")


def test_factory_spec_needs_a_colon():
    with pytest.raises(ValueError, match="module:function"):
        load_factory("just_a_module")


def test_table_lists_components_and_totals(factory_module):
    factory = load_factory(f"{factory_module}:build")
    est = estimate_training_memory(
        factory.model, factory.make_batch(8), loss_fn=factory.loss_fn, device="cuda"
    )
    table = breakdown_table(est, budget_bytes=10 * 1024**3)
    for label in ("parameters", "optimizer_state", "workspace", "cuda_context", "peak reserved", "fits"):
        assert label in table


def test_management_command_prints_the_breakdown(factory_module, capsys):
    django = pytest.importorskip("django")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "driftwatch.settings")
    django.setup()
    from django.core.management import call_command

    call_command("estimate_memory", factory=f"{factory_module}:build", batch_size=16, device="cpu")
    out = capsys.readouterr().out
    assert "peak allocated" in out
    assert "parameters" in out
