"""Lesson 10's known-wrong answers, as data: for each (exercise id, mistake), the textual edits
that turn the lesson's solution cell into that wrong answer (`cells.load(source, edits)`, as
`cells.edit` reads them: (old, new) pairs, each old text found exactly once), and a regular
expression of the message the check must answer with. tests/test_ring_attention.py runs them;
any script can: load the cell with the edits and call `check(exercise_id, answer)`.

Each mistake shows on 2 ranks in the first cases (causal or not), so a check stops after one
start of the ranks; the deadlocks need the ranks' timeout (the tests shorten it)."""

from __future__ import annotations

FORWARD = "ring-attention/ring-forward"
BACKWARD = "ring-attention/ring-backward"
PLAN = "ring-attention/causal-plan"
SPLIT = "ring-attention/zigzag-split"

# Lines of the solutions that the edits replace.
POST_FORWARD = "            requests = dist.batch_isend_irecv(ops)\n"
COMPUTE_FORWARD = "        block_o, block_lse = block_attention(q, k, v, q_pos, k_pos, causal)\n"
MERGE_LSE = "        merged_lse = torch.logaddexp(lse, block_lse)\n"
MERGE_O = ("        o = (torch.exp(lse - merged_lse)[:, None] * o\n"
           "             + torch.exp(block_lse - merged_lse)[:, None] * block_o)\n")
WAIT_FORWARD = ("        if more_to_come:\n"
                "            for request in requests:\n"
                "                request.wait()\n"
                "            k, v, k_pos = arriving\n")
RECEIVE_OPS = "            ops += [dist.P2POp(dist.irecv, t, from_previous) for t in arriving]\n"
POST_KV = ("        if step < world_size - 1:\n"
           "            next_block, block_requests = post([k, v, k_pos])\n")
POST_GRADS = ("        if step > 0:  # the last block's accumulators follow it; this block's "
              "come in\n"
              "            held_grads, grad_requests = post([dk, dv])\n")
ADD_GRADS = ("            wait_all(grad_requests)\n"
             "            block_dk, block_dv = held_grads[0] + block_dk, held_grads[1] + "
             "block_dv\n")
LAST_HOP = ("    (dk, dv), home_requests = post([dk, dv])  # the last hop: home\n"
            "    wait_all(home_requests)\n")
POST_BACKWARD = "        return receiving, dist.batch_isend_irecv(ops)\n"

