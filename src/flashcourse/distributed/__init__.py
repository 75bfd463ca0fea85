"""Lesson 10's host side: ring attention on P processes of one machine.

- `model.py` (numpy): the splits of a sequence over ranks and the causal work of each rank,
  standard attention, the ring simulated in one process (`simulate_ring`), its schedule and
  the causal plan of each step;
- `rings.py` (torch, in each rank): what one rank computes on one block of keys
  (`block_attention`, `block_gradients`), the merge in log-sum-exp form (`merge_lse`), the
  reference rings (`ring_forward`, `ring_backward`) that the checks compare with and the GPU
  script runs with NCCL, and the log a watched rank keeps of its computes, posted transfers
  and waits (`watch_events`, `encode_events`), which the checks read;
- `ranks.py`: `run_ranks`, P processes joined by torch.distributed (gloo over the loopback
  interface) that run a function on every rank, with a timeout that ends every process it
  started and says why (a deadlock, a crash) instead of hanging the notebook;
- `tries.py`: the jobs each rank runs for the checks and the notebook's try cells.

The ring itself is the student's (lesson 10's exercises). The lesson's figures of the ring are
in `figures/ring.py`. Import from here: `from flashcourse import distributed as ring`.
"""

import importlib

from .model import (
    KINDS,
    NEG_INF,
    block_kind,
    block_state,
    causal_work,
    chunk_lengths,
    chunks_of,
    contiguous_positions,
    plan_work,
    reference_attention,
    ring_schedule,
    simulate_ring,
    sm_scale,
    step_plan,
    zigzag_positions,
)

# ranks and rings need torch (seconds to import): they load on first use, so that a lesson
# importing only the numpy model (the figures of lesson 1 do, through flashcourse.figures)
# never pays for it.
_LAZY = {
    **dict.fromkeys(("COLLECTIVES", "LOOPBACK", "RanksNeverStarted", "free_port",
                     "loopback_interface", "run_ranks"), "ranks"),
    **dict.fromkeys(("EVENT_CODES", "SCALING_RESULTS", "block_attention", "block_gradients",
                     "exchange", "merge_lse", "ring_backward", "ring_forward", "scaling_rows",
                     "shard_chunk_rows", "visible_keys"), "rings"),
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = ["COLLECTIVES", "EVENT_CODES", "KINDS", "LOOPBACK", "NEG_INF",
           "SCALING_RESULTS", "RanksNeverStarted", "block_attention",
           "block_gradients", "block_kind", "block_state", "causal_work", "chunk_lengths",
           "chunks_of", "contiguous_positions", "exchange", "free_port", "loopback_interface",
           "merge_lse", "plan_work", "reference_attention", "ring_backward",
           "ring_forward", "ring_schedule", "run_ranks", "scaling_rows", "shard_chunk_rows",
           "simulate_ring", "sm_scale", "step_plan", "visible_keys", "zigzag_positions"]
