"""cuBLAS and cuBLASLt workspaces, by torch version, compute capability and environment.

Each rule restates ``aten/src/ATen/cuda/CublasHandlePool.cpp`` (and, before 2.8, the cuBLASLt
part of ``CUDABlas.cpp``) of the torch versions it names:

- cuBLAS: one workspace per (handle, stream), allocated through the caching allocator at the
  first cuBLAS call of a thread and kept (``setWorkspaceForHandle``). Its size is
  ``parseChosenWorkspaceSize``: ``CUBLAS_WORKSPACE_CONFIG`` (``:SIZE_KIB:COUNT`` pairs, summed),
  else ``:4096:8`` (32 MiB) on the architectures of ``big_majors`` and ``:4096:2:16:8`` (8 MiB +
  128 KiB) elsewhere; ``torch.backends.cuda.cublas_workspace_size(n)`` overrides both.
- cuBLASLt (the bias and activation epilogues of ``addmm``): a transient allocation per call
  before 2.8; one per (handle, stream) from 2.8 (pytorch#156495), of ``CUBLASLT_WORKSPACE_SIZE``
  KiB (1024 by default); none of its own when unified with the cuBLAS one
  (``TORCH_CUBLASLT_UNIFIED_WORKSPACE``: opt-in from 2.8, on by default from 2.11, pytorch#175879).
- From 2.14 caching is opt-in (``TORCH_CUBLAS_WORKSPACE_CACHE=1``): without it cuBLAS keeps its
  own default workspace, which the caching allocator never sees, and cuBLASLt is not unified.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB
_LARGE_DEFAULT = 4096 * KIB * 8  # ":4096:8"
_SMALL_DEFAULT = 4096 * KIB * 2 + 16 * KIB * 8  # ":4096:2:16:8"
_LT_DEFAULT_KIB = 1024  # "default size in KiB according to #73328"
_CONFIG_PAIR = re.compile(r":([0-9]+):([0-9]+)")
_LEADING_INT = re.compile(r"\s*([+-]?[0-9]+)")
_INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class BlasRule:
    """What one range of torch versions does with BLAS workspaces."""

    since: tuple[int, int]
    big_majors: frozenset[int]
    big_needs_minor_zero: bool  # ``major == 9 && minor == 0`` before 2.11
    lt_cached_per_handle: bool
    unified_by_default: bool
    unified_env: bool  # TORCH_CUBLASLT_UNIFIED_WORKSPACE is read at all
    caching_opt_in: bool
    lt_sets_up_cublas_handle: bool  # the Lt path also gives the handle its cuBLAS workspace


# Oldest first; a version takes the last rule whose ``since`` it has reached.
RULES: tuple[BlasRule, ...] = (
    # 2.4-2.7: sm 9.0 only gets 32 MiB (pytorch#91564); Lt workspace allocated per call in
    # CUDABlas.cpp (``_getWorkspaceSize`` reads CUBLASLT_WORKSPACE_SIZE, 1024 KiB default).
    BlasRule((2, 4), frozenset({9}), True, False, False, False, False, True),
    # 2.8-2.10: Lt workspace cached per (handle, stream) (pytorch#156495); unified opt-in (#151163).
    BlasRule((2, 8), frozenset({9}), True, True, False, True, False, True),
    # 2.11-2.12: 32 MiB on Hopper and Blackwell (majors 9, 10, 12; pytorch#175344); unified by
    # default outside fbcode (#175879); the Lt path no longer sets up the cuBLAS handle.
    BlasRule((2, 11), frozenset({9, 10, 12}), False, True, True, True, False, False),
    # 2.13: Thor (major 11) joins the 32 MiB set (pytorch#189312).
    BlasRule((2, 13), frozenset({9, 10, 11, 12}), False, True, True, True, False, False),
    # 2.14 (main after 2.13): workspace caching opt-in, TORCH_CUBLAS_WORKSPACE_CACHE.
    BlasRule((2, 14), frozenset({9, 10, 11, 12}), False, True, True, True, True, False),
)


@dataclass(frozen=True)
class BlasWorkspaces:
    """The workspaces a CUDA training run allocates, resolved for one version, GPU and environment."""

    cublas_bytes: int  # per thread through the caching allocator; 0 when cuBLAS keeps its own
    lt_bytes: int  # per thread (or per call when ``lt_per_call``); 0 when shared with cuBLAS
    lt_per_call: bool
    lt_sets_up_cublas_handle: bool
    outside_allocator_bytes: int  # cuBLAS's own default workspace when caching is off


def rule_for(torch_version: str) -> BlasRule:
    version = _major_minor(torch_version)
    if version < RULES[0].since:
        raise ValueError(f"torch {torch_version}: workspace rules start at 2.4")
    return [rule for rule in RULES if rule.since <= version][-1]


def resolve(
    *,
    torch_version: str,
    compute_capability: tuple[int, int],
    env: Mapping[str, str],
    cublas_override: int | None = None,
    cublaslt_override: int | None = None,
) -> BlasWorkspaces:
    """Workspace sizes as the given torch computes them on a GPU of ``compute_capability``.

    ``env`` holds the job's environment variables; the overrides are what
    ``torch.backends.cuda.cublas_workspace_size`` / ``cublaslt_workspace_size`` set (2.13+).
    """
    rule = rule_for(torch_version)
    chosen = cublas_override if cublas_override is not None else cublas_size(rule, compute_capability, env)
    caching = not rule.caching_opt_in or _check_env(env, "TORCH_CUBLAS_WORKSPACE_CACHE") is True
    unified = caching and _unified(rule, env)
    lt = cublaslt_override if cublaslt_override is not None else cublaslt_size(env)
    return BlasWorkspaces(
        cublas_bytes=chosen if caching else 0,
        lt_bytes=0 if unified else lt,
        lt_per_call=not rule.lt_cached_per_handle,
        lt_sets_up_cublas_handle=rule.lt_sets_up_cublas_handle,
        outside_allocator_bytes=0 if caching else chosen,
    )


def cublas_size(rule: BlasRule, compute_capability: tuple[int, int], env: Mapping[str, str]) -> int:
    major, minor = compute_capability
    big = major in rule.big_majors and (minor == 0 or not rule.big_needs_minor_zero)
    default = _LARGE_DEFAULT if big else _SMALL_DEFAULT
    config = env.get("CUBLAS_WORKSPACE_CONFIG")
    return default if config is None else parse_workspace_config(config, default)


def parse_workspace_config(config: str, default: int) -> int:
    """``CUBLAS_WORKSPACE_CONFIG`` as torch reads it: every ``:SIZE:COUNT`` pair (SIZE in KiB)
    summed; a value without any pair falls back to the default (torch warns)."""
    pairs = _CONFIG_PAIR.findall(config)
    if not pairs:
        return default
    return sum(int(size) * KIB * int(count) for size, count in pairs)


def cublaslt_size(env: Mapping[str, str]) -> int:
    """A separate cuBLASLt workspace: ``CUBLASLT_WORKSPACE_SIZE`` KiB, 1024 by default."""
    return _stoi(env.get("CUBLASLT_WORKSPACE_SIZE"), _LT_DEFAULT_KIB) * KIB


def _unified(rule: BlasRule, env: Mapping[str, str]) -> bool:
    if not rule.unified_env:
        return False
    flag = _check_env(env, "TORCH_CUBLASLT_UNIFIED_WORKSPACE")
    return flag is True or (flag is None and rule.unified_by_default)


def _check_env(env: Mapping[str, str], name: str) -> bool | None:
    # c10::utils::check_env: "1" is true, "0" is false, anything else is ignored (with a warning).
    return {"1": True, "0": False}.get(env.get(name, ""))


def _stoi(value: str | None, default: int) -> int:
    # std::stoi: leading whitespace, a sign and digits; trailing text ignored; no digits or
    # out of int range falls back to the default (torch warns).
    match = _LEADING_INT.match(value or "")
    if match is None or abs(int(match.group(1))) > _INT_MAX:
        return default
    return max(0, int(match.group(1)))


def _major_minor(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a torch version: {version!r}")
    return int(match.group(1)), int(match.group(2))
