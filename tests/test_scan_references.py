"""The static scan against disguised references: a reference reached through a helper bound in
another cell, by a name resolved at run time, or by source text run from a string; the
course's own solutions scanned cell by cell; and input too deeply nested to follow."""

import copy
import json

import pytest

from flashcourse.grader import collect, scan

ANSWER = "exercise-flash-attention"  # an answer cell of lesson 1


def _cells(*sources: tuple[str, str]) -> list[dict]:
    return [{"cell_type": "code", "id": cell_id, "source": source} for cell_id, source in sources]


def _findings(cells: list[dict]) -> list[str]:
    """What the grader reports of a notebook: the tamper scan of every student cell and the
    reference scan of the answer cell."""
    return [str(f) for f in scan.scan_student_cells(cells)] + \
        [str(f) for f in scan.reference_calls(cells, {ANSWER})]


SDPA_HELPER = ("import torch.nn.functional as F\n\n\n"
               "def helper(q, k, v):\n"
               "    return F.scaled_dot_product_attention(q, k, v)\n")

TABLE_ANSWER = "def flash_attention(Q, K, V):\n    return table['f'](Q @ K.T, -1) @ V\n"

# disguise -> (cells, what a finding must say)
DISGUISES = {
    "the benchmarks' provider of SDPA": (
        _cells((ANSWER, "from flashcourse.bench import providers\n\n\n"
                        "def flash_attention(Q, K, V):\n"
                        "    return providers.make_call('sdpa-math', False, 1.0)(Q, K, V)\n")),
        "providers.make_call"),
    "the ring's autograd gradients": (
        _cells((ANSWER, "import flashcourse.distributed.tries as tries\n\n\n"
                        "def backward(case):\n"
                        "    return tries.reference_gradients(case, False)\n")),
        "tries.reference_gradients"),
    "lesson 5's state algebra": (
        _cells((ANSWER, "from flashcourse.models import softmax_states as states\n\n\n"
                        "def merge(a, b):\n    return states.merge_all([a, b])\n")),
        "states.merge_all"),
    "a kernel module reached beside the table of tiles": (
        _cells(("imports", "from flashcourse.kernels import tiles, forward\n"),
               (ANSWER, "def flash_attention(Q, K, V):\n"
                        "    return forward.attn_fwd_inner(Q, K, V, tiles.TUNED)\n")),
        "forward"),
    "a helper defined in another cell": (
        _cells(("helpers", SDPA_HELPER),
               (ANSWER, "def flash_attention(Q, K, V):\n    return helper(Q, K, V)\n")),
        "uses `helper` (bound in `helpers`) in an answer: it reaches the reference "
        "`F.scaled_dot_product_attention`"),
    "helpers calling helpers, kept in a dict": (
        _cells(("helpers", "import torch\n\n\ndef inner(x):\n    return torch.softmax(x, -1)\n"
                           "\n\ndef outer(x):\n    return inner(x)\n"),
               ("table", "table = {}\ntable['f'] = outer\n"),
               (ANSWER, "def flash_attention(Q, K, V):\n    return table['f'](Q @ K.T) @ V\n")),
        "uses `table` (bound in `table`) in an answer: it reaches the reference `torch.softmax` "
        "by way of `outer`, `inner`"),
    "a reference imported under another name in another cell": (
        _cells(("helpers", "from torch.nn.functional import scaled_dot_product_attention as sd"),
               (ANSWER, "def flash_attention(Q, K, V):\n    return sd(Q, K, V)\n")),
        "uses the reference `sd` in an answer"),
    "pkgutil.resolve_name on a built string": (
        _cells((ANSWER, "import pkgutil\n"
                        "f = pkgutil.resolve_name('torch.nn.functional:' + 'scaled_dot_'\n"
                        "                         + 'product_attention')\n")),
        "imports `pkgutil`"),
    "resolve_name reached through another module": (
        _cells((ANSWER, "import torch\nf = torch.hub.pkgutil.resolve_name(spec)\n")),
        "resolves a name or runs source text at run time (`torch.hub.pkgutil.resolve_name`)"),
    "base64 source run by code.InteractiveInterpreter": (
        _cells((ANSWER, "import base64\nimport code\n"
                        "code.InteractiveInterpreter().runsource(base64.b64decode(blob).decode())"
                )),
        "imports `code`"),
    "base64 source run by a renamed exec": (
        _cells((ANSWER, "import base64\nsource = base64.b64decode(blob).decode()\nrun = exec\n"
                        "run(source)\n")),
        "runs decoded text through `run`"),
    "exec on decoded text": (
        _cells((ANSWER, "import codecs\nexec(codecs.decode(blob, 'rot13'))\n")),
        "calls `exec()` on decoded text"),
    "code.interact": (_cells((ANSWER, "import code as c\nc.interact(local=ns)\n")),
                      "imports `code`"),
    "runpy": (_cells((ANSWER, "import runpy\nns = runpy.run_path('helper.py')\n")),
              "imports `runpy`"),
    "__import__ bound under another name": (
        _cells((ANSWER, "imp = __import__\nF = imp('torch.nn.functional', fromlist=['x'])\n")),
        "uses `__import__` as a value, not in a call"),
    "getattr with a computed name on torch": (
        _cells((ANSWER, "import torch\n\n\ndef flash_attention(Q, K, V, name='sdpa'):\n"
                        "    return getattr(torch.nn.functional, name)(Q, K, V)\n")),
        "looks an attribute up by a computed name (`getattr(torch.nn.functional, name)`)"),
    "getattr with a concatenated name": (
        _cells((ANSWER, "import torch.nn.functional as F\n"
                        "f = getattr(F, 'scaled_' + 'dot_product_attention')\n")),
        "looks an attribute up by a computed name"),
    "getattr with the reference's name": (
        _cells((ANSWER, "import torch.nn.functional as F\n"
                        "f = getattr(F, 'scaled_dot_product_attention')\n")),
        "uses the reference `getattr(F, 'scaled_dot_product_attention')` in an answer"),
    "getattr into the package's kernels, in a cell that is not an answer": (
        _cells(("helpers", "import flashcourse\nname = 'forward'\n"
                           "run = getattr(flashcourse.kernels.host, name)\n"),
               (ANSWER, "def flash_attention(Q, K, V):\n    return run(Q, K, V)\n")),
        "helpers, line 3: looks an attribute up by a computed name"),
    "operator.attrgetter with a computed name": (
        _cells((ANSWER, "from operator import attrgetter\nf = attrgetter(path)(torch)\n")),
        "looks an attribute up by a computed name (`attrgetter(path)`)"),
    "attrgetter with the reference's path": (
        _cells((ANSWER, "import operator\n"
                        "f = operator.attrgetter('nn.functional.scaled_dot_product_attention')"
                )),
        "uses the reference `operator.attrgetter('nn.functional.scaled_dot_product_attention')`"),
    "getattr passed around as a value": (
        _cells((ANSWER, "import functools\nimport torch\n"
                        "look = functools.partial(getattr, torch)\n")),
        "uses `getattr` as a value, not in a call"),
    # a container filled from inside a function, lambda or method: a binding all the same
    "a reference stashed into a dict by a function": (
        _cells(("stash", "store = {}\n\n\ndef stash():\n"
                         "    from flashcourse.reference import standard_attention as ref\n"
                         "    store['ref'] = ref\n\n\nstash()\n"),
               (ANSWER, "def flash_attention(Q, K, V):\n    return store['ref'](Q, K, V)\n")),
        "uses `store` (bound in `stash`) in an answer: it reaches the reference `ref`"),
    "a reference appended to a list by a function": (
        _cells(("stash", "import torch\nkept = []\n\n\ndef keep():\n"
                         "    kept.append(torch.softmax)\n"),
               (ANSWER, "def flash_attention(Q, K, V):\n    return kept[0](Q @ K.T, -1) @ V\n")),
        "uses `kept` (bound in `stash`) in an answer: it reaches the reference `torch.softmax`"),
    "a reference put in a table by a lambda": (
        _cells(("stash", "import torch\ntable = {}\n(lambda: table.update(f=torch.softmax))()\n"),
               (ANSWER, TABLE_ANSWER)),
        "uses `table` (bound in `stash`)"),
    "a lesson's runner handed a course kernel": (
        _cells((ANSWER, "from flashcourse.kernels import softmax as ks\n\n\n"
                        "y = ks.online_softmax(ks.reference_online_kernel, x)\n")),
        "ks.reference_online_kernel"),
    "the body of a %%time cell": (
        _cells((ANSWER, "%%time\nfrom flashcourse.reference import standard_attention\n\n\n"
                        "def flash_attention(Q, K, V):\n"
                        "    return standard_attention(Q, K, V)\n")),
        "uses the reference `standard_attention`"),
    "a reference put in a table by a method": (
        _cells(("stash", "import torch\ntable = {}\n\n\nclass Keeper:\n    def keep(self):\n"
                         "        table['f'] = torch.softmax\n"),
               (ANSWER, TABLE_ANSWER)),
        "uses `table` (bound in `stash`)"),
}


