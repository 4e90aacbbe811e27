"""A model of PyTorch's CUDA caching allocator (native backend, one stream), to replay a traced
step's allocation sequence and predict `torch.cuda.max_memory_reserved()`.

The rules are PyTorch's, read from c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch @001074d2)
and c10/core/AllocatorConfig.{h,cpp}; the constants are data (`data/cuda_allocator.json`):

- `round_size`: every request is rounded up to a multiple of 512 bytes (kMinBlockSize), or, with
  `roundup_power2_divisions`, to the next of N equal divisions of its power-of-two interval
  (`roundup_power2_next_division`).
- `get_pool`: rounded requests up to 1 MiB (kSmallSize) go to the small pool, larger ones to the
  large pool. Each pool caches free blocks ordered by (size, address).
- `get_free_block`: best fit, the smallest cached block of at least the size (ties: the lowest
  address). With `max_split_size_mb`, a request under the limit never takes an "oversize" block
  (>= the limit), and a request over it takes one only if the block is less than
  max_non_split_rounding (20 MiB) larger.
- `alloc_block` / `get_allocation_size`: without a fitting block, a new segment is cudaMalloc'ed:
  2 MiB (kSmallBuffer) for the small pool, 20 MiB (kLargeBuffer, `large_segment_size`) for
  requests under 10 MiB (kMinLargeAlloc), else the request rounded up to 2 MiB (kRoundLarge).
- `should_split`: the block is split and the remainder cached when the remainder is >= 512 bytes
  (small pool) or > 1 MiB (large pool, and only for requests under `max_split_size`); otherwise
  the whole block is handed out, and `memory_allocated` counts it whole.
- `free_block` / `try_merge_blocks`: a freed block merges with its free neighbours in the same
  segment; segments go back to CUDA only on `empty_cache()` (`release_cached_blocks`: every
  segment that is entirely free), or when a cudaMalloc fails (then the allocator frees the cached
  oversize blocks, then every entirely free segment, and retries before raising OOM).
- `expandable_segments:True`: one segment per pool grows by mapping pages (2 MiB in the small
  pool, `large_segment_size` = 20 MiB in the large pool) at its lowest unmapped address that,
  with the free block before it, fits the request (`find_expandable_block`, `map_block`);
  blocks split whenever >= 512 bytes remain; best fit prefers a block that fits as it is over the
  free block at the mapped end (`get_free_block`'s `expandable_size`); `empty_cache` unmaps every
  page no live block touches (`unmap_block`).

Not modelled: several streams (events, `record_stream`), CUDA graphs' private pools,
`garbage_collection_threshold`, and memory allocated outside the allocator (the CUDA context,
NCCL, cuBLAS workspaces when they come from cudaMalloc).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Iterable

from memlint import data
from memlint.errors import MemlintError

_VA_SIZE = 1 << 50  # an expandable segment's address space: more than any GPU's memory


def constants() -> dict[str, int]:
    return {k: v for k, v in data.load("cuda_allocator.json").items() if isinstance(v, int)}


class AllocatorOOM(MemlintError):
    """The replayed allocator ran out of `capacity` after releasing what it caches."""


@dataclass(frozen=True)
class AllocatorConfig:
    """`PYTORCH_CUDA_ALLOC_CONF` settings the model honours, plus the bytes it may reserve."""

    expandable_segments: bool = False
    max_split_size: int | None = None          # bytes; None: unlimited (the default)
    max_non_split_rounding: int | None = None  # bytes; None: the default (20 MiB)
    roundup_power2_divisions: tuple[int, ...] = ()  # per interval [2^i, 2^(i+1)) MiB; () = none
    large_segment_size: int | None = None      # bytes; None: the default (20 MiB)
    capacity: int | None = None                # bytes the allocator may reserve; None: unlimited

    @classmethod
    def parse(cls, conf: str | None, capacity: int | None = None) -> "AllocatorConfig":
        """Read a `PYTORCH_CUDA_ALLOC_CONF` string ("expandable_segments:True,max_split_size_mb:128").
        Unknown keys that do not change where blocks go (backend, pinned_*, release_lock_*,
        garbage_collection_threshold) are accepted and ignored; `backend:cudaMallocAsync` is refused."""
        c = constants()
        kw: dict[str, Any] = {"capacity": capacity}
        tokens = _tokens(conf or "")
        i = 0
        while i < len(tokens):
            key = tokens[i]
            if i + 2 >= len(tokens) or tokens[i + 1] != ":":
                raise MemlintError(f"allocator config: expected key:value at {key!r}")
            i += 2
            if tokens[i] == "[":
                j = tokens.index("]", i)
                value: Any = tokens[i + 1:j]
                i = j + 1
            else:
                value = tokens[i]
                i += 1
            if i < len(tokens):
                if tokens[i] != ",":
                    raise MemlintError(f"allocator config: expected ',' after {key}")
                i += 1
            mb = 1 << 20
            if key == "expandable_segments":
                if value not in ("True", "False"):
                    raise MemlintError("allocator config: expandable_segments is True or False")
                kw["expandable_segments"] = value == "True"
            elif key in ("max_split_size_mb", "max_non_split_rounding_mb", "large_segment_size_mb"):
                n = int(value)
                if n < c["min_split_size_mb"] and key != "large_segment_size_mb":
                    raise MemlintError(f"allocator config: {key} must be >= {c['min_split_size_mb']}")
                kw[{"max_split_size_mb": "max_split_size", "max_non_split_rounding_mb": "max_non_split_rounding",
                    "large_segment_size_mb": "large_segment_size"}[key]] = n * mb
            elif key == "roundup_power2_divisions":
                kw["roundup_power2_divisions"] = _divisions(value, c["roundup_power2_intervals"])
            elif key == "backend":
                if value != "native":
                    raise MemlintError(f"allocator config: backend {value} is not the caching allocator memlint models")
            elif key not in ("garbage_collection_threshold", "release_lock_on_cudamalloc",
                             "pinned_use_cuda_host_register", "pinned_num_register_threads",
                             "pinned_use_background_threads"):
                raise MemlintError(f"allocator config: unknown option {key!r}")
        return cls(**kw)

    def describe(self) -> str:
        parts = []
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.max_split_size is not None:
            parts.append(f"max_split_size_mb:{self.max_split_size >> 20}")
        if self.max_non_split_rounding is not None:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding >> 20}")
        if self.large_segment_size is not None:
            parts.append(f"large_segment_size_mb:{self.large_segment_size >> 20}")
        if any(self.roundup_power2_divisions):
            parts.append("roundup_power2_divisions:[" + ",".join(
                f"{1 << i}:{d}" for i, d in enumerate(self.roundup_power2_divisions)) + "]")
        return ",".join(parts) or "default"


def _tokens(conf: str) -> list[str]:
    """c10's ConfigTokenizer: split on , : [ ] and drop whitespace."""
    out, buf = [], ""
    for ch in conf:
        if ch in ",:[]":
            if buf:
                out.append(buf)
                buf = ""
            out.append(ch)
        elif not ch.isspace():
            buf += ch
    if buf:
        out.append(buf)
    return out


