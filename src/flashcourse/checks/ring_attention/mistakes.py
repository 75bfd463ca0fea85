"""Lesson 10's known wrong rings, replayed in one process on the very shards the ranks get
(padded as `distributed/tries.py` pads them), so that a wrong result can be named: the
forward's merges, steps and masks, and the backward's hops and sums.

Each `*_candidates` function returns {mistake: arrays} for a case; a check compares the
gathered answer with each and names the first it equals."""

from __future__ import annotations

import numpy as np
import torch

from ... import distributed as ring
from ...distributed import rings
from ...i18n import N_
from .common import (
    gather,
    padded_shard,
    shard_length,
    split_positions,
)


def _shards(case: dict, world: int) -> list[tuple]:
    n = case["n"]
    return [padded_shard(case, ring.contiguous_positions(n, world, rank), shard_length(n, world))
            for rank in range(world)]


# ---------------------------------------------------------------- the forward


def _merge(o, lse, block_o, block_lse, step):
    return rings.merge_lse(o, lse, block_o, block_lse)


def _added(o, lse, block_o, block_lse, step):
    return o + block_o, torch.logaddexp(lse, block_lse)


def _averaged(o, lse, block_o, block_lse, step):
    return (o * step + block_o) / (step + 1), torch.logaddexp(lse, block_lse)


def _by_max(o, lse, block_o, block_lse, step):
    top = torch.maximum(lse, block_lse)
    return (torch.exp(lse - top)[:, None] * o + torch.exp(block_lse - top)[:, None] * block_o,
            top)


def _lse_of_first(o, lse, block_o, block_lse, step):
    merged_o, merged_lse = rings.merge_lse(o, lse, block_o, block_lse)
    return merged_o, merged_lse if step == 0 else lse


def _simulated_forward(case, world, merge=_merge, steps=None, source=None, causal=None,
                       own_positions=False):
    shards = _shards(case, world)
    causal = case["causal"] if causal is None else causal
    source = source or (lambda rank, step: (rank - step) % world)
    per_rank = []
    for rank, (q, _, _, q_pos, own_k_pos) in enumerate(shards):
        o = torch.zeros_like(q)
        lse = torch.full(q.shape[:1], float("-inf"), dtype=q.dtype)
        for step in range(world if steps is None else steps):
            _, k, v, _, k_pos = shards[source(rank, step)]
            block_o, block_lse = rings.block_attention(
                q, k, v, q_pos, own_k_pos if own_positions else k_pos, causal)
            o, lse = merge(o, lse, block_o, block_lse, step)
        per_rank.append({"o": o.numpy(), "lse": lse.numpy()})
    return gather(per_rank, split_positions(case["n"], world, False), "o", "lse")


# mistake: (what it compares, "o" or "o and lse"; the message, naming the concept and section)
FORWARD_MISTAKES = {
    "no_rescale": ("o", N_("the blocks' outputs are added as they are. Each block's o is "
                           "normalised over that block's keys only: in the merge it counts with "
                           "its share of the total softmax weight, and so does the running o "
                           "({section_merge}).")),
    "plain_average": ("o", N_("the blocks' outputs are averaged with equal weights. A block "
                              "weighs in proportion to its total softmax weight, which its lse "
                              "carries: blocks of few visible keys, or low scores, weigh less "
                              "({section_merge}).")),
    "max_merge": ("o", N_("the merged lse is the larger of the two lse, as if the running max of "
                          "lesson 5 were the log-sum-exp. The merged lse is the log of the summed "
                          "weights of both parts, and each part's share is taken against it "
                          "({section_merge}).")),
    "lse_of_first": ("o and lse", N_("o is right but lse is that of the first block only: the "
                                     "backward needs the log-sum-exp over every key, so lse must "
                                     "be merged at every step too ({section_merge}).")),
    "one_step_short": ("o and lse", N_("the ring stops one step early, so one block is never "
                                       "seen: P ranks take P steps, the first on the rank's own "
                                       "block ({section_schedule}).")),
    "own_block_skipped": ("o", N_("the rank never computes on its own block and twice on the last "
                                  "one: it waits for the arriving block before computing on the "
                                  "one it holds. The block a rank holds is computed while the "
                                  "next one travels ({section_ring}).")),
    "never_swapped": ("o and lse", N_("every step computes on the rank's own block again: the "
                                      "block that arrived must become the one the rank holds "
                                      "({section_ring}).")),
    "positions_unswapped": ("o", N_("the keys and values of the arriving block are used with the "
                                    "positions of the rank's own block, so the causal mask (and "
                                    "the padding) is that of the wrong keys: positions travel "
                                    "with their block ({section_ring}).")),
    "no_mask": ("o", N_("no block is masked: with the causal mask on, the keys after a query must "
                        "stay hidden from it, whoever's block it is ({section_schedule}).")),
}