@pytest.mark.parametrize("disguise", list(DISGUISES))
def test_disguised_references_are_flagged(disguise, record_rejection):
    cells, expected = DISGUISES[disguise]
    findings = _findings(cells)
    assert any(expected in f for f in findings), findings
    record_rejection("grade/disguised-reference", disguise)


def test_what_existing_rules_cover_is_reported_once():
    # vars() and __dict__ were refused before: a lookup through them is one finding, not two
    for source, expected in [("f = vars(F)[name]", "calls `vars()`"),
                             ("f = F.__dict__[name]", "reaches into `F.__dict__`"),
                             ("exec(source)", "calls `exec()`")]:
        findings = _findings(_cells((ANSWER, f"import torch.nn.functional as F\n{source}\n")))
        assert len(findings) == 1 and expected in findings[0], findings


LEGITIMATE = {
    "getattr with a literal name on a tensor": _cells(
        (ANSWER, "def flash_attention(Q, K, V):\n    n = getattr(Q, 'shape')[0]\n"
                 "    return (Q @ K.T / n) @ V\n")),
    "a helper in another cell that reaches no reference": _cells(
        ("helpers", "import numpy as np\n\n\ndef row_max(x):\n    return np.max(x, axis=-1)\n"),
        (ANSWER, "def flash_attention(Q, K, V):\n    s = Q @ K.T\n"
                 "    p = np.exp(s - row_max(s)[:, None])\n"
                 "    return p / p.sum(-1, keepdims=True) @ V\n")),
    "a parameter that shares a name with a reference elsewhere": _cells(
        ("helpers", SDPA_HELPER),
        (ANSWER, "def flash_attention(Q, K, V, helper=None):\n    return helper\n")),
    "a local named like a builtin the scan watches": _cells(
        (ANSWER, "def flash_attention(Q, K, V, compile=False):\n"
                 "    return Q if compile else V\n")),
    "the table of tiles, data beside the kernels": _cells(
        ("imports", "from flashcourse.kernels import tiles\n"),
        (ANSWER, "def flash_attention(Q, K, V):\n    block = tiles.SPARSE_CONFIGS[64][0]\n"
                 "    return Q[:block] @ K.T @ V\n")),
    "a lesson's runner launching the answer's own kernel": _cells(
        ("imports", "import torch\nfrom flashcourse.kernels.softmax import online_softmax\n"),
        (ANSWER, "@triton.jit\ndef online_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: "
                 "tl.constexpr):\n    pass\n\n\ny = online_softmax(online_softmax_kernel, "
                 "torch.randn(4, 100))\nprint(y.sum(-1))\n")),
}


