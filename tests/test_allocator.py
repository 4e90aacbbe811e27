"""memlint.measure.allocator: the CUDA caching allocator model, on hand-computed sequences and
on properties any sequence keeps. Pure Python: no torch, no GPU."""

from __future__ import annotations

import random

import pytest

from memlint.errors import MemlintError
from memlint.measure.allocator import (AllocatorConfig, AllocatorOOM, CachingAllocator, _roundup_power2_next_division,
                                       replay)

KiB, MiB = 1 << 10, 1 << 20


def blocks(a: CachingAllocator) -> list[tuple[str, int, list[tuple[int, bool]]]]:
    return [(s["pool"], s["total_size"], s["blocks"]) for s in a.snapshot()]


# ------------------------------------------------------------------------------ sizes
def test_requests_round_up_to_512_byte_blocks():
    a = CachingAllocator()
    assert [a.round_size(n) for n in (1, 511, 512, 513, 1000, 1 * MiB)] == [512, 512, 512, 1024, 1024, 1 * MiB]


def test_roundup_power2_divisions():
    # the allocator's own example: 1200 between 1024 and 2048 in 4 divisions -> 1280
    assert _roundup_power2_next_division(1200, 4) == 1280
    assert _roundup_power2_next_division(1024, 4) == 1024
    a = CachingAllocator(AllocatorConfig.parse("roundup_power2_divisions:4"))
    assert a.round_size(1200 * MiB) == 1280 * MiB
    assert a.round_size(1200) == 1536  # not above 512 x 4: plain 512-byte rounding
    assert a.round_size(1025 * MiB) == 1280 * MiB


def test_segment_sizes_by_request():
    a = CachingAllocator()
    assert a.allocation_size(a.round_size(1000)) == 2 * MiB           # small pool: 2 MiB segments
    assert a.allocation_size(a.round_size(1 * MiB)) == 2 * MiB
    assert a.allocation_size(a.round_size(1 * MiB + 1)) == 20 * MiB   # 1-10 MiB: 20 MiB segments
    assert a.allocation_size(a.round_size(10 * MiB - 512)) == 20 * MiB
    assert a.allocation_size(a.round_size(10 * MiB)) == 10 * MiB      # >= 10 MiB: rounded to 2 MiB
    assert a.allocation_size(a.round_size(11 * MiB)) == 12 * MiB


# ------------------------------------------------------------------------------ hand-computed sequences
def test_small_requests_share_a_2mib_segment():
    a = CachingAllocator()
    x, y = a.malloc(1000), a.malloc(3000)
    assert (a.reserved, a.allocated, a.requested) == (2 * MiB, 1024 + 3072, 4000)
    assert blocks(a) == [("small", 2 * MiB, [(1024, True), (3072, True), (2 * MiB - 4096, False)])]
    a.free(x)
    a.free(y)
    assert blocks(a) == [("small", 2 * MiB, [(2 * MiB, False)])]  # coalesced back into one block
    assert a.allocated == 0 and a.reserved == 2 * MiB


def test_large_remainders_split_only_above_1mib():
    a = CachingAllocator()
    x = a.malloc(11 * MiB)              # 12 MiB segment, 1 MiB left: not split, counted whole
    assert (a.reserved, a.allocated) == (12 * MiB, 12 * MiB)
    y = a.malloc(10 * MiB + 1)          # 10 MiB + 512 in a 12 MiB segment: 2 MiB - 512 left, split
    assert (a.reserved, a.allocated) == (24 * MiB, 12 * MiB + 10 * MiB + 512)
    assert blocks(a)[1] == ("large", 12 * MiB, [(10 * MiB + 512, True), (2 * MiB - 512, False)])
    a.free(x)
    a.free(y)