def _divisions(value: Any, n: int) -> tuple[int, ...]:
    """parseRoundUpPower2Divisions: one number for every interval, or a list "[256:1,512:2,>:8]"
    (interval starts in MiB, powers of two; '>' fills from the last one named to the end)."""
    def power2(x: int) -> bool:
        return x > 0 and x & (x - 1) == 0

    out = [0] * n
    if isinstance(value, str):
        d = int(value)
        if not power2(d):
            raise MemlintError("allocator config: roundup_power2_divisions must be a power of 2")
        return tuple([d] * n)
    items = [t for t in value if t != ","]
    if len(items) % 3:
        raise MemlintError("allocator config: roundup_power2_divisions list is interval:divisions,...")
    first, last = True, 0
    for k in range(0, len(items), 3):
        start, colon, div = items[k:k + 3]
        d = int(div)
        if colon != ":" or not (d == 0 or power2(d)):
            raise MemlintError("allocator config: roundup_power2_divisions must be powers of 2 or 0")
        if start == ">":
            out[last:] = [d] * (n - last)
            continue
        mb = int(start)
        if not power2(mb):
            raise MemlintError("allocator config: roundup_power2_divisions intervals must be powers of 2")
        index = min(mb.bit_length() - 1, n - 1)
        if first:
            out[:index] = [d] * index
            first = False
        out[index] = d
        last = index
    return tuple(out)