@pytest.mark.parametrize("use", list(LEGITIMATE))
def test_legitimate_uses_are_not_flagged(use):
    assert _findings(LEGITIMATE[use]) == []


IMPORTS_REFERENCE = ("imports", "import numpy as np\nimport torch\n"
                                "from flashcourse.reference import standard_attention\n")
MINE = "def flash_attention(Q, K, V):\n    return Q @ K.T @ V\n\n\n"


def _answer_ending(line: str, *before: tuple[str, str]) -> list[dict]:
    return _cells(*before, IMPORTS_REFERENCE, (ANSWER, f"{MINE}{line}\n"))


# A self-test at the answer cell's top level, the reference's result feeding only the assert
SELF_TESTS = {
    "against the lesson's reference": _answer_ending(
        "assert np.allclose(flash_attention(q, q, q), standard_attention(q, q, q))"),
    "against a library reference": _answer_ending(
        "assert torch.allclose(flash_attention(q, q, q), torch.softmax(q @ q.T, -1) @ q)"),
    "over several inputs": _answer_ending(
        "assert all(np.allclose(flash_attention(q, q, q), standard_attention(q, q, q))\n"
        "           for q in inputs)"),
    "in a loop": _answer_ending(
        "for size in (8, 16):\n"
        "    assert np.allclose(flash_attention(q, q, q), standard_attention(q, q, q))"),
    "by numpy's testing function": _answer_ending(
        "np.testing.assert_allclose(flash_attention(q, q, q), standard_attention(q, q, q))"),
    "against a helper of another cell": _answer_ending(
        "assert torch.allclose(flash_attention(q, q, q), helper(q, q, q))",
        ("helpers", SDPA_HELPER)),
}
# ... and what stays a use of the reference in an answer
NOT_SELF_TESTS = {
    "its result kept by a walrus": _answer_ending(
        "assert (out := standard_attention(q, q, q)) is not None"),
    "the reference kept in a lambda": _answer_ending(
        "assert kept.append(lambda q: standard_attention(q, q, q)) is None"),
    "the reference passed on": _answer_ending("assert kept.append(standard_attention) is None"),
    "the reference bound by a comprehension": _answer_ending(
        "assert all(f(q) is not None for f in [standard_attention])"),
    "the reference in the assert's message": _answer_ending(
        "assert q is not None, standard_attention(q, q, q)"),
    "a call writing into `out=`": _answer_ending("assert torch.softmax(x, -1, out=y) is None"),
    "its result printed": _answer_ending("print(standard_attention(q, q, q))"),
    "a generator that outlives the assert": _answer_ending(
        "assert later.append(standard_attention(q, q, q) for q in feed) is None"),
    "a testing call inside a function": _answer_ending(
        "def test():\n"
        "    np.testing.assert_allclose(flash_attention(q, q, q), standard_attention(q, q, q))"),
    "the reference bound to a name": _answer_ending("answer = standard_attention"),
    "an assert inside the graded function": _cells(IMPORTS_REFERENCE, (
        ANSWER, "def flash_attention(Q, K, V):\n"
                "    assert np.allclose(Q, standard_attention(Q, K, V))\n    return Q\n")),
}


