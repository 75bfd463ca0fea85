"""Tamper checks of `python -m flashcourse grade`: compare a submission's grading cells with the
generated exercise notebook, and scan the student's own cells for code that rebinds or patches
what grading relies on (the check, the reference, numpy/torch functions, builtins).

The scan is static and deliberately strict: lesson answers never need to assign to a module
attribute, import `builtins`, or call `setattr`/`exec`. A runtime snapshot taken inside the kernel
is no longer needed for verdicts: every point is decided outside the student's process
(`flashcourse.checks.recording`), so the scan's findings say what a submission tried, and the
reference and kernel checks below say whether its answers do the work themselves.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

GRADING_IDS = ("setup", "scorecard")  # plus every id starting with CHECK_PREFIX
CHECK_PREFIX = "check-"

# Names a student cell must not rebind, and the only modules an import may bind them to.
CANONICAL = {
    "np": ("numpy",),
    "numpy": ("numpy",),
    "torch": ("torch",),
    "triton": ("triton",),
    "tl": ("triton.language",),
    "fc": ("flashcourse",),
    "flashcourse": ("flashcourse",),
    "check": ("flashcourse", "flashcourse.checks.registry"),
    "scorecard": ("flashcourse", "flashcourse.checks.registry"),
    "______": ("flashcourse", "flashcourse.blanks"),
    "standard_attention": ("flashcourse.reference",),
    "grading": ("flashcourse",),
    "registry": ("flashcourse", "flashcourse.checks"),
    "checks": ("flashcourse",),
    "print": (),
    "json": ("json",),
}
# Modules whose import in a student cell is refused outright.
FORBIDDEN_MODULES = {"builtins", "__builtin__", "importlib", "ctypes", "gc", "imp", "cffi",
                     "_thread", "signal", "faulthandler", "atexit", "sitecustomize", "inspect"}
# Builtins a lesson answer never needs and that reach around the scan.
FORBIDDEN_CALLS = {"setattr", "delattr", "exec", "eval", "compile", "globals", "vars",
                   "__import__", "breakpoint", "locals"}
FORBIDDEN_NAMES = {"__builtins__", "__builtin__", "get_ipython", "sys_modules"}
# Dunder attributes that are harmless to read.
HARMLESS_DUNDERS = {"__name__", "__doc__", "__class__", "__len__", "__init__", "__call__",
                    "__qualname__", "__module__"}
# Attributes that reach into running frames or tracing: a lesson answer never needs them, and
# they can read the grader's expected value out of the check that called the answer.
FRAME_ATTRIBUTES = {"f_back", "f_locals", "f_globals", "f_code", "f_builtins", "tb_frame",
                    "gi_frame", "cr_frame", "currentframe", "_getframe",
                    "getouterframes", "getinnerframes", "settrace", "setprofile", "walk_stack",
                    "extract_stack", "get_referrers", "get_objects"}
# Method calls that mutate a module-level container (e.g. registry.RESULTS.update(...)).
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert",
            "remove", "__setitem__", "__delitem__", "__setattr__", "__delattr__", "discard",
            "add"}
# Import roots whose attributes may be written by student code (plots only).
WRITABLE_ROOTS = {"plt", "matplotlib", "mpl"}
# Magics a student may use; anything else (shell escapes, %run, %load) is refused.
ALLOWED_MAGICS = {"time", "timeit", "matplotlib", "precision"}


def is_grading_id(cell_id: str | None) -> bool:
    return bool(cell_id) and (cell_id.startswith(CHECK_PREFIX) or cell_id in GRADING_IDS)


@dataclass
class Finding:
    cell: str  # cell id (or "cell N" when the cell has no id)
    line: int  # line inside the cell, 1-based; 0 for the whole cell
    what: str  # what was done, in words

    def __str__(self) -> str:
        where = f"{self.cell}, line {self.line}" if self.line else self.cell
        return f"{where}: {self.what}"


def _to_python(source: str) -> str:
    """Turn IPython magics into calls so `ast` can parse the cell."""
    if not any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()):
        return source
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # no IPython: magics then show up as syntax errors
        return source
    return TransformerManager().transform_cell(source)


def _parse(source: str) -> ast.Module | None:
    """A cell's syntax tree, magics turned into calls; None for a syntax error (a cell that does
    not parse cannot run either, so it is not tampering)."""
    try:
        return ast.parse(_to_python(source))
    except SyntaxError:
        return None


def _root(node: ast.AST) -> str | None:
    """The name at the start of an attribute/subscript chain: `np` for `np.linalg.norm[0]`."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every expression node
        return "<expression>"


