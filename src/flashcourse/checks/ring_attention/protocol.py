"""The order in which a rank computed, posted transfers and waited on them, read from the log
its ring kept (`distributed/rings.py`), and the two protocols the lesson asks for: the
forward's (section 4) and the backward's (section 6).

The log is cut at each block compute: segment s holds what the rank did after compute s - 1
and before compute s; the segment after the last compute comes last. A transfer overlaps a
compute when it was posted in a segment and waited on only after that segment's compute."""

from __future__ import annotations

import numpy as np

from ...distributed import rings
from ...i18n import _
from .. import registry
from .common import SECTION_BACKWARD, SECTION_RING, SECTION_SCHEDULE

COMPUTE, POST, BLOCKING, WAIT = (rings.EVENT_CODES[name]
                                 for name in ("compute", "post", "blocking", "wait"))
SEND, RECEIVE = 0, 1
KV, OTHER = rings.CARRIES["kv"], rings.CARRIES["other"]


class RankLog:
    """One rank's log: its computes, and for every transfer the segment in which it was
    posted, its direction, what it carried, the segment of its first wait, and where in the
    log both happened."""

    def __init__(self, events):
        events = np.asarray(events, dtype=np.int64).reshape(-1, 4)
        computes = events[:, 0] == COMPUTE
        self.blocking = bool((events[:, 0] == BLOCKING).any())
        self.computes = int(computes.sum())
        segment = np.cumsum(computes) - computes  # computes before each event
        self.posted, self.waited = {}, {}  # transfer -> (segment, ...), (segment, index)
        for index, ((code, transfer, direction, carried), where) in enumerate(
                zip(events, segment, strict=True)):
            if code == POST:
                self.posted[int(transfer)] = (int(where), int(direction), int(carried), index)
            elif code == WAIT:
                self.waited.setdefault(int(transfer), (int(where), index))

    def transfers(self, segment: int, direction: int | None = None, carried=None) -> list:
        return [t for t, (where, way, what, _) in self.posted.items() if where == segment
                and (direction is None or way == direction)
                and (carried is None or what == carried)]

    def waited_in_segment(self, segment: int, carried=None) -> bool:
        """Whether a transfer posted in `segment` was waited on before its compute."""
        return any(self.waited.get(t, (None,))[0] == segment
                   for t in self.transfers(segment, None, carried))

    def crowded_last_segment(self, world: int, carried) -> bool:
        """Whether the sends of this kind after the last compute are more than one hop's
        share of them all: a hop that could have travelled during the last compute."""
        sends = [t for t, (_, way, what, _) in self.posted.items()
                 if way == SEND and what == carried]
        return len(self.transfers(world, SEND, carried)) * world > len(sends)


def _segment_name(segment: int, world: int) -> str:
    if segment == world:
        return _("after the last step's compute")
    return _("before step {segment}'s compute").format(
             segment=segment) if segment else _("before the first compute")


def _common(log: RankLog, world: int, where: str, section: str, what: str) -> None:
    if log.blocking:
        raise registry.WrongAnswer(
            _("{where}: the result is right, but the ring uses blocking sends or receives: a "
              "blocked rank computes nothing while its block travels, so no transfer overlaps a "
              "compute. Post the transfers without blocking and wait on them later "
              "({section}).").format(where=where, section=_(section)))
    if log.computes != world:
        raise registry.WrongAnswer(
            _("{where}: the result is right, but {what} ran {computes} times on this rank instead "
              "of {world}: once per ring step, on the block the rank holds ({section}).").format(
              where=where, what=what, computes=log.computes, world=world, section=_(section)))