@pytest.mark.parametrize("test", list(SELF_TESTS))
def test_an_answer_may_test_itself_against_a_reference_in_an_assert(test):
    assert _findings(SELF_TESTS[test]) == []


@pytest.mark.parametrize("use", list(NOT_SELF_TESTS))
def test_a_reference_that_does_more_than_feed_an_assert_is_flagged(use, record_rejection):
    findings = _findings(NOT_SELF_TESTS[use])
    assert any(f.startswith(ANSWER) and "reference" in f for f in findings), findings
    record_rejection("grade/disguised-reference", use)


def test_a_reference_in_an_answer_says_where_to_test_against_it():
    helper, _ = DISGUISES["a helper defined in another cell"]
    for cells in (NOT_SELF_TESTS["its result printed"], helper):
        found = _findings(cells)
        assert found and all("in an `assert` of the cell or in a cell of your own" in f
                             for f in found), found


def test_a_comprehension_variable_does_not_hide_a_helper():
    cells = _cells(("helpers", SDPA_HELPER),
                   (ANSWER, "def flash_attention(Q, K, V):\n    _ = [0 for helper in ()]\n"
                            "    return helper(Q, K, V)\n"))
    assert any("uses `helper`" in f for f in _findings(cells))


def test_helpers_are_followed_transitively():
    chain = ["import torch\n\n\ndef step0(x):\n    return torch.softmax(x, -1)\n"]
    chain += [f"def step{i}(x):\n    return step{i - 1}(x)\n" for i in range(1, 12)]
    cells = _cells(*((f"helper-{i}", source) for i, source in enumerate(chain)),
                   (ANSWER, "def flash_attention(Q, K, V):\n    return step11(Q @ K.T) @ V\n"))
    found = [str(f) for f in scan.reference_calls(cells, {ANSWER})]
    assert len(found) == 1 and "`step11` (bound in `helper-11`)" in found[0], found
    assert "`torch.softmax` by way of `step10`" in found[0]


