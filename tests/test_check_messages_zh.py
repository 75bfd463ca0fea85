"""The lesson checks speak Chinese: for each lesson, a known-wrong answer from that lesson's own
table of known-wrong answers is checked in English and with FLASHCOURSE_LANG=zh; the Chinese
message holds Chinese text, no English sentence, and names the same case (its number and its
parameters) as the English one."""

import re

import pytest
import test_coalescing
import test_flash_backward
import test_flash_forward
import test_gpu_flash
import test_modern_attention
import test_perf
import test_ring_attention
import test_roofline
import test_softmax
import test_tiling
import wrong_answers_10
import wrong_kernels_11

from flashcourse import WrongAnswer, check, i18n, runtime
from flashcourse.authoring import cells
from flashcourse.checks import recording, registry
from flashcourse.checks.capstone import grading

CJK = re.compile(r"[\u4e00-\u9fff]")
# four English words in a row (code, identifiers and numbers are not words here): a sentence
# the catalog left untranslated
ENGLISH_RUN = re.compile(r"(?<![\w.])[A-Za-z]{2,}(?:[ ,;'-]+[A-Za-z]{2,}){3,}(?![\w(=])")
CASE = re.compile(r"^(case|table) (\d+(?:/\d+)?) \(")  # how an English message names its case
NAMES = {"case": "用例", "table": "表"}


def _roofline(root):
    replace, _ = test_roofline.WRONG["roofline/gemm-intensity"]["one FLOP per multiply-add"]
    return test_roofline.answer(root / "lessons" / "02-memory-roofline.qmd",
                                *test_roofline.CELLS["roofline/gemm-intensity"], *replace)


def _coalescing(root):
    replace, _ = test_coalescing.WRONG["coalescing/sectors"]["one per thread"]
    return test_coalescing.answer(root / "lessons" / "03-coalescing.qmd",
                                  *test_coalescing.CELLS["coalescing/sectors"], *replace)


def _tiling(root):
    replacements, _ = test_tiling.WRONG_BLOCKED["only A counted"]
    return test_tiling.student_function(root, "exercise-blocked-matmul", "blocked_matmul",
                                        **replacements)


def _softmax(root):
    edits, _ = test_softmax.WRONG["softmax/stable-softmax", "max over the whole array"]
    return test_softmax.answer(root, "softmax/stable-softmax", **edits)


def _flash_forward(root):
    edits, _ = test_flash_forward.WRONG_FORWARD["causal mask off by one"]
    return test_flash_forward.student_module(*edits).flash_forward_kernel


def _flash_backward(root):
    edits, _ = test_flash_backward.WRONG_NUMPY_BACKWARD["D forgotten"]
    return cells.load(test_flash_backward.NUMPY_BACKWARD, edits).attention_backward


def _performance(root):
    replace, _ = test_perf.WRONG_PROFILE["a percentage"]
    return test_perf.profile_function(root, *replace)


def _modern_attention(root):
    key = ("modern-attention/block-map", "some visible counted as FULL")
    edits, _ = test_modern_attention.WRONG[key]
    return test_modern_attention.answer(root, key[0], **edits)


def _ring_attention(root):
    edits, _ = wrong_answers_10.WRONG[wrong_answers_10.PLAN, "diagonal block skipped"]
    return test_ring_attention.answer(root, wrong_answers_10.PLAN, replace=edits)


def _capstone(root):
    edits, _ = wrong_kernels_11.WRONG["window off by one"]
    return wrong_kernels_11.solution_module(edits).capstone_attention


