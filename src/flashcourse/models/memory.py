"""Small numpy models of how a warp meets memory (lesson 3): which 32-byte sectors and 128-byte
lines a warp's load touches, how much of a warp does useful work under a branch, and what
thread coarsening saves."""

from __future__ import annotations

import numpy as np

from ..hardware import H200_SMS, WARP_SIZE

SECTOR_BYTES = 32
LINE_BYTES = 128


def sectors_and_lines(addresses, access_bytes: int = 4) -> tuple[int, int]:
    """Distinct 32-byte sectors and 128-byte lines touched when each thread reads
    `access_bytes` bytes starting at its byte address (accesses of at most 32 bytes)."""
    first = np.asarray(addresses, dtype=np.int64)
    last = first + access_bytes - 1
    sectors = np.unique(np.concatenate([first // SECTOR_BYTES, last // SECTOR_BYTES]))
    lines = np.unique(np.concatenate([first // LINE_BYTES, last // LINE_BYTES]))
    return len(sectors), len(lines)


def warp_addresses(pattern: str, element_bytes: int = 4, stride: int = 2, offset_bytes: int = 4,
                   row_bytes: int = 4096, seed: int = 0, base: int = 0) -> np.ndarray:
    """Byte addresses read by the 32 threads of one warp, thread t reading element ...

    contiguous: t; offset: t, starting offset_bytes late; strided: t * stride;
    column: row t of a row-major matrix whose rows are row_bytes long; random: a random
    element of a 1 MiB array."""
    t = np.arange(WARP_SIZE, dtype=np.int64)
    if pattern == "contiguous":
        return base + t * element_bytes
    if pattern == "offset":
        return base + offset_bytes + t * element_bytes
    if pattern == "strided":
        return base + t * stride * element_bytes
    if pattern == "column":
        return base + t * row_bytes
    if pattern == "random":
        rng = np.random.default_rng(seed)
        return base + rng.integers(0, 2**20 // element_bytes, WARP_SIZE) * element_bytes
    raise ValueError(f"unknown pattern {pattern!r}")


def warp_efficiency(predicate) -> float:
    """Useful lane slots over issued lane slots for `if predicate: A else: B`, A and B of equal
    cost: a warp whose lanes disagree runs both paths, each with the other lanes masked off."""
    warps = np.asarray(predicate, dtype=bool).reshape(-1, WARP_SIZE)
    taken = warps.sum(axis=1)
    paths = (taken > 0).astype(int) + (taken < WARP_SIZE)
    return warps.size / (WARP_SIZE * paths.sum())


def coarsening_table(elements: int, factors=(1, 2, 4, 8, 16, 32), overhead: int = 6,
                     work: int = 2, resident_threads: int = H200_SMS * 2048) -> list[dict]:
    """Instructions per element when each thread handles `factor` elements: a fixed
    per-thread overhead (index arithmetic, bounds check) is shared by more elements, as long as
    enough threads remain to fill every SM (`resident_threads`, an H200's 132 SMs x 2048)."""
    rows = []
    for factor in factors:
        threads = -(-elements // factor)
        rows.append({"elements per thread": factor, "threads": threads,
                     "instructions per element": overhead / factor + work,
                     "fills the GPU": threads >= resident_threads})
    return rows
