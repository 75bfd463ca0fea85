"""What a class got wrong, counted from the result records alone (grader side, after every
sandbox has ended, or in `grade merge`): per lesson the pass rate, the histogram of automatic
points and the time grading took; per item how many passed, were wrong, blank, not run or
otherwise failed; the mistakes the checks diagnosed ("Likely mistake: ..."), the parts of the
questions answered wrongly and the veto statements judged wrongly, each with the submissions
that made it. report.py writes them (progress.html, class.csv).

Everything here is read from the checks' messages, which the grader's replay wrote. A message
may quote a student's answer (a question's wrong value), so text a student typed can at most
mislabel that student's own entry in a count; it never changes a verdict, nor anyone else's
entry. No lesson is named here: lessons and items come from the records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .collect import BACKUP_REFUSAL
from .submission import Submission

DIAGNOSIS_MARK = "Likely mistake: "
# "key = <the answer, cut to 60 characters> is not right" (registry.grade_answers)
WRONG_PART = re.compile(r"(?:^|[:.)] )([A-Za-z_]\w*) = (?:(?! is not right).){1,100}? "
                        r"is not right")
# "key: your judgement of this statement is not right" (registry.misconceptions)
WRONG_STATEMENT = re.compile(r"(?:^|[:.] )([A-Za-z_]\w*): your judgement of this statement "
                             r"is not right")
OUTCOMES = ("pass", "wrong", "blank", "not run", "other")  # the columns of an item's counts
MISTAKE_CHARS = 200
POINT_BINS = 11  # one bar per whole point, 0 to 10


@dataclass
class ItemStats:
    id: str
    title: str
    kind: str  # "code", "question" or "veto"
    points: float
    outcomes: dict[str, list[str]] = field(
        default_factory=lambda: {outcome: [] for outcome in OUTCOMES})  # outcome -> labels
    mistakes: dict[str, list[str]] = field(default_factory=dict)  # diagnosis -> labels
    undiagnosed: list[str] = field(default_factory=list)  # wrong, no mistake named
    parts: dict[str, list[str]] = field(default_factory=dict)  # question key or statement


@dataclass
class LessonStats:
    lesson: str
    title: str
    labels: list[str] = field(default_factory=list)
    passed: int = 0
    histogram: list[int] = field(default_factory=lambda: [0] * POINT_BINS)
    items: dict[str, ItemStats] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.labels)


def outcome_of(item) -> str:
    """Which column of the counts an item's status falls in (a veto judged wrongly is wrong)."""
    if item.status in ("pass", "wrong", "blank", "not run"):
        return item.status
    return "wrong" if item.status == "veto" else "other"


def diagnosis(message: str, mark: str = DIAGNOSIS_MARK) -> str:
    """The mistake a check named ("Likely mistake: X. Re-read ..."): its first sentence, without
    the section it points to; "" when the message names none. The last mark counts: checks put
    their diagnosis after the case's error. `mark`: the mark in the message's language."""
    at = message.rfind(mark)
    if at < 0:
        return ""
    text = message[at + len(mark):].split(" Re-read ")[0]
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    sentence = re.sub(r"\s*\(section .*$", "", sentence).rstrip(" .")
    return sentence[:MISTAKE_CHARS] or ""


def wrong_parts(item) -> list[str]:
    """The keys a question's or the veto statements' message says were answered wrongly."""
    if item.kind == "veto" and item.status == "veto":
        return list(dict.fromkeys(WRONG_STATEMENT.findall(item.message)))
    if item.kind == "question" and item.status == "wrong":
        return list(dict.fromkeys(WRONG_PART.findall(item.message)))
    return []


def counted(sub: Submission) -> bool:
    """Whether a submission is an attempt at a lesson: matched, and not a `./course reset`
    backup (which has its REFUSED line elsewhere)."""
    return bool(sub.lesson) and f"refused: {BACKUP_REFUSAL}" not in sub.problems


def class_stats(subs: list[Submission]) -> list[LessonStats]:
    """One LessonStats per lesson the submissions matched, in course order (file names sort
    so), items in each lesson's scorecard order."""
    lessons: dict[str, LessonStats] = {}
    for sub in subs:
        if not counted(sub):
            continue
        stats = lessons.setdefault(sub.lesson, LessonStats(sub.lesson, sub.lesson_title))
        stats.labels.append(sub.label)
        stats.passed += sub.passed
        stats.histogram[min(max(int(sub.earned), 0), POINT_BINS - 1)] += 1
        stats.seconds.append(sub.seconds)
        for item in sub.exercises:
            entry = stats.items.setdefault(item.id, ItemStats(item.id, item.title, item.kind,
                                                              item.points))
            outcome = outcome_of(item)
            entry.outcomes[outcome].append(sub.label)
            if outcome == "wrong" and item.kind == "code":
                named = diagnosis(item.message)
                if named:
                    entry.mistakes.setdefault(named, []).append(sub.label)
                else:
                    entry.undiagnosed.append(sub.label)
            for part in wrong_parts(item):
                entry.parts.setdefault(part, []).append(sub.label)
    return [lessons[name] for name in sorted(lessons)]


def by_count(found: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    """(what, labels), most common first, then by name: the order every report lists them."""
    return sorted(found.items(), key=lambda pair: (-len(pair[1]), pair[0]))