class Block:
    __slots__ = ("ptr", "size", "requested", "allocated", "prev", "next", "small", "mapped", "base")

    def __init__(self, ptr: int, size: int, small: bool, base: int | None = None, mapped: bool = True) -> None:
        self.ptr, self.size, self.small = ptr, size, small
        self.requested = 0
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.mapped = mapped
        self.base = base  # an expandable segment's start address; None for a cudaMalloc'ed segment

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        state = "alloc" if self.allocated else ("free" if self.mapped else "unmapped")
        return f"Block({self.ptr:#x}, {self.size}, {state})"


class _Pool:
    """Free (cached) blocks ordered by (size, address), and an expandable pool's unmapped ranges."""

    def __init__(self, small: bool) -> None:
        self.small = small
        self.keys: list[tuple[int, int]] = []
        self.blocks: dict[int, Block] = {}
        self.unmapped: list[int] = []  # addresses, sorted
        self.unmapped_blocks: dict[int, Block] = {}

    def insert(self, b: Block) -> None:
        bisect.insort(self.keys, (b.size, b.ptr))
        self.blocks[b.ptr] = b

    def remove(self, b: Block) -> None:
        i = bisect.bisect_left(self.keys, (b.size, b.ptr))
        assert self.keys[i] == (b.size, b.ptr), "free block not in its pool"
        del self.keys[i]
        del self.blocks[b.ptr]

    def insert_unmapped(self, b: Block) -> None:
        bisect.insort(self.unmapped, b.ptr)
        self.unmapped_blocks[b.ptr] = b

    def remove_unmapped(self, b: Block) -> None:
        i = bisect.bisect_left(self.unmapped, b.ptr)
        assert self.unmapped[i] == b.ptr
        del self.unmapped[i]
        del self.unmapped_blocks[b.ptr]


