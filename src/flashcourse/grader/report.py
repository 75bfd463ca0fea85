"""Reports of `python -m flashcourse grade`: the printed scorecard, results.csv, junit.xml,
a standalone progress.html, students.csv, open-answers.csv, results.json and the executed
notebooks (executed/).

Written answers (Submission.written) are worth points on top of the automatic ones, scored by
the instructor: open-answers.csv lists one row per submission and open question, with the
question's points and rubric and a blank `score` to fill in; `grade --scores FILE` folds the
filled file back (grader/written.py). Until every written answer of a submission is scored, its
total says it is provisional in every report. The pass line stays on the automatic points.

A submission's label is its path relative to the folder given (collect.collect). Whose it is
follows grade's --student-from rule (student_of): `folder` (the default), the first folder of
its label (alice/01-gpu-flash.ipynb is alice's); `file`, the part of its file name before `__`
(alice__01-gpu-flash.ipynb, as `./course submit` names it); `metadata`, the notebook's
`metadata.flashcourse.student`. A notebook the rule finds no student for belongs to nobody: it
has a row of its own in students.csv and progress.html, named by its label, never merged with
a student of the same name.

Every text that reaches a report may hold any character: the CSV files write control
characters (newlines too) as escapes and quote a leading formula character; XML and HTML write
what XML 1.0 forbids (controls, lone surrogates, U+FFFE, U+FFFF) as visible escapes.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import os
import re
import shutil
import stat
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from .. import i18n
from ..i18n import N_, _
from . import analytics
from .collect import BACKUP_REFUSAL, printable, read_regular
from .score import read_untrusted
from .submission import PASS, Submission, as_dict

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
EXECUTED_NAME_CHARS = 150  # a longer name ends in a hash (file names stop at 255 bytes)
# What XML 1.0 forbids even as a reference (controls, lone surrogates, U+FFFE, U+FFFF), what
# HTML calls a parse error (C1 controls, noncharacters), and CR, which a parser reads as LF.
MARKUP_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # not text: JSON readers differ on them


def csv_safe(value) -> str:
    """A CSV cell that a spreadsheet shows as text: control characters escaped, and a leading
    formula character quoted."""
    text = printable(str(value), 10_000)
    return "'" + text if text.startswith(FORMULA_START) else text


def markup_safe(value) -> str:
    """`value` as text that XML and HTML can hold: every character they forbid (see
    MARKUP_UNSAFE) written as a visible escape such as \\x07 or \\ud800."""
    return MARKUP_UNSAFE.sub(lambda match: repr(match.group())[1:-1], str(value))


def html_text(value) -> str:
    return html.escape(markup_safe(value))


def json_safe(value):
    """`value` (JSON data) with every lone surrogate in its strings written as an escape such
    as \\ud800: a strict reader would refuse it, a lenient one pair two of them into one."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub(lambda match: repr(match.group())[1:-1], value)
    if isinstance(value, dict):
        return {json_safe(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def executed_name(sub: Submission) -> str:
    """The file name of a submission's executed copy under executed/, different for every
    label: `/` is written `__`, and `_` and every character outside [A-Za-z0-9.-] as `_` and its
    code (`_5f`, `_u00e9`), so alice/x.ipynb and alice__x.ipynb get different names. A leading
    `.` or `-` is escaped too: no copy is hidden or reads like an option."""
    label = sub.label
    # a label not ending in .ipynb gets a trailing `_`, which no escape ends with
    stem, marker = (label[:-6], "") if label.endswith(".ipynb") and len(label) > 6 \
        else (label, "_")
    name = "".join(_name_part(char) for char in stem) + marker
    if name[0] in ".-":
        name = _name_part(name[0], escape=True) + name[1:]
    if len(name) > EXECUTED_NAME_CHARS:  # longer than any name written in full
        digest = hashlib.sha256(label.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        name = f"{name[:EXECUTED_NAME_CHARS - 16]}-{digest}"
    return name + ".ipynb"


def _name_part(char: str, escape: bool = False) -> str:
    if char == "/":
        return "__"
    if char.isascii() and (char.isalnum() or char in ".-") and not escape:
        return char
    code = ord(char)
    return (f"_{code:02x}" if code < 0x100 else f"_u{code:04x}" if code < 0x10000
            else f"_U{code:08x}")


# an exercise's outcome as a submission's own report says it (the class's pages: as is)
ITEM_STATES = {"pass": N_("pass"), "ok": N_("ok"), "VETO": N_("VETO"), "wrong": N_("wrong"),
               "blank": N_("blank"), "not run": N_("not run"), "error": N_("error"),
               "refused": N_("refused"), "timeout": N_("timeout"), "veto": N_("veto")}


def state_text(state: str) -> str:
    return _(ITEM_STATES[state]) if state in ITEM_STATES else state


def shown_message(item) -> str:
    """The item's message in the language messages are shown in now: the submission's own
    (`message_shown`) while its report is written in it, else the English one."""
    if item.message_shown and i18n.current() != i18n.SOURCE_LANGUAGE:
        return item.message_shown
    return item.message


def _item_line(item) -> str:
    title = _(item.title)
    if item.kind == "veto":
        state = {"pass": "ok", "veto": "VETO"}.get(item.status, item.status)
        line = f"    [veto] {title}: {state_text(state)}"
    else:
        mark = "\u2713" if item.status == "pass" else "\u2717"
        kind = _("exercise") if item.kind == "code" else _("self-check")
        line = f"    {mark} {item.earned:g}/{item.points:g}  {title} ({kind})"
        if item.status != "pass":
            line += f": {state_text(item.status)}"
    if item.status not in ("pass", "veto") and item.message:  # vetoes get their own line
        line += f" - {shown_message(item)}"
    if hints_text(item):
        line += f" [{hints_text(item)}]"
    return line


def hints_text(item) -> str:
    """"hints opened: 2 of 3" when the run showed any of the item's hint levels, else ""."""
    if not item.hints_opened or not item.hints_total:
        return ""
    opened = item.hints_opened
    text = _("hints opened: {opened} of {total}").format(opened=len(opened),
                                                        total=item.hints_total)
    if opened != list(range(1, len(opened) + 1)):  # not the first ones in order
        levels = ", ".join(str(level) for level in opened)
        text += (_(" (levels {levels})") if len(opened) > 1 else _(" (level {levels})")).format(
            levels=levels)
    return text


def submission_text(sub: Submission) -> str:
    return "\n".join(printable(line, 4000) for line in _submission_lines(sub))


def _submission_lines(sub: Submission) -> list[str]:
    head = f"{sub.label}: {sub.status}"
    if sub.sandbox != "bwrap":
        head += "  (UNSANDBOXED)"
    if sub.lesson:
        head += f"  [{sub.lesson_title}]"
    lines = [head]
    for item in sub.exercises:
        lines.append(_item_line(item))
    if sub.exercises:
        lines.append(f"    Total: {total_text(sub)} ({pass_text(sub)})")
    for veto in sub.vetoes:
        lines.append(f"    VETO misconception: {veto}")
    for change in sub.tampering:
        lines.append(f"    TAMPERED: {change}")
    for problem in sub.problems:
        lines.append(f"    PROBLEM: {problem}")
    for note in sub.notes:
        lines.append(f"    note: {note}")
    for item in sub.written:
        shown = " ".join(item.answer.split())
        lines.append(f"    open answer {item.id} [{_written_score(item)}]: "
                     + (shown[:300] if item.answered else "(not answered)"))
    if not sub.written:  # no lesson source named its points: the texts alone
        for cell_id, text in sub.open_answers.items():
            shown = " ".join(text.split())
            lines.append(f"    open answer {cell_id}: "
                         + (shown[:300] if answered(text) else "(not answered)"))
    return lines


OPEN_PROMPT = "write it here."


def answered(text: str, prompt: str = "") -> bool:
    """False for an open-answer cell the student left as the exercise gave it (`prompt`, the
    exercise's text of that cell, when known), or empty."""
    words = " ".join(text.split())
    if prompt and words == " ".join(prompt.split()):
        return False
    return bool(words) and not (words.startswith("**Your answer to")
                                and words.endswith(OPEN_PROMPT))


def _written_score(item) -> str:
    return (_("not scored yet, {points:g} points").format(points=item.points)
            if item.score is None else f"{item.score:g}/{item.points:g}")


def total_text(sub: Submission) -> str:
    """A submission's total: its automatic points alone while any written answer is not scored
    yet (saying so: provisional), else automatic and written points together."""
    automatic = f"{sub.earned:g}/{sub.total:g}"
    if not sub.written:
        return automatic
    written = f"{sub.written_earned:g}/{sub.written_total:g}"
    if sub.unscored == len(sub.written):
        return _("{automatic} automatic, written {written} not scored yet (provisional)").format(
            automatic=automatic, written=written)
    if sub.provisional:
        return _("{automatic} automatic, written {written}, {unscored} of {count} not scored "
                 "yet (provisional)").format(automatic=automatic, written=written,
                                             unscored=sub.unscored, count=len(sub.written))
    return f"{sub.earned + sub.written_earned:g}/{sub.total + sub.written_total:g}"


def pass_text(sub: Submission) -> str:
    """The pass line, which is on the automatic points whatever the written answers score."""
    if not sub.written:
        return _("pass line {pass_line:g}").format(pass_line=sub.pass_line)
    return _("pass line {pass_line:g} of the {total:g} automatic points").format(
        pass_line=sub.pass_line, total=sub.total)


def scorecard_text(subs: list[Submission]) -> str:
    text = "\n\n".join(submission_text(s) for s in subs)
    claims = claims_lines(subs)
    if claims:
        text += "\n\nTO CHECK: one student, several submissions of a lesson\n" + "\n".join(
            f"    {line}" for line in claims)
    return text


def _exercise_columns(subs: list[Submission]) -> list[str]:
    columns: list[str] = []
    for sub in subs:
        for item in sub.exercises:
            if item.id not in columns:
                columns.append(item.id)
    return columns


def write_csv(subs: list[Submission], path: Path) -> None:
    columns = _exercise_columns(subs)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([csv_safe(v) for v in [
            "submission", "lesson", "status", "passed", "points", "out_of", "pass_line",
            "written_points", "written_max", "provisional",
            *columns, "vetoes", "tampering", "problems", "sandbox", "seconds"]])
        for sub in subs:
            by_id = {item.id: item for item in sub.exercises}
            cells = []
            for column in columns:
                item = by_id.get(column)
                cells.append("" if item is None else
                             item.status if item.kind == "veto" else f"{item.earned:g}")
            # `points` stays the automatic points, on which the pass line is
            written = [f"{sub.written_earned:g}", f"{sub.written_total:g}",
                       int(sub.provisional)] if sub.written else ["", "", ""]
            writer.writerow([csv_safe(v) for v in [
                sub.label, sub.lesson, sub.status, int(sub.passed), f"{sub.earned:g}",
                f"{sub.total:g}", f"{sub.pass_line:g}", *written, *cells,
                " | ".join(sub.vetoes),
                " | ".join(sub.tampering), " | ".join(sub.problems), sub.sandbox,
                sub.seconds]])


def write_junit(subs: list[Submission], path: Path) -> None:
    suites = ET.Element("testsuites", name="flashcourse grade")
    for sub in subs:
        suite = ET.SubElement(suites, "testsuite", name=sub.label, time=f"{sub.seconds:.2f}")
        cases = []
        integrity = ET.Element("testcase", classname=sub.label, name="integrity")
        if sub.tampering or sub.problems:
            text = "\n".join([*(f"TAMPERED: {t}" for t in sub.tampering), *sub.problems])
            failure = ET.SubElement(integrity, "failure", message=sub.status,
                                    type=sub.status)
            failure.text = text
        cases.append(integrity)
        for item in sub.exercises:
            case = ET.Element("testcase", classname=sub.label, name=item.id)
            if item.status != "pass":
                failure = ET.SubElement(case, "failure", message=f"{item.status}: "
                                        f"{item.message}"[:500], type=item.status)
                failure.text = item.message
            cases.append(case)
        for item in sub.written:  # scored by the instructor: never a failure, at most skipped
            case = ET.Element("testcase", classname=sub.label, name=f"{item.id} (written)")
            if item.score is None:
                ET.SubElement(case, "skipped", message=f"not scored yet ({item.points:g} "
                                                       "points)")
            else:
                ET.SubElement(case, "system-out").text = f"{_written_score(item)}: " + (
                    item.answer if item.answered else "not answered")
            cases.append(case)
        total = ET.Element("testcase", classname=sub.label, name="total")
        if not sub.passed:
            ET.SubElement(total, "failure", type=sub.status,
                          message=f"{sub.status}: {total_text(sub)} ({pass_text(sub)})")
        elif sub.written:
            ET.SubElement(total, "system-out").text = f"{total_text(sub)} ({pass_text(sub)})"
        cases.append(total)
        if sub.written:
            properties = ET.SubElement(suite, "properties")
            for name, value in (("total", total_text(sub)), ("written_points",
                                f"{sub.written_earned:g}"), ("written_max",
                                f"{sub.written_total:g}"), ("provisional",
                                str(sub.provisional).lower())):
                ET.SubElement(properties, "property", name=name, value=value)
        suite.extend(cases)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    for element in suites.iter():  # every attribute and text, whatever its origin
        if element.text:
            element.text = markup_safe(element.text)
        for key, value in list(element.attrib.items()):
            element.set(key, markup_safe(value))
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.PASS { background: #d9f2d9; } .FAIL { background: #fde2c8; }
.TAMPERED, .CRASHED, .MALFORMED, .UNMATCHED, .TIMEOUT { background: #f8c9c9; }
.pass { color: #17692b; } .bad { color: #a11; }
.bar { background: #eee; width: 8rem; height: .8rem; display: inline-block; }
.bar span { display: block; height: 100%; background: #4a8; }
small { color: #555; }
.analytics section { margin-bottom: 1.5rem; } .analytics svg text { font-size: 10px; }
.analytics svg .bin { fill: #4a8; } .findings li { margin: .2rem 0; }
details summary { cursor: pointer; } .none { color: #999; }
pre { white-space: pre-wrap; max-width: 60rem; margin: .2rem 0; }
.submission { border-top: 1px solid #ddd; margin-top: .4rem; }
"""


# ---------------------------------------------------------------- one row per student


STUDENT_RULES = ("folder", "file", "metadata")  # grade --student-from


def student_of(sub: Submission) -> str | None:
    """Whose submission this is, by its `student_from` rule: `folder`, the first folder of its
    label (alice/01-gpu-flash.ipynb -> alice; None for a notebook directly at the top); `file`,
    the part of its file name before `__` (alice__01-gpu-flash.ipynb -> alice); `metadata`,
    the student its notebook's metadata names. None when the rule finds nobody."""
    if sub.student_from == "folder":
        first, sep, _rest = sub.label.partition("/")
        return first if sep else None
    if sub.student_from == "file":
        student, sep, _rest = sub.label.rpartition("/")[2].partition("__")
        return student if sep and student else None
    if sub.student_from == "metadata":
        return sub.metadata_student or None
    raise ValueError(f"unknown student rule {sub.student_from!r}; the rules are: "
                     + ", ".join(STUDENT_RULES))


Row = tuple[str, str]  # ("student", the student) or ("file", label of a nobody's notebook)


def row_of(sub: Submission) -> Row:
    """The row of students.csv and progress.html a submission is in: its student's, or for a
    notebook that is nobody's its own, never a student's of the same name."""
    student = student_of(sub)
    return ("file", sub.label) if student is None else ("student", student)


def by_student(subs: list[Submission]) -> tuple[dict[Row, dict[str, list[Submission]]],
                                                list[str]]:
    """{row: {lesson: [submissions]}} in label order, and the lessons in course order. A backup
    of `./course reset` is no attempt: it has its REFUSED line elsewhere, no place here."""
    table: dict[Row, dict[str, list[Submission]]] = {}
    for sub in subs:
        if f"refused: {BACKUP_REFUSAL}" in sub.problems:
            continue
        table.setdefault(row_of(sub), {}).setdefault(sub.lesson or "?", []).append(sub)
    lessons = sorted({lesson for row in table.values() for lesson in row},
                     key=lambda name: (name == "?", name))
    return table, lessons


def _lesson_summary(subs: list[Submission]) -> str:
    return " + ".join(f"{s.status} {total_text(s)}" for s in subs)


def lesson_passed(group: list[Submission]) -> bool:
    """A student's lesson counts as passed when one of its submissions passed: with
    `--student-from file` or `metadata` the id is the notebook's own claim, so another's
    wrong notebook that claims the student must not take the lesson away (it is flagged:
    several_claims)."""
    return any(s.passed for s in group)


def several_claims(subs: list[Submission]) -> dict[tuple[str, str], list[str]]:
    """(student, lesson) -> the labels of the submissions of that lesson that are that
    student's by the run's rule, for each student with more than one: for the instructor to
    check which is theirs (students.csv's to_check, progress.html, the scorecard)."""
    table, _lessons = by_student(subs)
    return {(student, lesson): [s.label for s in group]
            for (kind, student), row in table.items() if kind == "student"
            for lesson, group in row.items() if len(group) > 1}


def claims_text(student: str, lesson: str, labels: list[str]) -> str:
    return (f"{len(labels)} submissions of {lesson} are {student}'s by the "
            f"--student-from rule ({', '.join(labels)}): the best counts; check which is "
            f"{student}'s own")


def claims_lines(subs: list[Submission]) -> list[str]:
    """One line per student and lesson with several submissions (several_claims)."""
    return [printable(claims_text(student, lesson, labels), 1000)
            for (student, lesson), labels in several_claims(subs).items()]


def write_students_csv(subs: list[Submission], path: Path) -> None:
    table, lessons = by_student(subs)
    claims = several_claims(subs)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([csv_safe(v) for v in ["student", "submissions", "lessons_passed",
                                               *lessons, "to_check"]])
        for (kind, student), row in table.items():
            passed = sum(lesson_passed(row[lesson]) for lesson in row)
            flagged = " | ".join(claims_text(student, lesson, claims[student, lesson])
                                 for lesson in row if (student, lesson) in claims) \
                if kind == "student" else ""
            writer.writerow([csv_safe(v) for v in [
                student, sum(len(v) for v in row.values()), passed,
                *(_lesson_summary(row[lesson]) if lesson in row else "" for lesson in lessons),
                flagged]])


def kept_executed(out: Path) -> set[str]:
    """The names of the executed notebooks kept under out/executed/ (copy_executed), which a
    report may link to."""
    folder = out / "executed"
    return {path.name for path in folder.iterdir()} if folder.is_dir() else set()


def _executed_link(sub: Submission, up: str, kept: set[str]) -> str:
    """A link to the submission's executed notebook, or why there is none (never a dead link:
    a notebook that was not run, or whose copy was not kept, has none)."""
    name = executed_name(sub)
    if name not in kept:
        return f'<span class="none">{html_text(_("no executed notebook"))}</span>'
    return (f'<a class="executed" href="{html_text(f"{up}executed/{name}")}">'
            f'{html_text(_("executed notebook"))}</a>')


def _submission_details(sub: Submission, kept: set[str], up: str = "") -> str:
    """One submission's items, notes and open answers, as HTML; `kept`: the executed notebooks
    kept (kept_executed); `up`: the way from the page it is on to the report folder ("../"
    from a submission's own page)."""
    esc = html_text
    items = []
    for item in sub.exercises:
        good = item.status == "pass"
        score = state_text("ok" if good else item.status) if item.kind == "veto" else \
            f"{item.earned:g}/{item.points:g} {'' if good else state_text(item.status)}"
        reason = f"<pre class=\"reason\">{esc(shown_message(item))}</pre>" \
            if item.message else ""
        hinted = f' <small class="hints">{esc(hints_text(item))}</small>' \
            if hints_text(item) else ""
        items.append(f'<li class="{"pass" if good else "bad"}"><b>{esc(_(item.title))}</b>: '
                     f"{esc(score)}{hinted}{reason}</li>")
    notes = [*(f"veto: {v}" for v in sub.vetoes), *(f"tampered: {t}" for t in sub.tampering),
             *sub.problems, *sub.notes]
    opens = []
    for item in sub.written:
        body = (f"<pre class=\"open-answer\">{esc(item.answer)}</pre>" if item.answered else
                f"<p><i>{esc(_('not answered'))}</i></p>")
        opens.append(f"<h4>{esc(item.id)}: {esc(item.title)} "
                     f'<span class="written-score">[{esc(_written_score(item))}]</span></h4>'
                     f'{body}<p class="rubric"><small>{esc(_("Rubric:"))} {esc(item.rubric)}'
                     "</small></p>")
    if not sub.written:  # no lesson source named its points: the texts alone
        for cell_id, text in sub.open_answers.items():
            body = (f"<pre class=\"open-answer\">{esc(text)}</pre>" if answered(text) else
                    f"<p><i>{esc(_('not answered'))}</i></p>")
            opens.append(f"<h4>{esc(cell_id)}</h4>{body}")
    return (f'<div class="submission"><p>{esc(sub.label)}: <b>{esc(sub.status)}</b> '
            f"{esc(total_text(sub))} ({esc(pass_text(sub))}) &middot; "
            f"{_executed_link(sub, up, kept)}</p>"
            f"<ul>{''.join(items)}</ul>"
            + (f"<p><small>{'<br>'.join(esc(n) for n in notes)}</small></p>" if notes else "")
            + (f'<div class="open-answers"><h4>{esc(_("Open answers"))}</h4>{"".join(opens)}'
               "</div>" if opens else "")
            + "</div>")


def _claims_html(subs: list[Submission]) -> str:
    """progress.html's list of the students with several submissions of a lesson."""
    lines = claims_lines(subs)
    if not lines:
        return ""
    items = "".join(f"<li>{html_text(line)}</li>" for line in lines)
    return (f'<div class="to-check"><p><b>To check</b>: a student id is what the --student-from '
            "rule reads (with file or metadata, the notebook's own claim); a lesson passes "
            f"when one of its submissions passed.</p><ul>{items}</ul></div>")


def write_html(subs: list[Submission], path: Path) -> None:
    """progress.html: one row per student, one column per lesson; each cell opens (details)
    onto every item's reason, the executed notebook and the open answers."""
    esc = html_text
    table, lessons = by_student(subs)
    kept = kept_executed(path.parent)
    passed = sum(s.passed for s in subs)
    students = sum(kind == "student" for kind, _ in table)
    at_top = "" if students == len(table) else \
        f" and {len(table) - students} notebooks of no student (a row each)"
    rows = []
    for number, ((_kind, student), row) in enumerate(table.items()):
        cells = []
        for lesson in lessons:
            if lesson not in row:
                cells.append('<td class="none">&ndash;</td>')
                continue
            group = row[lesson]
            status = "PASS" if lesson_passed(group) else group[-1].status
            cells.append(f'<td class="{esc(status)}"><details id="s{number}-{esc(lesson)}">'
                         f"<summary>{esc(_lesson_summary(group))}</summary>"
                         f"{''.join(_submission_details(s, kept) for s in group)}"
                         "</details></td>")
        rows.append(f'<tr><th scope="row" class="student">{esc(student)}</th>'
                    f"{''.join(cells)}</tr>")
    header = "".join(f"<th>{esc(lesson)}</th>" for lesson in lessons)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Grading progress</title>
<style>{STYLE}</style></head><body>
<h1>Grading progress</h1>
<p>{passed} of {len(subs)} submissions passed (pass line 8 of the 10 automatic points, no veto
misconception, no tampering), from {students} students{at_top}. Written answers add their
points on top once the instructor has scored them (open-answers.csv, then
<code>grade --scores</code>); a total is provisional until then. Click a lesson's cell for each
item's reason, the executed notebook and the open answers. The same rows:
<a href="students.csv">students.csv</a>; what the class got wrong, below and in
<a href="class.csv">class.csv</a>.
Generated <span class="volatile">{esc(time.strftime("%Y-%m-%d %H:%M"))}</span>.</p>
{_claims_html(subs)}<table id="progress"><thead><tr><th>student</th>{header}</tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
{analytics_html(analytics.class_stats(subs), subs)}
</body></html>
"""
    path.write_text(page, encoding="utf-8")


# ---------------------------------------------------------------- what the class got wrong


def submission_page(sub: Submission) -> str:
    """Where a submission's own report page lies in the report folder (named as its executed
    copy is, so every label has its own)."""
    return f"submissions/{executed_name(sub)[:-len('.ipynb')]}.html"


def write_submission_pages(subs: list[Submission], out: Path) -> None:
    """submissions/NAME.html: one page per submission, its items, notes and open answers, for
    the links of progress.html's analytics."""
    folder = out / "submissions"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    kept = kept_executed(out)
    for sub in subs:
        with i18n.language(sub.lang):  # the student's own page: in the notebook's language
            page = f"""<!DOCTYPE html>
<html lang="{sub.lang}"><head><meta charset="utf-8"><title>{html_text(sub.label)}</title>
<style>{STYLE}</style></head><body>
<p><a class="back" href="../progress.html">{html_text(_("Grading progress"))}</a></p>
<h1 class="label">{html_text(sub.label)}</h1>
{_submission_details(sub, kept, up="../")}
</body></html>
"""
        (out / submission_page(sub)).write_text(page, encoding="utf-8")


FINDING_KINDS = {"code": "mistake", "question": "wrong part", "veto": "veto statement"}
UNDIAGNOSED = "wrong, no mistake named"


def _findings(item: analytics.ItemStats) -> list[tuple[str, str, list[str]]]:
    """(kind, what, labels) of one item: its diagnosed mistakes, the wrong answers no check
    named, or the parts and statements answered wrongly, most common first."""
    kind = FINDING_KINDS.get(item.kind, "mistake")
    found = [(kind, what, labels) for what, labels in
             analytics.by_count(item.mistakes or item.parts)]
    if item.undiagnosed:
        found.append(("mistake", UNDIAGNOSED, item.undiagnosed))
    return found


def _histogram_svg(counts: list[int]) -> str:
    """The points histogram as inline SVG: one bar per whole point, its count above it."""
    step, bar, height, top = 26, 20, 80, max(counts) or 1
    shapes = []
    for points, count in enumerate(counts):
        tall, x = round(height * count / top), points * step
        shapes.append(
            f'<rect class="bin" data-points="{points}" data-count="{count}" x="{x + 3}" '
            f'y="{height - tall + 14}" width="{bar}" height="{tall}">'
            f"<title>{points} points: {count}</title></rect>"
            f'<text x="{x + 13}" y="{height - tall + 11}" text-anchor="middle">'
            f'{count or ""}</text>'
            f'<text x="{x + 13}" y="{height + 28}" text-anchor="middle">{points}</text>')
    return (f'<svg class="histogram" role="img" width="{step * len(counts)}" '
            f'height="{height + 32}" aria-label="submissions by automatic points">'
            f'{"".join(shapes)}</svg>')


def _lesson_html(stats: analytics.LessonStats, pages: dict[str, str]) -> str:
    esc = html_text
    rate = f"{100 * stats.passed / stats.count:.0f}%" if stats.count else "-"
    rows = []
    for item in stats.items.values():
        cells = "".join(f'<td data-outcome="{esc(outcome)}">{len(labels)}</td>'
                        for outcome, labels in item.outcomes.items())
        rows.append(f'<tr class="item" data-item="{esc(item.id)}"><th scope="row">'
                    f"{esc(item.title)}</th>{cells}</tr>")
    findings = []
    for item in stats.items.values():
        for kind, what, labels in _findings(item):
            links = ", ".join(f'<a class="submission-link" href="{esc(pages[label])}">'
                              f"{esc(label)}</a>" for label in labels)
            findings.append(
                f'<li class="finding" data-kind="{esc(kind)}" data-item="{esc(item.id)}" '
                f'data-count="{len(labels)}"><b>{esc(item.title)}</b> ({esc(kind)}): '
                f'{esc(what)}: <span class="count">{len(labels)} of {stats.count}</span>'
                f"<details><summary>which submissions</summary>{links}</details></li>")
    seconds = sum(stats.seconds)
    heads = "".join(f"<th>{esc(outcome)}</th>" for outcome in analytics.OUTCOMES)
    return f"""<section class="lesson-analytics" id="class-{esc(stats.lesson)}"
 data-lesson="{esc(stats.lesson)}">
<h3>{esc(stats.title or stats.lesson)} <small>({esc(stats.lesson)})</small></h3>
<p class="pass-rate" data-passed="{stats.passed}" data-count="{stats.count}">{stats.passed}
of {stats.count} submissions passed ({rate}). Graded in
<span class="volatile">{seconds:.0f} s of sandbox time, {seconds / (stats.count or 1):.1f} s
each</span>.</p>
{_histogram_svg(stats.histogram)}
<table class="items"><thead><tr><th>item</th>{heads}</tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<h4>Mistakes, wrong parts and veto statements</h4>
<ul class="findings">{"".join(findings) or "<li>none</li>"}</ul>
</section>"""


def analytics_html(lessons: list[analytics.LessonStats], subs: list[Submission]) -> str:
    """progress.html's part on the class: per lesson, the pass rate, the points histogram,
    each item's outcomes and every finding, linked to the submissions' own pages."""
    pages = {sub.label: submission_page(sub) for sub in subs}
    if not lessons:
        return ""
    body = "\n".join(_lesson_html(stats, pages) for stats in lessons)
    return f"""<div class="analytics" id="analytics">
<h2>What the class got wrong</h2>
<p>Per lesson: the submissions by automatic points, how each item went (a veto statement
judged wrongly counts as wrong; other: refused, an error or a timeout) and what the checks
diagnosed, each with the submissions that made it (most common first). The same counts:
<a href="class.csv">class.csv</a>.</p>
{body}
</div>"""


CLASS_COLUMNS = ("lesson", "section", "item", "what", "value", "of", "submissions")


def write_class_csv(subs: list[Submission], path: Path) -> None:
    """class.csv: progress.html's class analytics as rows (section: passed, points, item,
    mistake, wrong part, veto statement, grading seconds)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CLASS_COLUMNS)
        for stats in analytics.class_stats(subs):
            rows = [("passed", "", "submissions passed", stats.passed, [])]
            rows += [("points", "", f"{points} points", count, [])
                     for points, count in enumerate(stats.histogram)]
            for item in stats.items.values():
                rows += [("item", item.id, outcome, len(labels),
                          [] if outcome == "pass" else labels)
                         for outcome, labels in item.outcomes.items()]
                rows += [(kind, item.id, what, len(labels), labels)
                         for kind, what, labels in _findings(item)]
            rows.append(("grading seconds", "", "total", f"{sum(stats.seconds):.2f}", []))
            for section, item_id, what, value, labels in rows:
                writer.writerow([csv_safe(v) for v in [
                    stats.lesson, section, item_id, what, value, stats.count,
                    " | ".join(labels)]])


OPEN_ANSWER_COLUMNS = ("student", "lesson", "submission", "question", "points", "rubric",
                       "answer", "score")
NOT_ANSWERED = "(not answered: it scores 0)"


def write_open_answers(subs: list[Submission], path: Path) -> None:
    """open-answers.csv: one row per submission and open question, for the instructor to fill
    the `score` column (blank: not scored yet) and grade again with `--scores` it. An answer
    left as the exercise gave it already scores 0."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(OPEN_ANSWER_COLUMNS)
        for sub in subs:
            for item in sub.written:
                writer.writerow([csv_safe(v) for v in [
                    student_of(sub) or "", sub.lesson, sub.label, item.id, f"{item.points:g}",
                    item.rubric, item.answer if item.answered else NOT_ANSWERED,
                    "" if item.score is None else f"{item.score:g}"]])


def write_all(subs: list[Submission], out: Path, timeout: float, jobs: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_submission_pages(subs, out)
    write_class_csv(subs, out / "class.csv")
    (out / "scorecard.txt").write_text(scorecard_text(subs) + "\n", encoding="utf-8")
    write_csv(subs, out / "results.csv")
    write_junit(subs, out / "junit.xml")
    write_html(subs, out / "progress.html")
    write_students_csv(subs, out / "students.csv")
    write_open_answers(subs, out / "open-answers.csv")
    (out / "results.json").write_text(json.dumps(
        {"timeout": timeout, "jobs": jobs, "passed": sum(s.status == PASS for s in subs),
         "submissions": [json_safe(as_dict(s)) for s in subs]}, indent=1), encoding="utf-8")


NOT_KEPT = "not-kept.txt"  # beside where the executed notebook would be: why there is none


def copy_executed(subs: list[Submission], executed: dict[int, Path], out: Path,
                  limit: int) -> None:
    """Copy the executed notebook each run left (`executed[number]` is the work folder of
    `subs[number]`) into out/executed/, named by executed_name, if at most `limit` bytes. A copy
    that cannot be kept adds a note to its submission saying why: call this before the reports
    are written."""
    folder = out / "executed"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for number, work in sorted(executed.items()):
        sub = subs[number]
        source = work / "out" / "executed.ipynb"
        try:
            data = read_untrusted(source, limit)
        except OSError:  # a folder of that name gets past the opening: it fails on reading
            data = None
        if data is None:
            sub.notes.append(f"executed copy not kept: {_why_unread(source, limit)}")
            continue
        try:
            with (folder / executed_name(sub)).open("xb") as handle:  # never over another's
                handle.write(data)
        except FileExistsError:
            sub.notes.append("executed copy not kept: another submission's copy has its name "
                             f"({executed_name(sub)})")
        except OSError as err:
            sub.notes.append(f"executed copy not kept: cannot write it ({err.strerror})")


def _why_unread(path: Path, limit: int) -> str:
    """Why read_untrusted gave nothing for `path`, in words."""
    if any(os.path.islink(p) for p in (path, *list(path.parents)[:3])):
        return "it is a symbolic link"
    try:
        info = path.lstat()
    except FileNotFoundError:
        why = path.with_name(NOT_KEPT)  # written by the grader when the channel said why
        return why.read_text(encoding="utf-8") if why.is_file() else \
            "the run left no executed notebook"
    except OSError as err:
        return f"cannot read it ({err.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_size > limit:
        return f"it is {info.st_size / 2**20:.1f} MiB (limit {limit / 2**20:.0f} MiB)"
    try:
        read_regular(path, limit)
    except ValueError as err:
        return str(err)
    return "it could not be read"
