"""GPU memory estimator: predict a training job's peak memory before it runs.

Public API::

    from workers.memory import estimate_training_memory, plan_batch_size

torch is imported lazily (PEP 562 ``__getattr__``): Celery beat, the web process and the
management command's ``--help`` import this package without paying torch's ~2 s import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.memory.estimator import MemoryEstimate, estimate_training_memory
    from workers.memory.planner import BatchPlan, PlanOption, plan_batch_size

__all__ = [
    "BatchPlan",
    "MemoryEstimate",
    "PlanOption",
    "estimate_training_memory",
    "plan_batch_size",
]

_LAZY = {
    "estimate_training_memory": "workers.memory.estimator",
    "MemoryEstimate": "workers.memory.estimator",
    "plan_batch_size": "workers.memory.planner",
    "BatchPlan": "workers.memory.planner",
    "PlanOption": "workers.memory.planner",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workers.memory' has no attribute {name!r}")
