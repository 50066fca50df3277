"""Hold a job to its reservation, so a wrong estimate fails that job alone.

Real GPU: ``cap_process_memory`` sets ``torch.cuda.set_per_process_memory_fraction`` to the
reservation (less the CUDA context, which is not allocator memory): the caching allocator then
raises ``torch.cuda.OutOfMemoryError`` in this process before it can take a neighbour's memory.
On a machine without CUDA it is a no-op and returns None: there is no device memory to cap, and a
CPU job is sized against RAM by the caller.

Simulated GPU: the job trains on the CPU under ``SimulatedDeviceGuard``, a dispatch mode that
replays every storage the job allocates and frees through the estimator's CUDA caching-allocator
simulator (``workers.memory.allocator``) with the reservation as its capacity, and raises
``SimulatedOutOfMemory`` at the allocation that would not fit, as the real allocator would.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from workers.memory.allocator import CachingAllocatorSimulator, SimulatedOutOfMemory
from workers.placement.devices import CUDA_CONTEXT_BYTES

if TYPE_CHECKING:
    import torch  # lazy: only GPU workers pay for it here

__all__ = ["SimulatedDeviceGuard", "SimulatedOutOfMemory", "allocator_budget", "cap_process_memory"]


def allocator_budget(reservation_bytes: int, context_bytes: int = CUDA_CONTEXT_BYTES) -> int:
    """The part of a reservation the caching allocator may hold (the context is outside it)."""
    return max(0, reservation_bytes - context_bytes)


def cap_process_memory(
    reservation_bytes: int, *, device_index: int = 0, context_bytes: int = CUDA_CONTEXT_BYTES
) -> float | None:
    """Cap this process's CUDA allocator at the reservation; returns the fraction set.

    No-op (None) without a CUDA device: documented, not an error, so the same job code runs on
    CPU workers and simulated devices.
    """
    import torch  # lazy: only GPU workers pay for it here

    if not torch.cuda.is_available():
        return None
    total = torch.cuda.get_device_properties(device_index).total_memory
    fraction = min(1.0, allocator_budget(reservation_bytes, context_bytes) / total)
    torch.cuda.set_per_process_memory_fraction(fraction, device_index)
    return fraction


def _dispatch_mode_base() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode  # lazy: imports torch

    return TorchDispatchMode


class SimulatedDeviceGuard:
    """Context manager: run real CPU training as if on a GPU with ``capacity_bytes`` for its allocator.

    ``register`` the tensors that exist before training (parameters, buffers, the batch) — the
    order a job moves them to the device — then train inside ``with guard:``. Afterwards
    ``peak_reserved_bytes`` is the replayed ``max_memory_reserved``; ``measured_bytes`` adds the
    CUDA context, the figure stored beside the estimate.
    """

    def __init__(self, capacity_bytes: int, *, context_bytes: int = CUDA_CONTEXT_BYTES) -> None:
        self.allocator = CachingAllocatorSimulator(capacity=max(1, capacity_bytes))
        self.context_bytes = context_bytes
        self.out_of_memory: SimulatedOutOfMemory | None = None
        self._live: dict[int, tuple[int, int, weakref.ref[Any]]] = {}  # id(storage) -> handle, size
        self._mode: Any = None

    @property
    def peak_reserved_bytes(self) -> int:
        return self.allocator.stats.peak_reserved

    @property
    def peak_allocated_bytes(self) -> int:
        return self.allocator.stats.peak_allocated

    @property
    def measured_bytes(self) -> int:
        return self.peak_reserved_bytes + self.context_bytes

    def register(self, tensors: Iterable[torch.Tensor]) -> None:
        for tensor in tensors:
            self.observe(tensor)

    def register_module(self, module: torch.nn.Module) -> None:
        self.register([*module.parameters(), *module.buffers()])

    def observe(self, tensor: torch.Tensor) -> None:
        if tensor.device.type == "meta":
            return
        storage = tensor.untyped_storage()
        entry = self._live.get(id(storage))
        if entry is not None and entry[1] == storage.nbytes():
            return
        if entry is not None:  # resized in place: the allocator sees a free and a new block
            self._release(id(storage))
        if storage.nbytes() > 0:
            self._allocate(storage)

    def _allocate(self, storage: Any) -> None:
        key, nbytes = id(storage), storage.nbytes()
        try:
            handle = self.allocator.malloc(nbytes)
        except SimulatedOutOfMemory as exc:
            self.out_of_memory = exc
            raise
        self._live[key] = (handle, nbytes, weakref.ref(storage, self._on_free(key, handle)))

    def _on_free(self, key: int, handle: int) -> Any:
        def free(_ref: Any) -> None:
            entry = self._live.get(key)
            if entry is not None and entry[0] == handle:
                self._release(key)

        return free

    def _release(self, key: int) -> None:
        handle, _, _ = self._live.pop(key)
        self.allocator.free(handle)

    def __enter__(self) -> SimulatedDeviceGuard:
        guard = self

        class _Mode(_dispatch_mode_base()):  # type: ignore[misc]
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                from torch.utils._pytree import tree_flatten  # lazy: imports torch

                out = func(*args, **(kwargs or {}))
                for leaf in tree_flatten(out)[0]:
                    if hasattr(leaf, "untyped_storage"):
                        guard.observe(leaf)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        self._mode = None
