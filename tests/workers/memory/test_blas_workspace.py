"""cuBLAS / cuBLASLt workspaces follow the torch version, the architecture and the environment."""

import pytest
import torch

from workers.memory import estimate_training_memory
from workers.memory.blas_workspace import parse_workspace_config, resolve, rule_for
from workers.memory.cuda_model import CudaTarget

KIB = 1024
MIB = 1024 * KIB
SMALL = 8 * MIB + 128 * KIB  # ":4096:2:16:8"
LARGE = 32 * MIB  # ":4096:8"


def _ws(version, cc, **env):
    return resolve(torch_version=version, compute_capability=cc, env=env)


@pytest.mark.parametrize(
    ("cc", "expected"),
    [((8, 0), SMALL), ((8, 6), SMALL), ((8, 9), SMALL), ((9, 0), LARGE), ((10, 0), LARGE), ((12, 0), LARGE)],
)
def test_installed_torch_sizes_the_cublas_workspace_by_architecture(cc, expected):
    assert torch.__version__.startswith("2.13")
    assert CudaTarget(compute_capability=cc, workspace_env=()).cublas_workspace_bytes == expected


def test_blackwell_got_32_mib_only_from_2_11():
    assert _ws("2.10.0", (10, 0)).cublas_bytes == SMALL
    assert _ws("2.10.0", (12, 0)).cublas_bytes == SMALL
    assert _ws("2.10.0", (9, 0)).cublas_bytes == LARGE
    assert _ws("2.11.0", (10, 0)).cublas_bytes == LARGE
    assert _ws("2.12.1", (11, 0)).cublas_bytes == SMALL
    assert _ws("2.13.0", (11, 0)).cublas_bytes == LARGE


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (":4096:8", 32 * MIB),
        (":4096:2:16:8", SMALL),
        (":16:8", 128 * KIB),
        (":0:0", 0),
        ("garbage", SMALL),  # no :SIZE:COUNT pair: torch warns and keeps the default
        ("4096:8", SMALL),
        (":4096:8:", 32 * MIB),
    ],
)
def test_cublas_workspace_config_is_parsed_as_torch_parses_it(config, expected):
    assert parse_workspace_config(config, SMALL) == expected
    assert _ws("2.13.0", (8, 0), CUBLAS_WORKSPACE_CONFIG=config).cublas_bytes == expected


def test_the_python_override_beats_the_environment():
    ws = resolve(
        torch_version="2.13.0",
        compute_capability=(9, 0),
        env={"CUBLAS_WORKSPACE_CONFIG": ":16:8"},
        cublas_override=4 * MIB,
    )
    assert ws.cublas_bytes == 4 * MIB


def test_cublaslt_shares_the_cublas_workspace_by_default_from_2_11():
    assert _ws("2.13.0", (9, 0)).lt_bytes == 0
    assert _ws("2.13.0", (9, 0), TORCH_CUBLASLT_UNIFIED_WORKSPACE="0").lt_bytes == MIB
    assert _ws("2.13.0", (9, 0), TORCH_CUBLASLT_UNIFIED_WORKSPACE="yes").lt_bytes == 0  # ignored value


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2048", 2 * MIB), ("64kb", 64 * KIB), (" 512", 512 * KIB), ("abc", MIB), ("99999999999", MIB)],
)
def test_cublaslt_workspace_size_is_read_like_stoi_in_kib(value, expected):
    ws = _ws("2.13.0", (9, 0), TORCH_CUBLASLT_UNIFIED_WORKSPACE="0", CUBLASLT_WORKSPACE_SIZE=value)
    assert ws.lt_bytes == expected


def test_before_2_11_cublaslt_has_its_own_workspace_per_handle_then_per_call():
    ws_2_10 = _ws("2.10.0", (9, 0))
    assert (ws_2_10.lt_bytes, ws_2_10.lt_per_call) == (MIB, False)
    assert _ws("2.10.0", (9, 0), TORCH_CUBLASLT_UNIFIED_WORKSPACE="1").lt_bytes == 0  # opt-in
    ws_2_6 = _ws("2.6.0", (9, 0), TORCH_CUBLASLT_UNIFIED_WORKSPACE="1")
    assert (ws_2_6.lt_bytes, ws_2_6.lt_per_call) == (MIB, True)  # the flag did not exist yet


def test_from_2_14_workspace_caching_is_opt_in():
    own = _ws("2.14.0", (9, 0))
    assert (own.cublas_bytes, own.outside_allocator_bytes, own.lt_bytes) == (0, LARGE, MIB)
    cached = _ws("2.14.0", (9, 0), TORCH_CUBLAS_WORKSPACE_CACHE="1")
    assert (cached.cublas_bytes, cached.outside_allocator_bytes, cached.lt_bytes) == (LARGE, 0, 0)


def test_versions_without_a_rule_are_refused():
    with pytest.raises(ValueError, match="2.4"):
        rule_for("2.3.1")
    with pytest.raises(ValueError, match="not a torch version"):
        rule_for("nightly")


def _loss(out, batch):
    return out.float().pow(2).mean()


def _workspace_bytes(target):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    est = estimate_training_memory(
        model,
        torch.randn(4, 64),
        loss_fn=_loss,
        optimizer="sgd",
        device="cuda",
        iterations=2,
        cuda_target=target,
    )
    return est.breakdown["workspace"]


def test_traced_run_holds_one_workspace_per_thread_and_a_separate_lt_one_when_not_unified():
    unified = CudaTarget(compute_capability=(9, 0), workspace_env=())
    separate = CudaTarget(
        compute_capability=(9, 0), workspace_env=(("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0"),)
    )
    # forward: addmm with bias (cuBLASLt); backward (autograd thread): mm (cuBLAS)
    assert _workspace_bytes(unified) == 2 * LARGE
    assert _workspace_bytes(separate) == MIB + LARGE
    old = CudaTarget(compute_capability=(9, 0), workspace_env=(), torch_version="2.9.1")
    assert _workspace_bytes(old) == LARGE + MIB + LARGE  # the Lt path also set up the cuBLAS handle