class CachingAllocator:
    """`malloc(nbytes) -> Block`, `free(block)`, `empty_cache()` and the allocator's counters:
    `allocated` (memory_allocated: block sizes), `reserved` (memory_reserved: segments), `requested`
    (the bytes asked for), each with a peak that `reset_peak()` restarts."""

    def __init__(self, config: AllocatorConfig | None = None) -> None:
        self.config = config or AllocatorConfig()
        c = constants()
        self.min_block = c["min_block_size"]
        self.small_size = c["small_size"]
        self.small_buffer = c["small_buffer"]
        self.min_large_alloc = c["min_large_alloc"]
        self.round_large = c["round_large"]
        self.large_segment = self.config.large_segment_size or c["large_segment_size"]
        self.non_split_rounding = self.config.max_non_split_rounding or c["max_non_split_rounding"]
        self.small_page = c["small_page"]
        self.pow2_start = c["roundup_power2_start"]
        self.intervals = c["roundup_power2_intervals"]
        self.max_split = self.config.max_split_size
        self.expandable = self.config.expandable_segments
        self.pools = {True: _Pool(True), False: _Pool(False)}
        self.allocated = self.reserved = self.requested = 0
        self.peak_allocated = self.peak_reserved = self.peak_requested = 0
        self.segments = 0             # cudaMalloc'ed segments (or mapped expandable pages) held
        self.num_device_alloc = 0     # cudaMalloc / cuMemMap calls
        self.num_alloc_retries = 0    # times a cudaMalloc failed and cached segments were released
        self._next_ptr = 1 << 40
        self._next_base = 1 << 60
        self._active: dict[int, Block] = {}  # blocks handed out, by address

    # ---- sizes ------------------------------------------------------------------------------
    def round_size(self, size: int) -> int:
        if size < self.min_block:
            return self.min_block
        divisions = self._divisions(size)
        if divisions > 1 and size > self.min_block * divisions:
            return _roundup_power2_next_division(size, divisions)
        return -(-size // self.min_block) * self.min_block

    def _divisions(self, size: int) -> int:
        table = self.config.roundup_power2_divisions
        if not table:
            return 0
        index = (size.bit_length() - 1) - (self.pow2_start.bit_length() - 1)
        return table[max(0, min(index, self.intervals - 1))]

    def allocation_size(self, size: int) -> int:
        if size <= self.small_size:
            return self.small_buffer
        if size < self.min_large_alloc:
            return self.large_segment
        return -(-size // self.round_large) * self.round_large

    def _should_split(self, b: Block, size: int) -> bool:
        remaining = b.size - size
        if b.small or self.expandable:
            return remaining >= self.min_block
        return (self.max_split is None or size < self.max_split) and remaining > self.small_size

    # ---- malloc / free --------------------------------------------------------------------
    def malloc(self, nbytes: int) -> Block:
        if nbytes <= 0:
            raise ValueError("the CUDA allocator hands out no block for 0 bytes")
        size = self.round_size(nbytes)
        pool = self.pools[size <= self.small_size]
        b = self._get_free_block(pool, size)
        if b is None:
            b = self._alloc_block(pool, size)
            if b is None and self._release_available_cached_blocks(pool, size):
                b = self._alloc_block(pool, size)
            if b is None:
                self.num_alloc_retries += 1
                self.empty_cache()
                b = self._alloc_block(pool, size)
            if b is None:
                raise AllocatorOOM(f"CUDA out of memory (replayed): tried to allocate {nbytes:,} bytes with "
                                   f"{self.reserved:,} reserved of {self.config.capacity:,}")
        if self._should_split(b, size):
            rest = Block(b.ptr + size, b.size - size, b.small, b.base)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = size
            pool.insert(rest)
        b.allocated = True
        b.requested = nbytes
        self._active[b.ptr] = b
        self.allocated += b.size
        self.requested += nbytes
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        if self.requested > self.peak_requested:
            self.peak_requested = self.requested
        return b

    def free(self, b: Block) -> None:
        if not b.allocated:
            raise ValueError("double free")
        b.allocated = False
        del self._active[b.ptr]
        self.allocated -= b.size
        self.requested -= b.requested
        b.requested = 0
        pool = self.pools[b.small]
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.insert(b)

    def reset_peak(self) -> None:
        self.peak_allocated, self.peak_reserved, self.peak_requested = self.allocated, self.reserved, self.requested

    def _get_free_block(self, pool: _Pool, size: int) -> Block | None:
        i = bisect.bisect_left(pool.keys, (size, -1))
        if i == len(pool.keys):
            return None
        if self.expandable:  # a block that fits as it is beats the free end of the segment
            while i + 1 < len(pool.keys) and (self._expandable_size(pool.blocks[pool.keys[i + 1][1]])
                                               < self._expandable_size(pool.blocks[pool.keys[i][1]])):
                i += 1
        b = pool.blocks[pool.keys[i][1]]
        if self.max_split is not None:
            if size < self.max_split and b.size >= self.max_split:
                return None
            if size >= self.max_split and b.size >= size + self.non_split_rounding:
                return None
        pool.remove(b)
        return b

    @staticmethod
    def _expandable_size(b: Block) -> int:
        return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

    def _try_merge(self, dst: Block, src: Block | None, pool: _Pool) -> int:
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # ---- segments ---------------------------------------------------------------------------
    def _fits(self, nbytes: int) -> bool:
        return self.config.capacity is None or self.reserved + nbytes <= self.config.capacity

    def _grow(self, nbytes: int) -> None:
        self.reserved += nbytes
        self.num_device_alloc += 1
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved

    def _alloc_block(self, pool: _Pool, size: int) -> Block | None:
        if self.expandable:
            return self._alloc_expandable(pool, size)
        n = self.allocation_size(size)
        if not self._fits(n):
            return None
        b = Block(self._next_ptr, n, pool.small)
        self._next_ptr += n
        self.segments += 1
        self._grow(n)
        return b

    def empty_cache(self) -> None:
        """release_cached_blocks: every entirely free segment goes back to CUDA (expandable
        segments: every page no block in use touches is unmapped)."""
        for pool in self.pools.values():
            free = [pool.blocks[p] for _, p in list(pool.keys)]
            for b in free:
                if b.base is not None:
                    self._unmap(pool, b)
                elif b.prev is None and b.next is None:
                    self._release(pool, b)
            for ptr in list(pool.unmapped):  # release_expandable_segment: nothing mapped is left
                b = pool.unmapped_blocks[ptr]
                if b.prev is None and b.next is None:
                    pool.remove_unmapped(b)

    def _release(self, pool: _Pool, b: Block) -> None:
        pool.remove(b)
        self.reserved -= b.size
        self.segments -= 1

    def _release_available_cached_blocks(self, pool: _Pool, size: int) -> bool:
        """With max_split_size: free cached oversize segments, the smallest that is big enough, or
        the largest ones until enough is freed."""
        if self.max_split is None or self.expandable:
            return False
        key = max(size, self.max_split)
        i = bisect.bisect_left(pool.keys, (key, -1))
        whole = [pool.blocks[p] for s, p in pool.keys if s >= self.max_split]
        whole = [b for b in whole if b.prev is None and b.next is None]
        if i < len(pool.keys):
            b = pool.blocks[pool.keys[i][1]]
            if b.prev is None and b.next is None:
                self._release(pool, b)
                return True
            return False
        released = 0
        for b in sorted(whole, key=lambda b: (b.size, b.ptr), reverse=True):
            if released >= key:
                break
            released += b.size
            self._release(pool, b)
        return released >= key

    # ---- expandable segments ------------------------------------------------------------------
    def _page(self, pool: _Pool) -> int:
        return self.small_page if pool.small else self.large_segment

    def _alloc_expandable(self, pool: _Pool, size: int) -> Block | None:
        c = self._find_expandable_block(pool, size)
        if not c.mapped:
            c = self._map(pool, c, min(c.size, size))
            if c is None:
                return None
        while c.size < size:
            nxt = c.next
            assert nxt is not None and not nxt.mapped
            merged = self._map(pool, nxt, min(size - c.size, nxt.size))
            if merged is None:
                return None
            c = merged
        pool.remove(c)
        return c

    def _find_expandable_block(self, pool: _Pool, size: int) -> Block:
        def available(b: Block | None) -> bool:
            n = 0
            while n < size and b is not None and not b.allocated:
                n += b.size
                b = b.next
            return n >= size

        for ptr in pool.unmapped:
            c = pool.unmapped_blocks[ptr]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            if available(c):
                return c
        base = self._next_base
        self._next_base += _VA_SIZE
        seg = Block(base, _VA_SIZE, pool.small, base=base, mapped=False)
        pool.insert_unmapped(seg)
        return seg

    def _map(self, pool: _Pool, b: Block, size: int) -> Block | None:
        """map_block: back [b.ptr, b.ptr + size) with whole pages; returns the free mapped block
        that holds them (merged with free neighbours), or None when capacity is exhausted."""
        page = self._page(pool)
        assert (b.ptr - b.base) % page == 0, "unmapped ranges start on a page"
        n = -(-size // page) * page
        assert n <= b.size
        if not self._fits(n):
            return None
        pool.remove_unmapped(b)
        b.mapped = True
        if n < b.size:
            rest = Block(b.ptr + n, b.size - n, b.small, b.base, mapped=False)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            pool.insert_unmapped(rest)
            b.size = n
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.insert(b)
        self.segments += n // page
        self._grow(n)
        return b

    def _unmap(self, pool: _Pool, b: Block) -> None:
        """unmap_block: give back the whole pages inside the free block b."""
        page = self._page(pool)
        off = b.ptr - b.base
        begin, end = -(-off // page) * page, (off + b.size) // page * page
        if begin >= end:
            return
        pool.remove(b)
        before = begin - off
        if before > 0:
            head = Block(b.ptr, before, b.small, b.base)
            head.prev, head.next = b.prev, b
            if b.prev is not None:
                b.prev.next = head
            b.prev = head
            pool.insert(head)
        after = b.size - before - (end - begin)
        if after > 0:
            tail = Block(b.base + end, after, b.small, b.base)
            tail.prev, tail.next = b, b.next
            if b.next is not None:
                b.next.prev = tail
            b.next = tail
            pool.insert(tail)
        b.ptr, b.size, b.mapped = b.base + begin, end - begin, False
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.insert_unmapped(b)
        self.reserved -= end - begin
        self.segments -= (end - begin) // page

    # ---- inspection -------------------------------------------------------------------------
    def snapshot(self) -> list[dict[str, Any]]:
        """Segments (mapped ranges for expandable ones) with their blocks, like
        torch.cuda.memory_snapshot(): [{"pool", "total_size", "blocks": [(size, allocated)]}]."""
        heads: dict[int, Block] = {}
        for pool in self.pools.values():
            for b in list(pool.blocks.values()) + list(pool.unmapped_blocks.values()):
                h = head_of(b)
                heads[h.ptr] = h
        for b in self._active.values():
            h = head_of(b)
            heads[h.ptr] = h
        out = []
        for ptr in sorted(heads):
            b: Block | None = heads[ptr]
            seg: dict[str, Any] | None = None
            while b is not None:
                if b.mapped:
                    if seg is None:
                        seg = {"pool": "small" if b.small else "large", "address": b.ptr, "total_size": 0,
                               "blocks": [], "expandable": b.base is not None}
                        out.append(seg)
                    seg["total_size"] += b.size
                    seg["blocks"].append((b.size, b.allocated))
                else:
                    seg = None
                b = b.next
        return out


def head_of(b: Block) -> Block:
    while b.prev is not None:
        b = b.prev
    return b


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    """CUDACachingAllocator's roundup_power2_next_division: 1200 with 4 divisions -> 1280."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


# --------------------------------------------------------------------------- replay
@dataclass
class PhaseStats:
    reserved: int = 0    # max_memory_reserved within the phase
    allocated: int = 0   # max_memory_allocated within the phase (block sizes)
    requested: int = 0   # the largest sum of live requested bytes: the tracker's peak

    def merge(self, a: CachingAllocator) -> None:
        self.reserved = max(self.reserved, a.peak_reserved)
        self.allocated = max(self.allocated, a.peak_allocated)
        self.requested = max(self.requested, a.peak_requested)


@dataclass
class Replay:
    config: AllocatorConfig
    phases: dict[Any, PhaseStats] = field(default_factory=dict)  # label -> stats (None: before any phase)
    reserved: int = 0          # memory_reserved at the end
    peak_reserved: int = 0     # max over the whole sequence
    peak_allocated: int = 0
    segments: int = 0
    device_allocs: int = 0
    retries: int = 0
    events: int = 0


def replay(events: Iterable[tuple[str, Any, int]], config: AllocatorConfig | None = None) -> Replay:
    """Run a `LiveBytes.events` sequence through the allocator model; per-phase peaks (labels
    from `begin_phase`; several runs of one label keep the largest)."""
    from memlint.measure.tracker import ALLOC, FREE, PHASE, RESIZE

    a = CachingAllocator(config)
    live: dict[Any, Block | None] = {}
    out = Replay(a.config)
    label: Any = None
    top = PhaseStats()
    count = 0
    for kind, key, n in events:
        count += 1
        if kind == ALLOC or kind == RESIZE:
            old = live.get(key) if kind == RESIZE else None
            live[key] = a.malloc(n) if n > 0 else None
            if old is not None:
                a.free(old)
        elif kind == FREE:
            b = live.pop(key, None)
            if b is not None:
                a.free(b)
        elif kind == PHASE:
            out.phases.setdefault(label, PhaseStats()).merge(a)
            top.merge(a)
            label = key
            a.reset_peak()
    out.phases.setdefault(label, PhaseStats()).merge(a)
    top.merge(a)
    out.reserved, out.peak_reserved, out.peak_allocated = a.reserved, top.reserved, top.allocated
    out.segments, out.device_allocs, out.retries, out.events = a.segments, a.num_device_alloc, a.num_alloc_retries, count
    return out