def test_mid_size_requests_pack_into_20mib_segments_best_fit():
    a = CachingAllocator()
    x = a.malloc(3 * MiB)               # 20 MiB segment: 3 used, 17 cached
    y = a.malloc(5 * MiB)               # best fit: the 17 MiB remainder
    assert (a.reserved, a.allocated) == (20 * MiB, 8 * MiB)
    assert blocks(a) == [("large", 20 * MiB, [(3 * MiB, True), (5 * MiB, True), (12 * MiB, False)])]
    a.free(x)
    z = a.malloc(2 * MiB)               # best fit: the 3 MiB hole, not the 12 MiB one; 1 MiB left: whole
    assert blocks(a) == [("large", 20 * MiB, [(3 * MiB, True), (5 * MiB, True), (12 * MiB, False)])]
    assert a.allocated == 8 * MiB and z.size == 3 * MiB
    a.free(y)
    a.free(z)
    assert blocks(a) == [("large", 20 * MiB, [(20 * MiB, False)])]


def test_the_classic_fragmentation_pattern():
    """Ten 2 MiB blocks fill one 20 MiB segment; freeing every other one leaves 10 MiB free in five
    holes, and a 4 MiB request fits none of them: a second segment, 40 MiB reserved for 14 live."""
    a = CachingAllocator()
    xs = [a.malloc(2 * MiB) for _ in range(10)]
    assert a.reserved == 20 * MiB and a.segments == 1
    for x in xs[::2]:
        a.free(x)
    assert a.allocated == 10 * MiB and a.reserved == 20 * MiB
    big = a.malloc(4 * MiB)
    assert (a.reserved, a.allocated, a.segments) == (40 * MiB, 14 * MiB, 2)
    for x in xs[1::2]:
        a.free(x)
    assert blocks(a)[0] == ("large", 20 * MiB, [(20 * MiB, False)])  # every hole merged again
    a.empty_cache()                      # the first segment is wholly free: given back
    assert (a.reserved, a.segments) == (20 * MiB, 1)
    a.free(big)
    a.empty_cache()
    assert a.reserved == 0 and a.snapshot() == []


def test_a_cached_block_too_small_for_the_next_request_means_a_new_segment():
    a = CachingAllocator()
    x = a.malloc(100 * MiB)
    a.free(x)
    y = a.malloc(60 * MiB)               # reuses the cached 100 MiB block, split: 40 MiB cached
    assert (a.reserved, a.allocated) == (100 * MiB, 60 * MiB)
    a.malloc(50 * MiB)                   # the 40 MiB remainder is too small: cudaMalloc 50 MiB
    assert (a.reserved, a.allocated, a.peak_reserved) == (150 * MiB, 110 * MiB, 150 * MiB)
    a.free(y)
    assert a.reserved == 150 * MiB       # never given back without empty_cache


def test_max_split_size_keeps_oversize_blocks_whole():
    a = CachingAllocator(AllocatorConfig.parse("max_split_size_mb:100"))
    x = a.malloc(200 * MiB)
    a.free(x)
    small = a.malloc(50 * MiB)           # under the limit: never takes an oversize block
    assert a.reserved == 250 * MiB
    big = a.malloc(190 * MiB)            # over it: the 200 MiB block is < 190 + 20 MiB: taken whole
    assert a.reserved == 250 * MiB and big.size == 200 * MiB and a.allocated == 250 * MiB
    a.free(big)
    a.malloc(150 * MiB)                  # 200 >= 150 + 20: refused, a new segment
    assert a.reserved == 400 * MiB
    a.free(small)


def test_out_of_capacity_releases_cached_segments_then_raises():
    a = CachingAllocator(AllocatorConfig(capacity=100 * MiB))
    x = a.malloc(60 * MiB)
    a.free(x)
    a.malloc(70 * MiB)                   # 60 cached + 70 > 100: the cached segment goes, then it fits
    assert (a.reserved, a.num_alloc_retries) == (70 * MiB, 1)
    with pytest.raises(AllocatorOOM):
        a.malloc(40 * MiB)