WRONG = {
    # ---------------------------------------------------------------- exercise 1
    (FORWARD, "deadlock: every rank receives first"): (
        [(POST_FORWARD,
          "            for t in arriving:\n"
          "                dist.recv(t, from_previous)\n"
          "            for t in (k, v, k_pos):\n"
          "                dist.send(t, to_next)\n"
          "            requests = []\n")],
        r"case 1 \(n=16, 2 ranks, not causal, seed=0\): no rank made progress .* They waited "
        r"for each other \(a deadlock\).*See section 4"),
    (FORWARD, "blocking send/recv, odd-even order"): (
        [(POST_FORWARD,
          "            for first in (0, 1):\n"
          "                if rank % 2 == first:\n"
          "                    for t in (k, v, k_pos):\n"
          "                        dist.send(t, to_next)\n"
          "                else:\n"
          "                    for t in arriving:\n"
          "                        dist.recv(t, from_previous)\n"
          "            requests = []\n")],
        r"2 ranks, not causal.*blocking sends or receives.*\(section 4"),
    (FORWARD, "receive posted after the compute"): (
        [(RECEIVE_OPS, ""),
         (COMPUTE_FORWARD, COMPUTE_FORWARD
          + "        if more_to_come:\n"
            "            requests += dist.batch_isend_irecv(\n"
            "                [dist.P2POp(dist.irecv, t, from_previous) for t in arriving])\n")],
        r"2 ranks, not causal.*rank 0, step 0: .*receive of the next block is posted only "
        r"after.*\(section 4"),
    (FORWARD, "transfer posted after the compute"): (
        [(COMPUTE_FORWARD, ""),
         ("        more_to_come = step < world_size - 1\n",
          "        more_to_come = step < world_size - 1\n" + COMPUTE_FORWARD)],
        r"2 ranks, not causal.*step 0: .*starts only after this step's compute.*\(section 4"),
    (FORWARD, "waits for the transfer before computing"): (
        [(POST_FORWARD, POST_FORWARD
          + "            for request in requests:\n"
            "                request.wait()\n")],
        r"2 ranks, not causal.*step 0: .*waits for the transfer before it computes.*"
        r"\(section 4"),
    (FORWARD, "a transfer at the last step too"): (
        [("        more_to_come = step < world_size - 1\n", "        more_to_come = True\n")],
        r"2 ranks, not causal.*posts a transfer at the last step.*\(section 2"),
    (FORWARD, "merged without rescaling"): (
        [(MERGE_O, "        o = o + block_o\n")],
        r"2 ranks, not causal.*added as they are.*\(section 3"),
    (FORWARD, "plain average of the blocks"): (
        [(MERGE_O, "        o = (o * step + block_o) / (step + 1)\n")],
        r"2 ranks, not causal.*averaged with equal weights.*\(section 3"),
    (FORWARD, "max instead of logaddexp"): (
        [(MERGE_LSE, "        merged_lse = torch.maximum(lse, block_lse)\n")],
        r"2 ranks, not causal.*larger of the two lse.*\(section 3"),
    (FORWARD, "lse kept from the first step"): (
        [("        lse = merged_lse\n", "        lse = merged_lse if step == 0 else lse\n")],
        r"2 ranks, not causal.*lse is that of the first block only.*\(section 3"),
    (FORWARD, "one step short"): (
        [("    for step in range(world_size):\n", "    for step in range(world_size - 1):\n")],
        r"2 ranks, not causal.*stops one step early.*\(section 2"),
    (FORWARD, "waits for the next block before computing"): (
        [(COMPUTE_FORWARD,
          "        if more_to_come:\n"
          "            for request in requests:\n"
          "                request.wait()\n"
          "            k, v, k_pos = arriving\n"
          "            requests = []\n" + COMPUTE_FORWARD)],
        r"2 ranks, not causal.*never computes on its own block.*\(section 4"),
    (FORWARD, "arrived block never held"): (
        [("            k, v, k_pos = arriving\n", "            k, v, k_pos = k, v, k_pos\n")],
        r"2 ranks, not causal.*rank's own block again.*\(section 4"),
    (FORWARD, "arrived block held without its positions"): (
        [("            k, v, k_pos = arriving\n", "            k, v = arriving[:2]\n")],
        r"2 ranks, causal.*positions of the rank's own block.*\(section 4"),
    (FORWARD, "causal mask dropped"): (
        [(COMPUTE_FORWARD, COMPUTE_FORWARD.replace("k_pos, causal)", "k_pos, False)"))],
        r"2 ranks, causal.*no block is masked.*\(section 2"),
    # ---------------------------------------------------------------- exercise 4
    (BACKWARD, "deadlock: every rank receives first"): (
        [(POST_BACKWARD,
          "        for t in receiving:\n"
          "            dist.recv(t, from_previous)\n"
          "        for t in sending:\n"
          "            dist.send(t, to_next)\n"
          "        return receiving, []\n")],
        r"case 1 \(n=16, 2 ranks, not causal, seed=30\): no rank made progress .* They "
        r"waited for each other \(a deadlock\).*See section 6"),
    (BACKWARD, "K/V posted after the compute"): (
        [(POST_KV, ""),
         ("        dq = dq + block_dq\n", "        dq = dq + block_dq\n" + POST_KV)],
        r"2 ranks, not causal.*step 0: .*K/V block for the next step is not posted before.*"
        r"\(section 6"),
    (BACKWARD, "waits on dK/dV before the next compute"): (
        [(POST_GRADS, ""),
         (ADD_GRADS, "            held_grads, grad_requests = post([dk, dv])\n" + ADD_GRADS)],
        r"2 ranks, not causal.*after the last step's compute: .*sends dK/dV accumulators "
        r"more than once there.*"
        r"\(section 6"),
    (BACKWARD, "dK, dV one hop short of home"): (
        [(LAST_HOP, "")],
        r"2 ranks, not causal.*one rank away from the rank that owns their keys.*\(section 6"),
    (BACKWARD, "dq sent around the ring instead of kept"): (
        [("            held_grads, grad_requests = post([dk, dv])\n",
          "            held_grads, grad_requests = post([dk, dv, dq])\n"),
         ("        dq = dq + block_dq\n",
          "        dq = block_dq if step == 0 else dq\n"),
         (ADD_GRADS, ADD_GRADS + "            dq = held_grads[2] + block_dq\n")],
        r"2 ranks, not causal.*dQ went around the ring.*\(section 6"),
    (BACKWARD, "delta from dO alone"): (
        [("    delta = (do * o).sum(dim=-1)\n", "    delta = (do * do).sum(dim=-1)\n")],
        r"2 ranks, not causal.*row term delta of dS is built from dO alone.*\(section 6"),
    (BACKWARD, "dq overwritten each step"): (
        [("        dq = dq + block_dq\n", "        dq = block_dq\n")],
        r"2 ranks, not causal.*dQ holds the contribution of the last block only.*"
        r"\(section 6"),
    (BACKWARD, "dK not accumulated"): (
        [("held_grads[0] + block_dk, held_grads[1]", "block_dk, held_grads[1]")],
        r"2 ranks, not causal.*dK of each block holds only the contribution of the last "
        r"rank.*\(section 6"),
    (BACKWARD, "arriving accumulators ignored for dV"): (
        [("held_grads[1] + block_dv\n", "block_dv\n")],
        r"2 ranks, not causal.*dV of each block holds only the contribution of the last "
        r"rank.*\(section 6"),
    # ---------------------------------------------------------------- exercise 2
    (PLAN, "ring turned the wrong way"): (
        [("    source = (rank - step) % world_size", "    source = (rank + step) % world_size")],
        r"count back along the ring.*\(section 2\)"),
    (PLAN, "diagonal block skipped"): (
        [('"diagonal" if same_chunk', '"skip" if same_chunk')],
        r"diagonal block\) is skipped"),
    (PLAN, "diagonal block without the mask"): (
        [("keys_before = kv_chunk < q_chunk", "keys_before = kv_chunk <= q_chunk")],
        r"without the mask"),
    (PLAN, "earlier blocks masked"): (
        [("keys_before = kv_chunk < q_chunk", "keys_before = False"),
         ("same_chunk = kv_chunk == q_chunk", "same_chunk = kv_chunk <= q_chunk")],
        r"the mask would change"),
    (PLAN, "later blocks computed"): (
        [('else "skip"', 'else "diagonal"')], r"the mask empties it"),
    (PLAN, "comparison inverted"): (
        [("keys_before = kv_chunk < q_chunk", "keys_before = kv_chunk > q_chunk")],
        r"the mask empties it|earlier chunk"),
    (PLAN, "skipped pairs left out"): (
        [("            plan.append((q_chunk, kv_chunk, kind))",
          "            if kind != 'skip':\n"
          "                plan.append((q_chunk, kv_chunk, kind))")],
        r"missing from the plan"),
    # ---------------------------------------------------------------- exercise 3
    (SPLIT, "contiguous split"): (
        [("np.array_split(np.arange(n), 2 * world_size)", "np.array_split(np.arange(n), "
                                                          "world_size)"),
         ("    second = chunks[2 * world_size - 1 - rank]", "    second = chunks[rank][:0]")],
        r"this is the contiguous split"),
    (SPLIT, "chunks in the wrong order"): (
        [("np.concatenate([first, second])", "np.concatenate([second, first])")],
        r"wrong order"),
    (SPLIT, "mirror off by one"): (
        [("    second = chunks[2 * world_size - 1 - rank]",
          "    second = chunks[(2 * world_size - rank) % (2 * world_size)]")],
        r"on no rank"),
    (SPLIT, "second chunk from the middle"): (
        [("    second = chunks[2 * world_size - 1 - rank]",
          "    second = chunks[world_size + rank]")],
        r"not its zigzag pair"),
    (SPLIT, "remainder dropped"): (
        [("    chunks = np.array_split(np.arange(n), 2 * world_size)",
          "    chunks = [np.arange(n)[c * (n // (2 * world_size)):(c + 1) * "
          "(n // (2 * world_size))] for c in range(2 * world_size)]")],
        r"on no rank"),
}

# The mistakes whose ranks deadlock: their tests shorten the ranks' timeout.
DEADLOCKS = [key for key in WRONG if key[1].startswith("deadlock")]