def forward_candidates(case: dict, world: int) -> dict:
    """{mistake: (o, lse)} of the forward's known wrong rings on this case."""
    variants = {
        "no_rescale": {"merge": _added},
        "plain_average": {"merge": _averaged},
        "max_merge": {"merge": _by_max},
        "lse_of_first": {"merge": _lse_of_first},
        "one_step_short": {"steps": world - 1},
        "own_block_skipped": {"source": lambda r, s: (r - min(s + 1, world - 1)) % world},
        "never_swapped": {"source": lambda r, s: r},
        "positions_unswapped": {"own_positions": True},
        "no_mask": {"causal": False},
    }
    if not case["causal"]:
        del variants["no_mask"]
    return {name: _simulated_forward(case, world, **options)
            for name, options in variants.items()}


# ---------------------------------------------------------------- the backward


def _contributions(case: dict, world: int, delta_of):
    """[rank][block] -> (dq, dk, dv) that rank's queries give that block (padded keys)."""
    shards, positions = _shards(case, world), split_positions(case["n"], world, False)
    table = []
    for rank, (q, _, _, q_pos, _) in enumerate(shards):
        o, lse, do = (torch.from_numpy(np.ascontiguousarray(case[name][positions[rank]]))
                      for name in ("o", "lse", "do"))
        delta = delta_of(do, o)
        table.append([rings.block_gradients(q, k, v, do, lse, delta, q_pos, k_pos,
                                            case["causal"])
                      for _, k, v, _, k_pos in shards])
    return table


def _assembled(case, world, table, dq_of, grads_of):
    """Whole-sequence (dq, dk, dv) from per-rank choices: dq_of(rank), grads_of(rank) ->
    (dk, dv) padded; rows cut to each rank's own tokens, as the job cuts them."""
    positions = split_positions(case["n"], world, False)
    per_rank = []
    for rank in range(world):
        dk, dv = grads_of(rank)
        rows = len(positions[rank])
        per_rank.append({"dq": dq_of(rank).numpy(), "dk": dk[:rows].numpy(),
                         "dv": dv[:rows].numpy()})
    return gather(per_rank, positions, "dq", "dk", "dv")


BACKWARD_MISTAKES = {
    "one_hop_off": N_("dK and dV end one rank away from the rank that owns their keys: count the "
                      "hops of an accumulator, with its block and then home, from the rank that "
                      "first holds it ({section_backward})."),
    "dq_travels": N_("dQ went around the ring with the block: each rank returns a sum of other "
                     "ranks' query rows. dQ belongs to the rank's own queries, which never move: "
                     "it stays home and sums the rank's contributions ({section_backward})."),
    "dq_last_only": N_("dQ holds the contribution of the last block only: each block of keys adds "
                       "its own terms to the dQ of the rank's queries ({section_backward})."),
    "delta_from_do": N_("the row term delta of dS is built from dO alone. Lesson 7's derivation "
                        "pairs the gradient dO with the forward's output O, row by row "
                        "({section_backward})."),
    "dk_last_only": N_("dK of each block holds only the contribution of the last rank it visited: "
                       "the accumulator that arrives with a block carries the earlier ranks' "
                       "terms, and each rank adds its own to it ({section_backward})."),
    "dv_last_only": N_("dV of each block holds only the contribution of the last rank it visited: "
                       "the accumulator that arrives with a block carries the earlier ranks' "
                       "terms, and each rank adds its own to it ({section_backward})."),
}


def backward_candidates(case: dict, world: int) -> dict:
    """{mistake: [(dq, dk, dv), ...]} of the backward's known wrong rings on this case (a
    mistake may have several forms: one hop short or one too far)."""
    right = _contributions(case, world, lambda do, o: (do * o).sum(dim=-1))

    def summed_dq(rank):
        return sum(right[rank][b][0] for b in range(world))

    def accumulated(block):
        return (sum(right[r][block][1] for r in range(world)),
                sum(right[r][block][2] for r in range(world)))

    def last_visitor(block):  # the rank that holds `block` at the last step
        return right[(block - 1) % world][block]

    found = {"one_hop_off": [
        _assembled(case, world, right, summed_dq, lambda r, shift=shift: accumulated(
            (r + shift) % world)) for shift in (1, -1)]}
    rows = {right[r][0][0].shape for r in range(world)}
    if len(rows) == 1:  # only shards of one length can carry each other's dq
        found["dq_travels"] = [_assembled(
            case, world, right,
            lambda r, shift=shift: sum(right[x][(r + shift) % world][0] for x in range(world)),
            lambda r: accumulated(r)) for shift in (0, 1)]
    found["dq_last_only"] = [_assembled(case, world, right,
                                        lambda r: right[r][(r + 1) % world][0], accumulated)]
    wrong_delta = _contributions(case, world, lambda do, o: (do * do).sum(dim=-1))
    found["delta_from_do"] = [_assembled(
        case, world, wrong_delta, lambda r: sum(wrong_delta[r][b][0] for b in range(world)),
        lambda r: (sum(wrong_delta[x][r][1] for x in range(world)),
                   sum(wrong_delta[x][r][2] for x in range(world))))]
    found["dk_last_only"] = [_assembled(case, world, right, summed_dq,
                                        lambda r: (last_visitor(r)[1], accumulated(r)[1]))]
    found["dv_last_only"] = [_assembled(case, world, right, summed_dq,
                                        lambda r: (accumulated(r)[0], last_visitor(r)[2]))]
    return found