# ------------------------------------------------------------------------------ expandable segments
def test_expandable_segments_grow_one_segment_in_pages():
    a = CachingAllocator(AllocatorConfig.parse("expandable_segments:True"))
    a.malloc(3 * MiB)                    # one 20 MiB large-pool page: 3 used, 17 free at the end
    assert (a.reserved, a.allocated) == (20 * MiB, 3 * MiB)
    a.malloc(30 * MiB)                   # the free end (17) + one more page (20): 7 MiB left
    assert (a.reserved, a.allocated) == (40 * MiB, 33 * MiB)
    assert blocks(a) == [("large", 40 * MiB, [(3 * MiB, True), (30 * MiB, True), (7 * MiB, False)])]
    a.malloc(100)                        # the small pool has its own segment of 2 MiB pages
    assert a.reserved == 42 * MiB
    plain = CachingAllocator()
    plain.malloc(3 * MiB)
    plain.malloc(30 * MiB)
    assert plain.reserved == 50 * MiB    # the same two requests: a 20 MiB and a 30 MiB segment


def test_expandable_segments_fragment_on_non_adjacent_frees_and_empty_cache_unmaps_holes():
    a = CachingAllocator(AllocatorConfig.parse("expandable_segments:True"))
    x = a.malloc(100 * MiB)              # 5 pages, exactly used
    a.malloc(100 * MiB)
    a.free(x)                            # a 100 MiB hole before a live block
    y = a.malloc(150 * MiB)              # no fit: mapped at the end, 8 pages (160 MiB), 10 MiB left
    assert (a.reserved, a.allocated) == (360 * MiB, 250 * MiB)
    a.empty_cache()                      # the hole's 5 pages go back; the 10 MiB shares a page with y
    assert a.reserved == 260 * MiB
    a.malloc(100 * MiB)                  # the lowest unmapped range that fits: the old hole
    assert a.reserved == 360 * MiB
    assert [s["total_size"] for s in a.snapshot() if s["pool"] == "large"] == [360 * MiB]
    a.free(y)


