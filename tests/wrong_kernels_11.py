"""Known-wrong versions of lesson 11's solution, as data: {mistake: (edits, message regex)}.

Each edit is an (old, new) or (old, new, count) pair for `authoring.cells.load` on the solution
cells (imports, block map, forward, backward, function); the regex must match the message the
check gives. Forward mistakes are caught by capstone/forward, backward ones by
capstone/backward (BACKWARD lists them).
"""

import functools
from pathlib import Path

SCORE_ALIBI = "        z = z + slope2 * (k_pos - q_pos).to(tl.float32)\n"
BACKWARD_SCALARS = "docs, slopes, scalars, sm_scale, switches = _scalars(spec, q)"

WRONG = {
    "ALiBi sign flipped": (
        [("(k_pos - q_pos).to(tl.float32)", "(q_pos - k_pos).to(tl.float32)")],
        r"ALiBi bias has the wrong sign"),
    "ALiBi added before the soft-cap": (
        [("    t = z\n    if SOFTCAP:", "    t = z\n    if ALIBI:\n" + SCORE_ALIBI +
          "    if SOFTCAP:"),
         ("        z = cap2 * t\n    if ALIBI:\n" + SCORE_ALIBI, "        z = cap2 * t\n")],
        r"added before the soft-cap"),
    "window off by one": (
        [("keep = keep & (k_pos > q_pos - window)", "keep = keep & (k_pos >= q_pos - window)")],
        r"sliding window is off by one"),
    "partial blocks walked unmasked": (
        [('z = tl.where(keep, z, float("-inf"))', "z = z", 2)],
        r"PARTIAL key blocks are walked like FULL ones"),
    "no rescale of the running state": (
        [("alpha = tl.exp2(m_i - m_shift)", "alpha = tl.exp2(m_shift - m_shift)")],
        r"not rescaled when the running max grows"),
    "fully masked rows divide by zero": (
        [("out = acc / tl.where(seen, l_i, 1.0)[:, None]", "out = acc / l_i[:, None]")],
        r"Rows that see no key at all .* come out NaN"),
    "no safe max": (
        [('m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_shift = m_new")],
        r"Rows that do see keys come out NaN"),
    "documents ignored across a block boundary": (
        [("full = full & one_doc", "full = full & ~doc_empty")],
        r"Documents are ignored across a block boundary"),
    "empty key blocks visited": (
        [("empty = empty | doc_empty", "empty = empty")],
        r"your kernel loads key blocks the mask leaves empty"),
    "soft-cap gradient without 1 - tanh^2": (
        [("ds_t = ds_t * (1.0 - t_t * t_t)", "ds_t = ds_t"), ("ds = ds * (1.0 - t * t)",
                                                            "ds = ds")],
        r"gradient does not pass through the soft-cap"),
    "logsumexp without the running max": (
        [("(m_i + tl.log2(tl.where(seen, l_i, 1.0)))", "tl.log2(tl.where(seen, l_i, 1.0))")],
        r"logsumexp leaves out the running max"),
    "dV from unnormalised P": (
        [("dv += tl.dot(p_t.to(do.dtype), do)", "dv += tl.dot(tl.exp2(z_t).to(do.dtype), do)")],
        r"dV is built from weights that were never normalised"),
    "delta from dO alone": (
        [("delta = (o.float() * do.float()).sum(-1)", "delta = do.float().sum(-1)")],
        r"computed from dO alone"),
    "dK without sm_scale": (
        [("dk = dk * sm_scale", "dk = dk")], r"dK lacks the softmax scale"),
    "backward without the ALiBi bias": (
        [(BACKWARD_SCALARS, BACKWARD_SCALARS + '\n        switches["ALIBI"] = False')],
        r"rebuilds the scores without the ALiBi bias"),
}
BACKWARD = ("soft-cap gradient without 1 - tanh^2", "logsumexp without the running max",
            "dV from unnormalised P", "delta from dO alone", "dK without sm_scale",
            "backward without the ALiBi bias")

# The same mistakes by the check that catches them, for gpu/check_known_wrong.py (messages are
# regular expressions there after "re:"), with the solution they edit.
FORWARD_ID, BACKWARD_ID = "capstone/forward", "capstone/backward"
TABLES = {exercise_id: {mistake: (edits, "re:" + message)
                        for mistake, (edits, message) in WRONG.items()
                        if (mistake in BACKWARD) == (exercise_id == BACKWARD_ID)}
          for exercise_id in (FORWARD_ID, BACKWARD_ID)}
CELLS = ("imports", "exercise-block-map", "exercise-forward", "exercise-backward",
         "exercise-function")


@functools.cache
def _solution_source() -> str:
    from flashcourse.authoring import cells

    lesson = Path(__file__).resolve().parents[1] / "lessons" / "11-capstone.qmd"
    return "\n\n\n".join(cells.solution_source(lesson, cell) for cell in CELLS)


def solution_module(edits=()):
    """The capstone's solution cells with `edits` applied, loaded as a module. Call it after
    `runtime.setup()` (the interpreter or the GPU is chosen before any kernel exists)."""
    from flashcourse.authoring import cells

    return cells.load(_solution_source(), edits, prelude="")


def answer(edits=(), exercise_id: str = FORWARD_ID):
    """The attention function of `solution_module(edits)`, for either check."""
    return solution_module(edits).capstone_attention
