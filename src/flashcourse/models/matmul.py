"""Counting models of a matrix product C = A @ B (lesson 4): the bytes that tiles read from
HBM, the grouped launch order of a tiled kernel, and how many tiles a wave of programs touches.

Shapes follow the kernels: A is (M, K), B is (K, N), C is (M, N); tiles are BM x BK of A,
BK x BN of B and BM x BN of C.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division: how many blocks of size b cover a elements."""
    return -(-a // b)


def tiled_read_bytes(M: int, N: int, K: int, BM: int, BN: int, itemsize: int) -> int:
    """HBM bytes a tiled matmul reads when every tile load goes to HBM (no cache).

    Each of the cdiv(N, BN) column blocks of C re-reads all of A, and each of the cdiv(M, BM)
    row blocks re-reads all of B. When the tiles divide the shape this is
    M*N*K*(1/BN + 1/BM)*itemsize. BK does not appear: it only cuts the same bytes into more
    or fewer loads.
    """
    return (M * K * cdiv(N, BN) + K * N * cdiv(M, BM)) * itemsize


def naive_read_bytes(M: int, N: int, K: int, itemsize: int) -> int:
    """One output element per thread, nothing reused: each output reads a row of A and a
    column of B, 2*M*N*K elements in all."""
    return 2 * M * N * K * itemsize


def matmul_flops(M: int, N: int, K: int) -> int:
    """One multiply and one add per (m, n, k)."""
    return 2 * M * N * K


def grouped_order(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """The output tile (pid_m, pid_n) that program `pid` computes in the grouped launch order.

    Programs walk down a group of `group_m` tile rows first, then move one tile column to the
    right; the last group holds the rows that are left and may be shorter.
    """
    per_group = group_m * num_pid_n
    first_row = (pid // per_group) * group_m
    rows = min(num_pid_m - first_row, group_m)
    return first_row + (pid % per_group) % rows, (pid % per_group) // rows


def launch_order(num_pid_m: int, num_pid_n: int, group_m: int) -> list[tuple[int, int]]:
    """Output tiles in the order programs 0, 1, 2, ... compute them (group_m=1: row-major)."""
    return [grouped_order(pid, num_pid_m, num_pid_n, group_m)
            for pid in range(num_pid_m * num_pid_n)]


def wave_stripes(order: list[tuple[int, int]], wave: int) -> tuple[int, int]:
    """(distinct row stripes of A, distinct column stripes of B) that the first `wave`
    programs read. A stripe is BM rows of A or BN columns of B, all of K: what L2 must hold
    for those programs to reuse each other's loads."""
    first = order[:wave]
    return len({m for m, _ in first}), len({n for _, n in first})


def format_order(num_pid_m: int, num_pid_n: int, group_m: int) -> str:
    """A grid of output tiles, each labelled with the program id that computes it."""
    grid = [[0] * num_pid_n for _ in range(num_pid_m)]
    for pid, (m, n) in enumerate(launch_order(num_pid_m, num_pid_n, group_m)):
        grid[m][n] = pid
    width = len(str(num_pid_m * num_pid_n - 1))
    return "\n".join(" ".join(f"{p:>{width}d}" for p in row) for row in grid)