class _Scanner(ast.NodeVisitor):
    def __init__(self, cell: str, imported: dict[str, str]):
        self.cell = cell
        self.imported = imported  # name -> module it was imported from (across all cells)
        self.findings: list[Finding] = []

    def flag(self, node: ast.AST, what: str) -> None:
        self.findings.append(Finding(self.cell, getattr(node, "lineno", 0), what))

    # ---- bindings of protected names
    def _bind(self, node: ast.AST, name: str, how: str) -> None:
        if name in CANONICAL or name.startswith("_fc_"):
            self.flag(node, f"{how} `{name}`, which grading relies on")

    def _target(self, target: ast.AST, node: ast.AST, how: str) -> None:
        if isinstance(target, ast.Name):
            self._bind(node, target.id, how)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for item in target.elts:
                self._target(item, node, how)
        elif isinstance(target, ast.Starred):
            self._target(target.value, node, how)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root(target)
            if root in CANONICAL or (root in self.imported and root not in WRITABLE_ROOTS):
                self.flag(node, f"{how} `{_dotted(target)}` (patches module `{root}`)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, node, "assigns to")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node, "assigns to")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target, node, "assigns to")
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._target(node.target, node, "assigns to")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, node, "deletes")
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self._target(node.target, node, "rebinds (loop variable)")
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self._target(item.optional_vars, node, "rebinds (with ... as)")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._bind(node, node.name, "defines a function named")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node, node.name, "defines a class named")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self._bind(node, name, "declares global")

    # ---- imports
    def _import(self, node: ast.AST, module: str, name: str, bound: str) -> None:
        top = module.split(".")[0]
        if top in FORBIDDEN_MODULES or module in FORBIDDEN_MODULES:
            self.flag(node, f"imports `{module}`")
            return
        origin = f"{module}.{name}" if name else module
        if bound in CANONICAL:
            allowed = CANONICAL[bound]
            if module not in allowed and origin not in allowed:
                self.flag(node, f"binds `{bound}` to `{origin}` by an import")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            module = alias.name if alias.asname else alias.name.split(".")[0]
            self._import(node, module, "", bound)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            if alias.name == "*":
                if module.split(".")[0] not in ("math",):
                    self.flag(node, f"imports * from `{module}` (may shadow grading names)")
                continue
            self._import(node, module, alias.name, alias.asname or alias.name)

    # ---- reaching around
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES:
            self.flag(node, f"uses `{node.id}`")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and \
                node.attr not in HARMLESS_DUNDERS:
            self.flag(node, f"reaches into `{_dotted(node)}`")
        elif node.attr == "modules" and _root(node) == "sys":
            self.flag(node, "uses `sys.modules`")
        elif node.attr in FRAME_ATTRIBUTES and _root(node) not in ("np", "numpy", "torch"):
            self.flag(node, f"reads running frames (`{_dotted(node)}`)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
            self.flag(node, f"calls `{func.id}()`")
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
            root = _root(func.value) or ""
            if root in ("fc", "flashcourse", "grading", "registry") or \
                    self.imported.get(root, "").startswith("flashcourse"):
                self.flag(node, f"mutates `{_dotted(func.value)}` of the course package")
        if isinstance(func, ast.Attribute) and func.attr in ("run_line_magic", "run_cell_magic",
                                                             "system", "getoutput"):
            magic = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) \
                else None
            if func.attr in ("system", "getoutput"):
                self.flag(node, f"runs a shell command (`!{magic}`); shell commands are not "
                                "allowed in graded notebooks")
            elif magic not in ALLOWED_MAGICS:
                self.flag(node, f"runs the IPython magic `%{magic}`; only "
                                f"{', '.join(sorted(ALLOWED_MAGICS))} are allowed")
            elif len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and \
                    isinstance(node.args[1].value, str):  # %time CODE: scan CODE too
                try:
                    inner = ast.parse(node.args[1].value)
                except SyntaxError:
                    inner = None
                if inner is not None:
                    self.visit(inner)
            return  # get_ipython() inside an allowed magic is fine
        self.generic_visit(node)