def test_expandable_best_fit_prefers_a_block_that_fits_over_the_free_end():
    a = CachingAllocator(AllocatorConfig.parse("expandable_segments:True"))
    x = a.malloc(8 * MiB)
    a.malloc(10 * MiB)                   # 18 of 20 MiB used, 2 MiB free at the end
    a.free(x)                            # 8 MiB hole at the start
    a.malloc(2 * MiB)                    # the end (2 MiB, expandable) is the tightest fit by size,
    # but a block that fits as it is wins: the hole is split, the end stays free
    assert blocks(a) == [("large", 20 * MiB, [(2 * MiB, True), (6 * MiB, False), (10 * MiB, True),
                                              (2 * MiB, False)])]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_expandable_segments_without_fragmentation_reserve_the_peak_rounded_to_pages(seed):
    """Frees in reverse order leave no hole: one growing segment holds exactly the allocated peak,
    rounded up to its 20 MiB pages, where the default allocator keeps a segment per large request."""
    rng = random.Random(seed)
    exp = CachingAllocator(AllocatorConfig.parse("expandable_segments:True"))
    plain = CachingAllocator()
    stacks: list[list] = [[], []]
    for _ in range(400):
        if stacks[0] and rng.random() < 0.45:
            for a, stack in zip((exp, plain), stacks):
                a.free(stack.pop())
        else:
            n = rng.randint(1 * MiB + 1, 200 * MiB)
            for a, stack in zip((exp, plain), stacks):
                stack.append(a.malloc(n))
    page = 20 * MiB
    assert exp.peak_reserved == -(-exp.peak_allocated // page) * page
    assert plain.peak_reserved >= exp.peak_reserved


# ------------------------------------------------------------------------------ config
def test_alloc_conf_parsing():
    c = AllocatorConfig.parse("expandable_segments:True, max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8]")
    assert c.expandable_segments and c.max_split_size == 128 * MiB
    # 1..128 MiB intervals take the first value, 256 -> 1, 512 -> 2 until '>' refills from 512 on
    assert c.roundup_power2_divisions[:8] == (1,) * 8 and c.roundup_power2_divisions[8] == 1
    assert set(c.roundup_power2_divisions[9:]) == {8}
    assert AllocatorConfig.parse(None) == AllocatorConfig() and AllocatorConfig().describe() == "default"
    for bad in ("max_split_size_mb:10", "backend:cudaMallocAsync", "expandable_segments:yes", "nonsense:1",
                "roundup_power2_divisions:3"):
        with pytest.raises(MemlintError):
            AllocatorConfig.parse(bad)


# ------------------------------------------------------------------------------ properties
def _random_run(conf: str, seed: int, steps: int = 3000) -> None:
    rng = random.Random(seed)
    a = CachingAllocator(AllocatorConfig.parse(conf))
    live = []
    last_reserved = 0
    sizes = [rng.randint(1, 4096), rng.randint(4096, 1 * MiB), rng.randint(1 * MiB, 10 * MiB),
             rng.randint(10 * MiB, 300 * MiB)]
    for i in range(steps):
        if live and rng.random() < 0.45:
            a.free(live.pop(rng.randrange(len(live))))
        else:
            n = rng.choice(sizes) if rng.random() < 0.5 else rng.randint(1, 64 * MiB)
            live.append(a.malloc(n))
        assert a.reserved >= a.allocated >= a.requested >= 0
        assert a.reserved >= last_reserved, "reserved shrank without empty_cache"
        last_reserved = a.reserved
        if i % 500 == 0:
            snap = a.snapshot()
            assert sum(s["total_size"] for s in snap) == a.reserved
            assert sum(n for s in snap for n, used in s["blocks"] if used) == a.allocated
            for s in snap:  # coalescing: no two free blocks side by side in a segment
                assert all(not (u1 is False and u2 is False) for (_, u1), (_, u2) in zip(s["blocks"], s["blocks"][1:]))
    assert a.peak_reserved >= a.peak_allocated >= a.peak_requested
    for b in live:
        a.free(b)
    assert a.allocated == a.requested == 0
    a.empty_cache()
    assert a.reserved == 0 and a.snapshot() == []


@pytest.mark.parametrize("conf", ["", "expandable_segments:True", "max_split_size_mb:64",
                                  "roundup_power2_divisions:4"])
@pytest.mark.parametrize("seed", [0, 1])
def test_properties_of_random_sequences(conf, seed):
    _random_run(conf, seed)


# ------------------------------------------------------------------------------ replay
def test_replay_reports_each_phase_and_ignores_retracted_events():
    ev = [("alloc", 1, 30 * MiB), ("phase", "forward", 0), ("alloc", 2, 3 * MiB), ("alloc", 3, 100),
          ("free", 2, 0), ("alloc", 4, 50 * MiB), ("retracted", 9, 0), ("phase", "backward", 0),
          ("resize", 4, 60 * MiB), ("free", 3, 0), ("free", 9, 0), ("free", 4, 0)]
    r = replay(ev)
    assert r.phases[None].reserved == 30 * MiB and r.phases[None].requested == 30 * MiB
    fwd, bwd = r.phases["forward"], r.phases["backward"]
    # the 3 MiB block is freed before the 50 MiB one comes: the peak is with the latter
    assert (fwd.requested, fwd.allocated) == (80 * MiB + 100, 80 * MiB + 512)
    assert fwd.reserved == 30 * MiB + 20 * MiB + 2 * MiB + 50 * MiB
    # the resize allocates 60 MiB while the 50 MiB block is still alive, then frees it
    assert bwd.requested == 30 * MiB + 100 + 110 * MiB and bwd.reserved == fwd.reserved + 60 * MiB
    assert r.peak_reserved == bwd.reserved == r.reserved and r.events == len(ev)