# lesson: (exercise id, the known-wrong answer built from the lesson's tests' tables)
KNOWN_WRONG = {
    "01 gpu-flash": ("gpu-flash/flash-attention", lambda root: test_gpu_flash.student_answer(
        root, **test_gpu_flash.WRONG_ANSWERS["no rescale of the old sum and output"][0])),
    "02 memory-roofline": ("roofline/gemm-intensity", _roofline),
    "03 coalescing": ("coalescing/sectors", _coalescing),
    "04 tiling-matmul": ("tiling/blocked-bytes", _tiling),
    "05 softmax": ("softmax/stable-softmax", _softmax),
    "06 flash-forward": ("flash-triton/forward", _flash_forward),
    "07 flash-backward": ("flash-backward/numpy", _flash_backward),
    "08 performance": ("performance/profile-reading", _performance),
    "09 modern-attention": ("modern-attention/block-map", _modern_attention),
    "10 ring-attention": (wrong_answers_10.PLAN, _ring_attention),
    "11 capstone": (grading.FORWARD_ID, _capstone),
}


def message_of(exercise_id: str, answer, monkeypatch, lang: str | None) -> str:
    if lang is None:
        monkeypatch.delenv(i18n.LANG_ENV, raising=False)
    else:
        monkeypatch.setenv(i18n.LANG_ENV, lang)
    with pytest.raises(WrongAnswer) as caught:
        check(exercise_id, answer)
    assert exercise_id not in registry.RESULTS
    return str(caught.value)


def english_sentences(text: str) -> list[str]:
    """Runs of English words left in a translated message, outside `code` spans."""
    return ENGLISH_RUN.findall(re.sub(r"`[^`]*`", "", text))


@pytest.mark.parametrize("lesson", list(KNOWN_WRONG))
def test_a_known_wrong_answer_gets_its_message_in_chinese(root, monkeypatch, lesson):
    runtime.setup(verbose=False)  # before any @triton.jit: the interpreter in tests
    exercise_id, build = KNOWN_WRONG[lesson]
    answer = build(root)
    english = message_of(exercise_id, answer, monkeypatch, None)
    chinese = message_of(exercise_id, answer, monkeypatch, "zh")
    assert not CJK.search(english), english
    assert CJK.search(chinese), chinese
    assert not english_sentences(chinese), (english_sentences(chinese), chinese)
    named = CASE.match(english)
    assert named, english
    word, number = named.groups()
    assert chinese.startswith(f"{NAMES[word]} {number} ("), chinese  # the same case...
    label = english.split("\n")[0].split("): ")[0]
    for parameter in re.findall(r"\b\w+=[^,\s)]+", label):  # ...with the same parameters
        assert parameter in chinese, (parameter, chinese)


def test_english_stays_the_source(monkeypatch):
    """Without FLASHCOURSE_LANG (and outside a Chinese notebook) the checks speak English."""
    monkeypatch.delenv(i18n.LANG_ENV, raising=False)
    runtime.setup(verbose=False)
    assert i18n.current() == "en"
    with pytest.raises(WrongAnswer, match=r"^Pass the function itself"):
        check("gpu-flash/flash-attention", 3)


def test_a_record_made_in_chinese_replays_in_english(root, record_check, monkeypatch):
    """The grader replays a Chinese notebook's record in English too (for the class's pages):
    its case labels are in Chinese, the verdict is the same."""
    monkeypatch.setenv(i18n.LANG_ENV, "zh")
    runtime.setup(verbose=False)
    answer = test_gpu_flash.student_answer(root)
    raised, record = record_check("gpu-flash/flash-attention", answer)
    assert raised is None and record["lang"] == "zh"
    labels = [event["label"] for event in record["events"]]
    assert any(label.startswith("用例 1/11 (") for label in labels), labels
    for lang in ("zh", "en"):
        with i18n.language(lang):
            summary = registry.replay("gpu-flash/flash-attention", record)
        assert summary.startswith("11 ") and bool(CJK.search(summary)) == (lang == "zh")
    changed = dict(record, events=[dict(event, inputs="0" * 64) for event in record["events"]])
    with i18n.language("en"), pytest.raises(recording.RecordMismatch, match="inputs"):
        registry.replay("gpu-flash/flash-attention", changed)  # the inputs still must match
