"""Submissions made from the exercise notebook, for the grader's tests and throughput script:
every blank filled with the solution's answer, then chosen answers made wrong."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .scan import cell_source

# Known-wrong answers of lesson 1: cell id -> (pattern, replacement) applied to the solution.
LESSON1_MISTAKES = {
    "no-rescale": ("exercise-flash-attention", r"^(\s*)scale = .*$",
                   r"\1scale = np.ones_like(m_new)"),
    "no-final-divide": ("exercise-flash-attention", r"^(\s*)return O / .*$", r"\1return O"),
    "q1-wrong": ("answer-q1", r'"nxn_hbm_passes": \d+', '"nxn_hbm_passes": 2'),
    "q2-wrong": ("answer-q2", r'"sectors_contiguous": \d+', '"sectors_contiguous": 8'),
    "veto": ("answer-misconceptions", r'"flash_reduces_flops": \w+',
             '"flash_reduces_flops": True'),
}


def filled_notebook(root: Path, slug: str = "01-gpu-flash", mistakes: tuple[str, ...] = (),
                    unfilled: tuple[str, ...] = (), student: str | None = None,
                    exercises: Path | None = None) -> dict:
    """The exercise notebook with its blanks and stubs replaced by the solution's cells, except
    the cells named in `unfilled`; then each named mistake applied. `student`: the questions
    with numbers of their own are answered for that student (`answered_as`); None: with the
    lesson's numbers, as the solution answers them. `exercises`: the folder to take the
    exercise notebook from (a class edition's), root/exercises by default."""
    folder = exercises or root / "exercises"
    exercise = json.loads((folder / f"{slug}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((root / "solutions" / f"{slug}.ipynb").read_text(encoding="utf-8"))
    answers = {c["id"]: cell_source(c) for c in solution["cells"]}
    for cell in exercise["cells"]:
        text = cell_source(cell)
        if cell["cell_type"] == "code" and cell["id"] not in unfilled and (
                "______" in text or "NotImplementedError" in text) and cell["id"] != "setup":
            cell["source"] = answers[cell["id"]]
    by_id = {c["id"]: c for c in exercise["cells"]}
    for name in mistakes:
        cell_id, pattern, replacement = LESSON1_MISTAKES[name]
        new, count = re.subn(pattern, replacement, cell_source(by_id[cell_id]), flags=re.M)
        if count != 1:
            raise ValueError(f"mistake {name!r} matched {count} lines of {cell_id}")
        by_id[cell_id]["source"] = new
    return exercise if student is None else answered_as(exercise, student, slug, root)


def answered_as(nb: dict, student: str, slug: str = "01-gpu-flash",
                root: Path | None = None) -> dict:
    """`nb` (changed in place) answering each question with numbers of its own
    (checks/numbers.py) with `student`'s values, as the grader replays it for that student:
    each such key's line in the question's answer cell (`answer-qN`) that still holds the
    solution's answer gets the student's value. Blanks and other answers are left as they are."""
    from ..checks import numbers, self_check_files
    from ..paths import COURSE_ROOT

    solution = json.loads((Path(root or COURSE_ROOT) / "solutions" / f"{slug}.ipynb")
                          .read_text(encoding="utf-8"))
    solved = {c.get("id"): cell_source(c) for c in solution["cells"]}
    cells = {c.get("id"): c for c in nb["cells"] if c.get("cell_type") == "code"}
    for q in self_check_files.read(self_check_files.path_of(slug)).questions:
        cell_id = f"answer-{q.id.split('/', 1)[1].split('-', 1)[0]}"
        if not q.formulas or cell_id not in cells:
            continue
        right = numbers.expected_answers(q.id, q.answers, q.numbers, q.formulas, student)
        text = cell_source(cells[cell_id])
        for key in q.formulas:
            text = _answer_line_replaced(text, solved.get(cell_id, ""), key, right[key])
        cells[cell_id]["source"] = text
    return nb


def _answer_line_replaced(text: str, solution: str, key: str, value) -> str:
    """`text` with the line `"key": <the solution's answer>,` answering `value` instead."""
    line = re.compile(rf'^(\s*"{key}": )(.*?),(\s*#.*)?$', re.M)
    solved = line.search(solution)
    if solved is None:
        return text

    def answer(found: re.Match) -> str:
        if found.group(2) != solved.group(2):  # a blank, or another answer: left as it is
            return found.group(0)
        return f"{found.group(1)}{value!r},{found.group(3) or ''}"

    return line.sub(answer, text)


def write(nb: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return path


def flip_vetoes(nb: dict) -> dict:
    """`nb` (changed in place) with every true/false statement of its misconceptions cell
    judged the other way."""
    cell = next(c for c in nb["cells"] if c["id"] == "answer-misconceptions")
    cell["source"] = re.sub(r": (True|False),", lambda m: f": {m.group(1) == 'False'},",
                            cell_source(cell))
    return nb


# ---------------------------------------------------------------- a class of result records

# Messages as the checks write them (registry.grade_answers, registry.misconceptions, a code
# check's "Likely mistake"), for a class built in-process: the analytics and the Gradescope
# files are tested on it without a sandbox.
NO_RESCALE = ("The old sum l and the old output O were not rescaled when the running max grew: "
              "both were computed against the old max")
NO_DIVIDE = "The output is never divided by the running sum: the normalisation is deferred"
STRIDE = ("your kernel is right on contiguous tensors only: it steps between rows by the width "
          "(K or N) instead of the stride")
CASE_ERROR = ("case 3/10 (n=256, d=32, block_size=32, seed=2): max abs error 0.844 (allowed "
              "1e-06 + 1e-06*|ref|) at row 235, column 25; 7104 of 8192 values are off.")
HOSTILE_TEXT = "<script>alert(1)</script>&amp; \x07"


def _code_message(mistake: str) -> str:
    return f"{CASE_ERROR} Likely mistake: {mistake}. Re-read section 6 (\"Tiles\")."


def _parts_message(item_id: str, keys: list[str]) -> str:
    wrong = " ".join(f"{key} = {number} is not right. Re-read section 5 (\"Traffic\")."
                     for number, key in enumerate(keys, start=2))
    return f"{item_id}: {len(keys)} of 3 answers are wrong: {wrong}"


def _veto_message(item_id: str, keys: list[str]) -> str:
    return (f"{item_id}: a wrong answer here fails the lesson whatever the other points: "
            + " ".join(f"{key}: your judgement of this statement is not right. Re-read "
                       "section 6." for key in keys))


def synthetic_class(first: str, second: str) -> list:
    """36 result records with planted mistakes, as `grade` would leave them: 24 of lesson
    `first` (s00-s23) and 12 of lesson `second` (t00-t11). What was planted, by student:

    - `first`'s kernel: no rescale s00-s06 (7), no final divide s07-s09 (3), wrong with no
      mistake named s10-s11 (2; s11's message holds markup), blank s12-s13 (2), not run s14,
      refused s15 (tampered), right s16-s23 (8);
    - its q1: s_bytes wrong for s00, s05, s10, s16, s17 (5), nxn_hbm_passes also for s17;
    - its veto statements: flash_reduces_flops judged wrongly by s03, s08, s19, s20 (4),
      tiles_fit_in_sram also by s20; not run for s21;
    - `second`'s kernel: the stride mistake t00-t02 (3), blank t03, right t04-t11; its veto
      statement sram_is_large judged wrongly by t04.
    """
    from .submission import Submission, WrittenAnswer

    subs = []
    for lesson, prefix, count in ((first, "s", 24), (second, "t", 12)):
        ident = lesson.split("-", 1)[1]
        for number in range(count):
            student = f"{prefix}{number:02d}"
            items = _planted_items(ident, prefix, number)
            earned = sum(item.earned for item in items)
            vetoes = [f"{item.title}: {item.message}" for item in items
                      if item.kind == "veto" and item.status != "pass"]
            tampering = [f"{ident}/kernel: the answer called the reference sdpa while its check "
                         "ran"] if student == "s15" else []
            status = ("TAMPERED" if tampering else
                      "PASS" if earned >= 8 and not vetoes else "FAIL")
            answer = f"My answer, {student}: tiles stay in SRAM."
            subs.append(Submission(
                label=f"{student}/{lesson}.ipynb", path=f"{student}/{lesson}.ipynb",
                status=status, lesson=lesson, lesson_title=f"Lesson {lesson}", earned=earned,
                exercises=items, vetoes=vetoes, tampering=tampering, seconds=5.0,
                open_answers={"open-q1": answer},
                written=[WrittenAnswer("open-q1", "Q1: why tiles", 2, "1 point: SRAM", answer,
                                       True, None)]))
    return subs


def _planted_items(ident: str, prefix: str, number: int) -> list:
    from .submission import ExerciseResult

    def item(name, kind, points, status, message=""):
        earned = float(points) if status == "pass" else 0.0
        return ExerciseResult(f"{ident}/{name}", f"{name} of {ident}", kind, points, earned,
                              status, message)

    if prefix == "s":
        # (the last student number it applies to, status, message), in order
        plan = [(6, "wrong", _code_message(NO_RESCALE)), (9, "wrong", _code_message(NO_DIVIDE)),
                (10, "wrong", f"{CASE_ERROR} Hint: divide at the end."),
                (11, "wrong", f"your function raised ValueError: {HOSTILE_TEXT}"),
                (13, "blank", "Fill in the blank"),
                (14, "not run", "the notebook stopped before its check"),
                (15, "refused", "the answer called the reference sdpa"),
                (23, "pass", "all 10 cases passed")]
        status, message = next((s, m) for last, s, m in plan if number <= last)
        kernel = item("kernel", "code", 4, status, message)
        wrong_q1 = ["s_bytes", "nxn_hbm_passes"] if number == 17 else \
            ["s_bytes"] if number in (0, 5, 10, 16) else []
        q1 = item("q1", "question", 2, "wrong", _parts_message(f"{ident}/q1", wrong_q1)) \
            if wrong_q1 else item("q1", "question", 2, "pass", "all 3 answers right")
        statements = ["flash_reduces_flops", "tiles_fit_in_sram"] if number == 20 else \
            ["flash_reduces_flops"] if number in (3, 8, 19) else []
        veto = item("misconceptions", "veto", 0, "veto",
                    _veto_message(f"{ident}/misconceptions", statements)) if statements else \
            item("misconceptions", "veto", 0, "not run", "the notebook stopped before its "
                 "check") if number == 21 else item("misconceptions", "veto", 0, "pass")
        return [kernel, q1, item("q2", "question", 2, "pass"), item("q3", "question", 2, "pass"),
                veto]
    kernel = item("kernel", "code", 6, "wrong", _code_message(STRIDE)) if number <= 2 else \
        item("kernel", "code", 6, "blank", "Fill in the blank") if number == 3 else \
        item("kernel", "code", 6, "pass", "all 8 cases passed")
    veto = item("misconceptions", "veto", 0, "veto",
                _veto_message(f"{ident}/misconceptions", ["sram_is_large"])) if number == 4 \
        else item("misconceptions", "veto", 0, "pass")
    return [kernel, item("q1", "question", 4, "pass"), veto]