def imported_names(sources: list[str]) -> dict[str, str]:
    """Every name any cell binds by an import, with the module it comes from."""
    names: dict[str, str] = {}
    for source in sources:
        tree = _parse(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    names[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
    return names


def scan_cell(cell_label: str, source: str, imported: dict[str, str]) -> list[Finding]:
    """Findings of tampering in one student cell (a syntax error is not tampering)."""
    tree = _parse(source)
    if tree is None:
        return []
    scanner = _Scanner(cell_label, imported)
    scanner.visit(tree)
    return scanner.findings


def _normalise(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def compare_grading_cells(pristine: list[dict], submitted: list[dict]) -> list[str]:
    """What changed in the grading cells: deleted, edited, or moved out of their cell type."""
    by_id: dict[str, dict] = {}
    for cell in submitted:
        cell_id = cell.get("id")
        if cell_id and cell_id not in by_id:
            by_id[cell_id] = cell
    problems = []
    for cell in pristine:
        cell_id = cell.get("id")
        if not is_grading_id(cell_id):
            continue
        mine = by_id.get(cell_id)
        if mine is None:
            problems.append(f"grading cell `{cell_id}` was deleted")
        elif mine.get("cell_type") != "code":
            problems.append(f"grading cell `{cell_id}` was turned into a {mine.get('cell_type')} "
                            "cell")
        elif _normalise(cell_source(mine)) != _normalise(cell_source(cell)):
            problems.append(f"grading cell `{cell_id}` was edited: expected "
                            f"{_short(cell_source(cell))!r}, found {_short(cell_source(mine))!r}")
    return problems


def cell_source(cell: dict) -> str:
    """A notebook cell's source as one string (nbformat JSON may hold a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def student_cells(cells: list[dict]) -> list[tuple[str, str]]:
    """(label, source) of every code cell the grader does not replace: all but the first cell
    carrying each grading id (a second cell with a grading id is the student's)."""
    seen: set[str] = set()
    student = []
    for number, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        cell_id = cell.get("id")
        if is_grading_id(cell_id) and cell_id not in seen:
            seen.add(cell_id)
            continue
        label = cell_id if cell_id and not is_grading_id(cell_id) else f"cell {number}"
        student.append((label, cell_source(cell)))
    return student


def scan_student_cells(cells: list[dict]) -> list[Finding]:
    """Scan every code cell that is not a grading cell."""
    student = student_cells(cells)
    imported = imported_names([source for _, source in student])
    findings: list[Finding] = []
    for label, source in student:
        findings += scan_cell(label, source, imported)
    return findings


# ---------------------------------------------------------------- answers that do the work

# Modules of the package that hold references and finished kernels; an answer cell must not
# reach them (demo cells may, to compare).
REFERENCE_MODULES = ("flashcourse.reference", "flashcourse.kernels", "flashcourse.checks",
                     "flashcourse.checks.registry",
                     "flashcourse.checks.recording")
# Library calls that compute what an exercise asks the student to write.
REFERENCE_ATTRIBUTES = {"scaled_dot_product_attention", "softmax", "log_softmax",
                        "flash_attention", "flex_attention", "standard_attention",
                        "multi_head_attention_forward"}


def _is_module(dotted: str) -> bool:
    """Whether `dotted` names a module of the course package (not a function or constant)."""
    import importlib.util

    if not dotted.startswith("flashcourse"):
        return False
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def _reference_modules_by_alias(imported: dict[str, str]) -> dict[str, str]:
    aliases = {"fc": "flashcourse", "flashcourse": "flashcourse"}
    aliases.update(imported)
    return aliases


def reference_calls(cells: list[dict], answer_ids: set[str]) -> list[Finding]:
    """Uses of a reference in the answer cells (`answer_ids`): library attention or softmax,
    or the package's own reference, attention helpers, kernels or checks."""
    student = student_cells(cells)
    # A module the lesson's own cells import (`from flashcourse.kernels import attention as at`)
    # is a reference too: `at.helper(...)` in an answer is flagged. Names a lesson imports one by
    # one (a constant, a helper the exercise builds on) are given to the student on purpose.
    lesson_modules = {name: module for name, module in
                      imported_names([cell_source(c) for c in cells
                                      if c.get("cell_type") == "code"]).items()
                      if _is_module(module)}
    aliases = _reference_modules_by_alias(
        {**lesson_modules, **imported_names([src for _, src in student])})
    findings = []
    for label, source in student:
        if label not in answer_ids:
            continue
        tree = _parse(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            found = None
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                    [alias.name for alias in node.names]
                if isinstance(node, ast.ImportFrom):
                    names += [f"{node.module}.{alias.name}" for alias in node.names]
                found = next((n for n in names if n.startswith(REFERENCE_MODULES)), None)
            elif isinstance(node, ast.Attribute) and node.attr in REFERENCE_ATTRIBUTES:
                found = _dotted(node)
            elif isinstance(node, (ast.Attribute, ast.Name)):
                dotted = _dotted(node)
                root, _, rest = dotted.partition(".")
                module = aliases.get(root, "")
                full = f"{module}.{rest}" if rest else module
                if module and full.startswith(REFERENCE_MODULES):
                    found = dotted
            if found:
                findings.append(Finding(label, getattr(node, "lineno", 0),
                                        f"uses the reference `{found}` in an answer"))
    unique = {str(f): f for f in findings}
    return list(unique.values())


def kernel_problems(cells: list[dict], answers: dict[str, str]) -> list[str]:
    """For each kernel exercise (exercise id -> the name its grading cell passes), the name must
    be bound by a `@triton.jit` function in the student's cells and nowhere else."""
    bindings: dict[str, list[str]] = {}
    for label, source in student_cells(cells):
        tree = _parse(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                jit = isinstance(node, ast.FunctionDef) and any(
                    _dotted(d.func if isinstance(d, ast.Call) else d).endswith("jit")
                    for d in node.decorator_list)
                bindings.setdefault(node.name, []).append("jit" if jit else label)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            bindings.setdefault(name.id, []).append(label)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bindings.setdefault(alias.asname or alias.name, []).append(label)
    problems = []
    for exercise_id, name in sorted(answers.items()):
        found = bindings.get(name, [])
        others = sorted({b for b in found if b != "jit"})
        if "jit" not in found:
            problems.append(f"{exercise_id}: `{name}` is not defined as a @triton.jit function")
        elif others:
            problems.append(f"{exercise_id}: `{name}` is bound again outside its @triton.jit "
                            f"definition (in {', '.join(others)})")
    return problems