def check_forward(events, world: int, where: str) -> None:
    """Each step but the last posts the send of the held block and the receive of the next
    before its compute, and waits on neither before that compute; the last step posts none."""
    log = RankLog(events)
    _common(log, world, where, SECTION_RING, "block_attention")
    for step in range(world - 1):
        at = _("{where}, step {step}").format(where=where, step=step)
        sends, receives = log.transfers(step, SEND), log.transfers(step, RECEIVE)
        if not sends and not receives:
            raise registry.WrongAnswer(
                _("{at}: the result is right, but the transfer of the next block starts only "
                  "after this step's compute, so the block travels while the rank is idle. Post "
                  "it before computing on the block you hold ({section_ring}).").format(at=at,
                  section_ring=_(SECTION_RING)))
        if not receives:
            raise registry.WrongAnswer(
                _("{at}: the result is right, but the receive of the next block is posted only "
                  "after this step's compute: until a rank posts it, the block cannot arrive, so "
                  "nothing overlaps. Post the receive together with the send, before the compute "
                  "({section_ring}).").format(at=at, section_ring=_(SECTION_RING)))
        if not sends:
            raise registry.WrongAnswer(
                _("{at}: the result is right, but the send of the block this rank holds is posted "
                  "only after this step's compute, so the neighbour's next block cannot travel "
                  "during it. Post the send before the compute ({section_ring}).").format(at=at,
                  section_ring=_(SECTION_RING)))
        if log.waited_in_segment(step):
            raise registry.WrongAnswer(
                _("{at}: the result is right, but the rank waits for the transfer before it "
                  "computes, so the block travels while the rank is idle. Compute on the block "
                  "you hold first, then wait ({section_ring}).").format(at=at,
                  section_ring=_(SECTION_RING)))
    late = log.transfers(world - 1) + log.transfers(world)
    if late:
        raise registry.WrongAnswer(
            _("{where}: the result is right, but the rank posts a transfer at the last step, "
              "after every block has arrived: P steps need P - 1 transfers "
              "({section_schedule}).").format(where=where, section_schedule=_(SECTION_SCHEDULE)))


def check_backward(events, world: int, where: str) -> None:
    """Each step but the last posts the K/V transfer before its compute and does not wait on
    it before; no transfer of gradients (dK, dV) posted before a compute is waited on before
    that compute, and after the last compute only the last hop home is posted (one hop's
    share of the gradients' sends)."""
    log = RankLog(events)
    _common(log, world, where, SECTION_BACKWARD, "block_gradients")
    for step in range(world - 1):
        at = _("{where}, step {step}").format(where=where, step=step)
        if not log.transfers(step, SEND, KV) or not log.transfers(step, RECEIVE):
            raise registry.WrongAnswer(
                _("{at}: the result is right, but the K/V block for the next step is not posted "
                  "before this step's compute (send and receive), so it travels while the rank is "
                  "idle. Post it first, as in the forward ({section_backward}).").format(at=at,
                  section_backward=_(SECTION_BACKWARD)))
        if log.waited_in_segment(step, KV):
            raise registry.WrongAnswer(
                _("{at}: the result is right, but the rank waits for the next K/V block before "
                  "computing on the one it holds, so nothing overlaps. Wait only after the "
                  "compute ({section_backward}).").format(at=at,
                  section_backward=_(SECTION_BACKWARD)))
    advice = (_("Let them travel during the next block's compute, and add the rank's share to "
                "them once they have arrived ({section_backward}).").format(
                section_backward=_(SECTION_BACKWARD)))
    for step in range(world):
        if log.waited_in_segment(step, OTHER):
            raise registry.WrongAnswer(
                _("{where}, {segment}: the result is right, but the rank posts a dK/dV "
                  "transfer and waits for it at once, before the compute that follows, so the "
                  "accumulators' hop overlaps nothing. {advice}").format(where=where,
                  segment=_segment_name(step, world), advice=advice))
    if log.crowded_last_segment(world, OTHER):
        raise registry.WrongAnswer(
            _("{where}, after the last step's compute: the result is right, but the rank sends "
              "dK/dV accumulators more than once there, so a hop that could have travelled during "
              "the last compute overlaps nothing. Post that hop before the last compute and add "
              "the rank's share once it has arrived: only the hop home comes after it "
              "({section_backward}).").format(where=where, section_backward=_(SECTION_BACKWARD)))
