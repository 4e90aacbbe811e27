"""Live tensor-storage bytes, op by op: the CPU stand-in for the CUDA allocator's counters.

`LiveBytes` is a TorchDispatchMode. After every op it looks at the op's outputs; each
storage it has not seen yet is added to `live` (its nbytes) and a `weakref.finalize` on
the storage subtracts it when the storage dies. Views share their base's storage, so a
storage is counted once however many tensors look at it. Storages that grow in place
(`resize_`) are re-read when they come out of an op again.

The counters mirror `torch.cuda.memory_allocated()` / `max_memory_allocated()` /
`reset_peak_memory_stats()`, so the training loop reads the same interface on both.
What it cannot see, like the CUDA allocator's own rounding to 512-byte blocks, kernels'
private workspaces, or memory outside torch's allocator, it does not count.

Beside the counter it keeps `events`, the allocation sequence in the order the CUDA
caching allocator would see it: `(ALLOC, key, nbytes)` when a storage is first seen,
`(RESIZE, key, nbytes)` when it grew or shrank in place (CUDA allocates the new size,
copies, then frees the old block), `(FREE, key, 0)` when it dies, and `(PHASE, label, 0)`
markers from `begin_phase`. `measure/allocator.py` replays it. A storage taken off the
count by `exclude` (paged optimizer state: CUDA unified memory, never in the allocator)
has its allocation event retracted, so the replay never sees it.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

ALLOC, RESIZE, FREE, PHASE, RETRACTED = "alloc", "resize", "free", "phase", "retracted"


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of live tensor storages created while it is active (or registered)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}  # storage key -> bytes counted
        self._excluded: set[int] = set()
        self.events: list[tuple[str, Any, int]] = []
        self._event_at: dict[int, list[int]] = {}  # live storage key -> indices of its alloc/resize events

    # -- the allocator-like interface --------------------------------------------
    def memory_allocated(self) -> int:
        return self.live

    def max_memory_allocated(self) -> int:
        return self.peak

    def reset_peak_memory_stats(self) -> None:
        self.peak = self.live

    def begin_phase(self, label: Any) -> None:
        """Mark where a phase of the step starts in the event sequence (the replay reports
        the allocator's reserved bytes per label)."""
        self.events.append((PHASE, label, 0))

    # -- registration ---------------------------------------------------------------
    @staticmethod
    def _key(st: Any) -> int:
        return st._cdata

    def _finalized(self, key: int) -> None:
        size = self._sizes.pop(key, None)
        if size is not None:
            self.live -= size
            self.events.append((FREE, key, 0))
            self._event_at.pop(key, None)
        self._excluded.discard(key)

    def track(self, t: torch.Tensor) -> None:
        """Count `t`'s storage if it is new (or has grown)."""
        if not isinstance(t, torch.Tensor):
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse / nested / no storage
            return
        key = self._key(st)
        if key in self._excluded:
            return
        nbytes = st.nbytes()
        old = self._sizes.get(key)
        if old is None:
            self._sizes[key] = nbytes
            self.live += nbytes
            weakref.finalize(st, self._finalized, key)
            self._event_at[key] = [len(self.events)]
            self.events.append((ALLOC, key, nbytes))
        elif old != nbytes:  # resize_ grew or shrank it in place
            self._sizes[key] = nbytes
            self.live += nbytes - old
            self._event_at[key].append(len(self.events))
            self.events.append((RESIZE, key, nbytes))
        else:
            return
        if self.live > self.peak:
            self.peak = self.live

    def track_all(self, tensors: Iterable[torch.Tensor]) -> None:
        for t in tensors:
            self.track(t)

    def exclude(self, t: torch.Tensor) -> int:
        """Stop counting `t`'s storage (e.g. paged optimizer state, which lives in CUDA
        unified memory outside the allocator). Returns the bytes taken off."""
        st = t.untyped_storage()
        key = self._key(st)
        size = self._sizes.pop(key, None)
        if size is None:
            if key in self._excluded:
                return 0
            size = 0
            weakref.finalize(st, self._finalized, key)
        for i in self._event_at.pop(key, ()):  # it never was in the allocator
            self.events[i] = (RETRACTED, key, 0)
        self._excluded.add(key)
        self.live -= size
        return size

    def storage_bytes(self, tensors: Iterable[torch.Tensor]) -> int:
        """Bytes of the distinct storages behind `tensors` (each storage once)."""
        seen: dict[int, int] = {}
        for t in tensors:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                seen[self._key(st)] = st.nbytes()
        return sum(seen.values())

    # -- the dispatch hook ----------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.track(t)
        return out


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors`, without a tracker."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[st._cdata] = st.nbytes()
    return sum(seen.values())