def _solution_and_exercise(root, name):
    solution = json.loads((root / "solutions" / name).read_text())
    exercise = json.loads((root / "exercises" / name).read_text())
    return solution, exercise


def test_every_cell_of_every_solution_gives_no_finding(root):
    names = sorted(p.name for p in (root / "solutions").glob("*.ipynb"))
    assert names
    for name in names:
        solution, exercise = _solution_and_exercise(root, name)
        code = [c for c in solution["cells"] if c.get("cell_type") == "code"]
        imported = scan.imported_names([scan.cell_source(c) for c in code])
        for cell in code:  # grading cells too, each on its own
            found = scan.scan_cell(cell.get("id"), scan.cell_source(cell), imported)
            assert found == [], (name, [str(f) for f in found])
        assert scan.scan_student_cells(solution["cells"]) == [], name
        answers = collect.answer_ids(exercise)
        found = scan.reference_calls(solution["cells"], answers, exercise["cells"])
        assert found == [], (name, [str(f) for f in found])


def test_the_lessons_own_helpers_are_given_but_a_helper_added_beside_them_is_not(root):
    # lesson 8's dispatcher calls machine_backends(), which offers SDPA on purpose
    solution, exercise = _solution_and_exercise(root, "08-performance.ipynb")
    answers = collect.answer_ids(exercise)
    cells = copy.deepcopy(solution["cells"])
    assert scan.reference_calls(cells, answers, exercise["cells"]) == []
    strict = [str(f) for f in scan.reference_calls(cells, answers, lesson_cells=[])]
    assert any("uses `machine_backends`" in f for f in strict), strict

    backends = next(c for c in cells if c.get("id") == "machine-backends")
    backends["source"] = scan.cell_source(backends) + (
        "\n\ndef helper(q, k, v, causal):\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n")
    deploy = next(c for c in cells if c.get("id") == "exercise-deploy")
    source = scan.cell_source(deploy)
    assert 'return backends["sdpa"](q, k, v, causal)' in source
    deploy["source"] = source.replace('return backends["sdpa"](q, k, v, causal)',
                                      "return helper(q, k, v, causal)")
    found = [str(f) for f in scan.reference_calls(cells, answers, exercise["cells"])]
    assert len(found) == 1 and "uses `helper` (bound in `machine-backends`)" in found[0], found


PATHOLOGICAL = {
    "a 5,000-term expression": "x = " + " + ".join(["1"] * 5000) + "\n",
    "a 900-term expression (parses, too deep to walk)": "x = " + " + ".join(["1"] * 900) + "\n",
    "5,000 nested unary minuses": "x = " + "-" * 5000 + "1\n",
    "a 900-deep attribute chain": "x = a" + ".b" * 900 + "\n",
    "a 900-deep chain of calls": "x = f" + "()" * 900 + "\n",
}


@pytest.mark.parametrize("shape", list(PATHOLOGICAL))
def test_too_deeply_nested_cells_are_a_finding_not_a_crash(shape):
    cells = _cells(("helpers", "import torch\n"), (ANSWER, PATHOLOGICAL[shape]))
    findings = [str(f) for f in scan.scan_student_cells(cells)]
    assert findings == [f"{ANSWER}: could not be scanned (too deeply nested)"], findings
    # the other scans skip the cell rather than crash
    scan.reference_calls(cells, {ANSWER})
    scan.kernel_problems(cells, {"x/k": "k"})
