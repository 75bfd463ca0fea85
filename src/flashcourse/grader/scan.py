"""Tamper checks of `python -m flashcourse grade`: compare a submission's grading cells with the
generated exercise notebook, and scan the student's own cells for code that rebinds or patches
what grading relies on (the check, the reference, numpy/torch functions, builtins).

The scan is static and deliberately strict: lesson answers never need to assign to a module
attribute (or to a name bound to one) or to a private name the grading code keeps its state
under, import `builtins`, call `setattr`/`exec`, look an attribute up by a computed name,
reach the notebook's shell, the course's grading code or `sys` through another module,
install a trace or profile hook, a torch mode or a Triton pre-run or launch hook, start
another process, or bring a module or a pickle of their own;
a `@triton.jit` body names only Triton, other kernels and constants (numbers, Triton's
dtypes: in the interpreter it would run any Python). A cell too deeply nested to follow is a
finding too. An answer cell names no reference, but for a self-test: a call whose result
only feeds an `assert` or a testing call, at the cell's top level or in its loops and
branches. (Clearing a cell's outputs is no finding: the runner takes the checks' and hints'
notes aside as they arrive.) A runtime snapshot taken inside
the kernel is no longer needed for verdicts: every point is decided outside the student's
process (`flashcourse.checks.recording`), so the scan's findings say what a submission
tried, and the reference and kernel checks below say whether its answers do the work
themselves.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

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
# The grading names above that are modules (the others are functions or the blank `______`,
# whose attributes no answer writes).
MODULE_NAMES = {"np", "numpy", "torch", "triton", "tl", "fc", "flashcourse", "grading",
                "registry", "checks", "json"}
MODULE_ORIGINS = {name: CANONICAL[name][0] for name in MODULE_NAMES}
# Names above that no grading cell reads (they call `check`, `scorecard` and `fc`): a cell may
# bind them to its own values (`checks = [...]`, `print = partial(print, flush=True)`).
OWN_NAMES_ALLOWED = {"checks", "json", "print"}
# Modules whose import in a student cell is refused outright. Those from `pkgutil` on resolve
# dotted names or run source text at run time (pickle resolves the globals its data names).
FORBIDDEN_MODULES = {"builtins", "__builtin__", "importlib", "ctypes", "gc", "imp", "cffi",
                     "_thread", "signal", "faulthandler", "atexit", "sitecustomize", "inspect",
                     "pkgutil", "code", "codeop", "runpy", "pdb", "bdb", "cProfile", "profile",
                     "pickle", "_pickle", "marshal", "dill", "cloudpickle", "pydoc", "unittest",
                     "typing_extensions", "timeit", "doctest", "multiprocessing", "copyreg",
                     "shelve", "subprocess", "pty", "pexpect", "tracemalloc", "asyncio",
                     "mmap"}
# Packages of the notebook's shell and kernel (IPython.display stays: it shows things).
SHELL_MODULES = ("IPython.core", "IPython.terminal", "ipykernel", "jupyter_client", "zmq",
                 "traitlets", "comm")
# Builtins a lesson answer never needs and that reach around the scan.
FORBIDDEN_CALLS = {"setattr", "delattr", "exec", "eval", "compile", "globals", "vars",
                   "__import__", "breakpoint", "locals"}
FORBIDDEN_NAMES = {"__builtins__", "__builtin__", "get_ipython", "sys_modules"}
# Attributes that reach the notebook's shell, and with it what every cell publishes.
SHELL_ATTRIBUTES = {"get_ipython", "display_pub", "displayhook", "InteractiveShell",
                    "IPKernelApp", "kernel_app"}
# Attributes that resolve a dotted name or run source text, reached from any object (a module
# may hold `code` or `importlib` without the student importing it).
DYNAMIC_ATTRIBUTES = {"resolve_name", "import_module", "run_path", "run_module", "run_code",
                      "InteractiveInterpreter", "InteractiveConsole", "interact", "runsource",
                      "runcode", "compile_command", "exec_module",
                      # a dotted name, or a string annotation evaluated as source
                      "locate", "get_type_hints", "get_annotations", "ForwardRef", "_eval_type",
                      "evaluate_forward_ref", "dictConfig", "fileConfig",
                      # string.Formatter looks a dotted attribute path up in its arguments
                      "get_field", "getattr_static",
                      # torch's own resolver of a dotted name
                      "_import_dotted_name"}
# Refused modules that other modules hold as attributes (`triton.runtime.interpreter.inspect`)
ATTRIBUTE_MODULES = {"inspect", "importlib", "builtins", "__builtin__", "ctypes", "gc",
                     "pickle", "_pickle", "marshal", "runpy", "pkgutil", "pydoc", "codeop",
                     "dill", "cloudpickle", "copyreg", "timeit", "doctest", "multiprocessing",
                     "subprocess", "pty", "tracemalloc", "asyncio", "mmap"}
# Attributes a kernel's body never needs: a Triton value's interpreter handle (its numpy
# array), the runtime and the modules behind triton.language
KERNEL_REFUSED_ATTRIBUTES = {"handle", "runtime", "interpreter", "testing", "backends",
                             "compiler", "np", "numpy", "torch", "os", "sys", "semantic",
                             "_semantic", "builder", "_builder"}
# A string annotation that names a type (`"np.ndarray"`, `"list[int] | None"`), nothing more.
PLAIN_ANNOTATION = re.compile(r"[A-Za-z_][\w.]*(\[[\w.,\s\[\]|]*\])?(\s*\|\s*[\w.]+)*")
# The decorators a kernel answer may carry: Triton's own (checked by their dotted name, and
# `triton` can only be bound to Triton: CANONICAL).
KERNEL_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics"}
# Calls that look an attribute up by the name they are given (the last two from `operator`).
LOOKUP_CALLS = ("getattr", "attrgetter", "methodcaller")
# Builtins that run source text, whose argument is worth naming when it was decoded first.
SOURCE_CALLS = {"exec", "eval", "compile", "__import__"}
# Calls that turn hidden text back into source: base64, codecs, hex, compression.
DECODERS = {"b64decode", "b32decode", "b16decode", "b85decode", "a85decode",
            "urlsafe_b64decode", "standard_b64decode", "decodebytes", "decode", "fromhex",
            "unhexlify", "a2b_base64", "a2b_hex", "decompress"}
TOO_DEEP = "could not be scanned (too deeply nested)"
# Dunder attributes that are harmless to read.
HARMLESS_DUNDERS = {"__name__", "__doc__", "__class__", "__len__", "__init__", "__call__",
                    "__qualname__", "__module__"}
# Attributes that reach into running frames: a lesson answer never needs them, and they can
# read the grader's expected value out of the check that called the answer. Neither numpy nor
# torch has an attribute of these names, so none is exempt by the module it is reached from.
FRAME_ATTRIBUTES = {"f_back", "f_locals", "f_globals", "f_code", "f_builtins", "tb_frame",
                    "gi_frame", "cr_frame", "currentframe", "_getframe",
                    "getouterframes", "getinnerframes", "walk_stack",
                    "extract_stack", "get_referrers", "get_objects"}
# Hooks that run a student's function on every call of any code, the checks' and the course's
# launchers' included (sys.monitoring: PEP 669). Reading them (gettrace) is harmless.
HOOK_ATTRIBUTES = {"settrace", "setprofile", "settrace_all_threads", "setprofile_all_threads",
                   "monitoring",
                   # torch's modes see every torch call, the Triton interpreter's copies too
                   "TorchFunctionMode", "TorchDispatchMode", "__torch_function__",
                   "__torch_dispatch__",
                   # Triton's: a kernel's pre-run hooks run on the host before it, with its
                   # arguments (in the interpreter, the copies it writes back); the launch and
                   # compile hooks and the knobs that hold them
                   "add_pre_run_hook", "pre_run_hooks", "launch_enter_hook", "launch_exit_hook",
                   "kernel_load_start_hook", "kernel_load_end_hook", "jit_cache_hook",
                   "jit_post_compile_hook", "add_stages_inspection_hook", "knobs"}
# A Triton kernel's launch machinery (the interpreter's rewrite of a kernel and its cache,
# the compiled kernel's caches and binder): no answer reaches it.
KERNEL_MACHINERY = {"rewritten_fn", "rewriter", "rewrite_ast", "device_caches", "create_binder",
                    "GridExecutor", "_patch_lang", "FunctionRewriter", "InterpretedFunction"}
# Keywords that hand Triton a function to run around a launch (triton.Config, autotune).
HOOK_KEYWORDS = {"pre_hook", "post_hook"}
# Attributes that start another process, whose code no check or tripwire sees.
PROCESS_ATTRIBUTES = {"fork", "forkpty", "execv", "execve", "execl", "execle", "execlp",
                      "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe",
                      "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp",
                      "create_subprocess_exec", "create_subprocess_shell", "subprocess_exec",
                      "subprocess_shell", "Popen",
                      "ProcessPoolExecutor", "startfile"}
# The same, only where the owner is `os` (`platform.system()` is harmless).
OS_PROCESS_ATTRIBUTES = {"system", "popen"}
# Modules a student may import by their own name (where the rules above know `sys.modules`)
# that other modules hold too: `torch.sys`, `torch.os`, `torch.threading`.
HELD_MODULES = {"sys", "os", "threading"}
# The course's grading code (its checks, records and tripwires) and the names other course
# modules hold it under (`flashcourse.kernels.softmax.guards`): no cell of a lesson reaches it.
GRADING_PACKAGE = "flashcourse.checks"
GRADING_MODULES = {"checks", "registry", "recording", "guards", "tripwires"}
# Method calls that mutate a module-level container (e.g. registry.RESULTS.update(...)).
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert",
            "remove", "__setitem__", "__delitem__", "__setattr__", "__delattr__", "discard",
            "add"}
# Import roots whose attributes may be written by student code (plots only).
WRITABLE_ROOTS = {"plt", "matplotlib", "mpl"}
# torch's switches a student may set to a constant, and the values allowed: lower precision
# stays off (a check's own torch matmuls run under it too), cuDNN's choices either way.
WRITABLE_SETTINGS = {"torch.backends.cuda.matmul.allow_tf32": (False,),
                     "torch.backends.cudnn.allow_tf32": (False,),
                     "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": (False,),
                     "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": (False,),
                     "torch.backends.cudnn.benchmark": (False, True),
                     "torch.backends.cudnn.deterministic": (False, True)}
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


def _to_python(source: str, depth: int = 0) -> str:
    """The cell as IPython runs it: IPython's own transforms (an indented cell, `>>>` and `In
    [1]:` prompts, magics and shell escapes made calls). The code an allowed magic runs
    (`%time CODE`, `%timeit -n1 CODE`, a `%%time` cell's body, `%%timeit`'s setup line) is put
    in the magic's place as statements, so that every pass of the scan reads it as code; code
    of such a magic that does not parse is a finding (UNSCANNABLE)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # no IPython: magics then show up as syntax errors
        return source
    text = TransformerManager().transform_cell(source)
    if "get_ipython()" not in text or depth > MAX_MAGIC_DEPTH:
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    inliner = _MagicInliner(depth)
    tree = inliner.visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree)) if inliner.changed else text


MAX_MAGIC_DEPTH = 8  # magics inside magics followed, at most
UNSCANNABLE = "__flashcourse_unscannable_magic__"  # a name no cell binds: see _Scanner
TIMEIT_OPTIONS = "n:r:tcp:qo"  # IPython's %timeit options (its parse_options spec)


class _MagicInliner(ast.NodeTransformer):
    """`get_ipython().run_line_magic('time', CODE)` as a statement becomes CODE's statements
    (and a cell magic's line and body too), each transformed as a cell of its own."""

    def __init__(self, depth: int):
        self.depth = depth
        self.changed = False

    def visit_Expr(self, node: ast.Expr):
        call = node.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("run_line_magic", "run_cell_magic") and call.args
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                        for a in call.args)):
            return self.generic_visit(node)
        name, *texts = [a.value for a in call.args]
        if name not in ALLOWED_MAGICS or name not in ("time", "timeit"):
            return node
        statements = _magic_statements(name, texts, self.depth + 1)
        self.changed = True
        # the call stays, emptied, so that the magic itself is still seen
        call.args = [ast.Constant(name)] + [ast.Constant("") for _ in texts]
        return [node, *[ast.copy_location(s, node) for s in statements]]


def _magic_statements(name: str, texts: list[str], depth: int = 0) -> list[ast.stmt]:
    """The statements the magic `name` runs: its line (for timeit, after its options) and its
    cell, each read as a cell of its own; code that does not parse becomes a load of
    UNSCANNABLE, which the scan names."""
    texts = list(texts)
    if name == "timeit" and texts:  # options first: `-n1 -r1 CODE`
        texts[0] = _without_timeit_options(texts[0])
    statements = []
    for code in texts:
        if not code.strip():
            continue
        try:
            statements += ast.parse(_to_python(code, depth)).body
        except SyntaxError:
            statements.append(ast.Expr(ast.Name(UNSCANNABLE, ast.Load())))
    return statements


def _from_the_shell(func: ast.Attribute) -> bool:
    """`get_ipython().system(...)`, what IPython makes of `!cmd` (or any call's result)."""
    return isinstance(func.value, ast.Call)


def _without_timeit_options(line: str) -> str:
    try:
        from IPython.core.magic import Magics
    except ImportError:
        return line

    class _Table:
        options_table: dict = {}

    try:
        _, rest = Magics.parse_options(_Table(), line, TIMEIT_OPTIONS, posix=False,
                                       strict=False, preserve_non_opts=True)
    except Exception:  # noqa: BLE001  (IPython refuses the options: the magic fails too)
        return line
    return rest


class _TooDeep(Exception):
    """A cell nested deeper than Python's parser or the scan's recursive visitor can follow."""


def _parse_or_refuse(source: str) -> ast.Module | None:
    """A cell's syntax tree, magics turned into calls; None for a syntax error (a cell that does
    not parse cannot run either, so it is not tampering); _TooDeep for a cell nested too deeply
    to parse (a 5,000-term sum), which may well run."""
    try:
        return ast.parse(_to_python(source))
    except SyntaxError:
        return None
    except (RecursionError, MemoryError) as err:
        raise _TooDeep from err


def _parse(source: str) -> ast.Module | None:
    """`_parse_or_refuse`, with None for a cell too deep to parse too: `scan_cell` reports it."""
    try:
        return _parse_or_refuse(source)
    except _TooDeep:
        return None


def _root(node: ast.AST) -> str | None:
    """The name at the start of an attribute/subscript chain: `np` for `np.linalg.norm[0]`."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_private(name: str) -> bool:
    """`_name` or `__name`: private to its object by Python's convention (a dunder, whose rule
    is its own, and the blank `______` are not)."""
    return name.startswith("_") and not name.endswith("__") and bool(name.strip("_"))


def _private_in(target: ast.AST) -> str | None:
    """The first private attribute a write's target goes through (`rec._depth`, `a._b[0]`)."""
    while isinstance(target, (ast.Attribute, ast.Subscript)):
        if isinstance(target, ast.Attribute) and _is_private(target.attr):
            return target.attr
        target = target.value
    return None


def _dotted_node(dotted: str) -> ast.AST:
    """`a.b.c` as the attribute chain that spells it."""
    first, *rest = dotted.split(".")
    node: ast.AST = ast.Name(first)
    for part in rest:
        node = ast.Attribute(node, part)
    return node


@functools.lru_cache(maxsize=1)
def _grading_state() -> frozenset[str]:
    """The private names the course's grading modules keep their state under
    (`_record_in_progress`, `_student_depth`): written on anything, they switch a check or a
    tripwire off. Named so that a student's own attributes (`self._recording`) do not meet
    them; the modules' functions (plain or cached) are not state."""
    import types

    from ..checks import cases, class_items, guards, recording, registry, tripwires

    return frozenset(name for module in (cases, class_items, guards, recording, registry,
                                         tripwires)
                     for name, value in vars(module).items() if _is_private(name)
                     and not callable(value) and not isinstance(value, types.ModuleType))


def _in_grading_code(dotted: str) -> bool:
    return dotted == GRADING_PACKAGE or dotted.startswith(GRADING_PACKAGE + ".")


def _dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # a RecursionError on a deeply nested expression
        return "<expression>"


# ---------------------------------------------------------------- scopes, without recursion

def _parameters(args: ast.arguments) -> set[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {arg.arg for arg in every if arg is not None}


def _locals_of(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names a function or lambda binds in its own scope (parameters, assignments, nested
    definitions, imports), less those it declares global. Comprehension targets stay in the
    comprehension's scope; a walrus inside one binds here."""
    bound = _parameters(function.args)
    declared_global: set[str] = set()
    stack = list(function.body) if isinstance(function.body, list) else [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = [node.elt] if hasattr(node, "elt") else [node.key, node.value]
            for generator in node.generators:
                inner += [generator.iter, *generator.ifs]
            stack += inner
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        elif isinstance(node, ast.Global):
            declared_global.update(node.names)
        stack.extend(ast.iter_child_nodes(node))
    return bound - declared_global


def _global_loads(tree: ast.AST) -> set[int]:
    """ids of the Name nodes in `tree` that read a notebook-wide name: not a parameter or local
    of an enclosing function, lambda or comprehension (cells share one namespace)."""
    found: set[int] = set()
    stack: list[tuple[ast.AST, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        node, local = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            outer = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
            if not isinstance(node, ast.Lambda):  # decorators and annotations run outside
                every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg,
                         args.kwarg]
                outer += [*node.decorator_list, node.returns,
                          *(arg.annotation for arg in every if arg is not None)]
            inner = local | _locals_of(node)
            body = node.body if isinstance(node.body, list) else [node.body]
            stack += [(n, local) for n in outer if n is not None] + [(n, inner) for n in body]
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            first, *rest = node.generators
            inner = local | {name.id for generator in node.generators
                             for name in ast.walk(generator.target)
                             if isinstance(name, ast.Name)}
            stack.append((first.iter, local))  # the first iterable is read outside
            parts = [node.elt] if hasattr(node, "elt") else [node.key, node.value]
            parts += [*first.ifs, *(n for g in rest for n in (g.iter, *g.ifs))]
            stack += [(n, inner) for n in parts]
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                node.id not in local:
            found.add(id(node))
        stack.extend((child, local) for child in ast.iter_child_nodes(node))
    return found


def _decoded_names(tree: ast.AST) -> set[str]:
    """Names a cell binds to text it decoded (`src = base64.b64decode(blob).decode()`)."""
    return {name.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and _decodes(node.value, set())
            for target in node.targets for name in ast.walk(target)
            if isinstance(name, ast.Name)}


def _source_runners(tree: ast.AST) -> set[str]:
    """Names a cell binds to something that runs source text (`run = exec`,
    `run = code.InteractiveInterpreter().runsource`)."""
    return {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and ((isinstance(node.value, ast.Name) and node.value.id in SOURCE_CALLS)
                 or (isinstance(node.value, ast.Attribute)
                     and node.value.attr in DYNAMIC_ATTRIBUTES))
            for target in node.targets if isinstance(target, ast.Name)}


def _decodes(node: ast.AST, decoded: set[str]) -> bool:
    """Whether `node` decodes hidden text (base64, codecs, hex, zlib) or reads a name bound to
    some."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and inner.id in decoded:
            return True
        if isinstance(inner, ast.Call) and _called_name(inner.func) in DECODERS:
            return True
    return False


def _called_name(func: ast.AST) -> str:
    """The last name of what a call calls: `decode` for `blob.decode()`; "" for others."""
    return func.attr if isinstance(func, ast.Attribute) else \
        func.id if isinstance(func, ast.Name) else ""


class _Scanner(ast.NodeVisitor):
    def __init__(self, cell: str, imported: dict[str, str], global_loads: set[int] | None = None,
                 decoded: set[str] | None = None):
        self.cell = cell
        self.imported = imported  # name -> module it was imported from (across all cells)
        self.global_loads = global_loads  # ids of Name loads of notebook-wide names; None: all
        self.decoded = decoded or set()  # names the cell binds to decoded text
        self.runners: set[str] = set()  # names the cell binds to exec and the like
        self.findings: list[Finding] = []
        self.reported: set[int] = set()  # nodes a finding on their call already names
        self.depth = 0  # functions and classes around the node visited (0: the cell's top)

    def flag(self, node: ast.AST, what: str) -> None:
        self.findings.append(Finding(self.cell, getattr(node, "lineno", 0), what))

    # ---- bindings of protected names
    def _bind(self, node: ast.AST, name: str, how: str) -> None:
        """A name bound in the notebook's namespace: a method's or a nested function's names
        are its own (`global` is a finding of its own)."""
        if self.depth == 0 and (name in CANONICAL and name not in OWN_NAMES_ALLOWED
                                or name.startswith("_fc_")):
            self.flag(node, f"{how} `{name}`, which grading relies on")

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        try:
            self.generic_visit(node)
        finally:
            self.depth -= 1

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
            allowed = WRITABLE_SETTINGS.get(self._resolved(target), ())
            value = getattr(node, "value", None)
            if isinstance(node, ast.Assign) and isinstance(value, ast.Constant) and \
                    any(value.value is setting for setting in allowed):
                return
            if (root in CANONICAL and root not in OWN_NAMES_ALLOWED) or \
                    (root in self.imported and root not in WRITABLE_ROOTS):
                self.flag(node, f"{how} `{_dotted(target)}` (patches module `{root}`)")
            elif (private := _private_in(target)) and private in _grading_state():
                # on anything, `self` too: a function's first parameter may be any object
                self.flag(node, f"{how} `{_dotted(target)}`: `{private}` is private to the "
                                "object that holds it, and the course's grading code keeps its "
                                "state under that name")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, node, "assigns to")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node, "assigns to")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target, node, "assigns to")
        self._annotation(node.annotation)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self._annotation(node.annotation)
        self.generic_visit(node)

    def _annotation(self, node: ast.AST | None) -> None:
        """A string annotation is source that typing's helpers evaluate: only a type's name."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                not PLAIN_ANNOTATION.fullmatch(node.value):
            self.flag(node, "writes code in a string annotation (`"
                            f"{_short(node.value)}`), which typing's helpers run")

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
        self._annotation(node.returns)
        self._nested(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node, node.name, "defines a class named")
        self._nested(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._nested(node)

    def visit_Global(self, node: ast.Global) -> None:
        depth, self.depth = self.depth, 0  # what it declares binds the notebook's names
        try:
            for name in node.names:
                self._bind(node, name, "declares global")
        finally:
            self.depth = depth

    # ---- imports
    def _import(self, node: ast.AST, module: str, name: str, bound: str) -> None:
        top = module.split(".")[0]
        if top in FORBIDDEN_MODULES or module in FORBIDDEN_MODULES or \
                module.startswith(SHELL_MODULES) or name in SHELL_ATTRIBUTES:
            self.flag(node, f"imports `{module}`")
            return
        origin = f"{module}.{name}" if name else module
        if _in_grading_code(origin):
            self.flag(node, f"imports `{origin}`, the course's grading code")
            return
        if name.strip("_"):  # `from sys import settrace` reaches `sys.settrace` (no blank)
            self._check_attribute(node, name, _dotted_node(module), origin)
        if module and not _installed(top):
            self.flag(node, f"imports `{module}`, which is not installed here: a notebook "
                            "brings no module of its own (one it writes while it runs is code "
                            "the scan never sees)")
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
        module = (node.module or "") if not node.level else ""  # relative: fails in a notebook
        for alias in node.names:
            if alias.name == "*":
                if module.split(".")[0] not in ("math",):
                    self.flag(node, f"imports * from `{module}` (may shadow grading names)")
                continue
            self._import(node, module, alias.name, alias.asname or alias.name)

    # ---- reaching around
    def visit_Name(self, node: ast.Name) -> None:
        if node.id == UNSCANNABLE:
            self.flag(node, "runs code through a magic (`%time`, `%timeit`) that the scan "
                            "cannot read as Python; write the code as plain Python")
        elif node.id in FORBIDDEN_NAMES:
            self.flag(node, f"uses `{node.id}`")
        elif isinstance(node.ctx, ast.Load) and id(node) not in self.reported and \
                self._watched_call(node) and self._reads_global(node):
            # `imp = __import__`, `partial(getattr, F)`: a renamed call the scan cannot follow
            self.flag(node, f"uses `{node.id}` as a value, not in a call")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if id(node) not in self.reported:
            self._check_attribute(node, node.attr, node.value, _dotted(node))
        self.generic_visit(node)

    def _check_attribute(self, node: ast.AST, attr: str, owner: ast.AST | None,
                         text: str) -> None:
        """An attribute read, written `owner.attr`, looked up by a literal name or imported
        from a module (`owner`: what holds it, None when unknown)."""
        root = _root(owner) if owner is not None else None
        held_by = self._resolved(owner)
        if attr.startswith("__") and attr.endswith("__") and attr not in HARMLESS_DUNDERS:
            self.flag(node, f"reaches into `{text}`")
        elif attr == "modules" and held_by.rsplit(".", 1)[-1] == "sys":
            self.flag(node, f"uses `sys.modules` (`{text}`)")
        elif attr in HELD_MODULES and owner is not None:
            self.flag(node, f"reaches the module `{attr}` through `{text}` (a lesson imports "
                            "the modules it uses by their own names)")
        elif held_by.split(".")[0] == "flashcourse" and (
                _in_grading_code(f"{held_by}.{attr}") or attr in GRADING_MODULES
                or _is_private(attr)):
            self.flag(node, f"reaches the course's grading code or internals (`{text}`)")
        elif attr in ATTRIBUTE_MODULES:
            self.flag(node, f"reaches the module `{attr}` through `{text}`")
        elif attr in SHELL_ATTRIBUTES:
            self.flag(node, f"reaches the notebook's shell (`{text}`)")
        elif attr == "cell_contents":
            self.flag(node, f"reads a function's closure (`{text}`)")
        elif attr in FRAME_ATTRIBUTES:
            self.flag(node, f"reads running frames (`{text}`)")
        elif attr in HOOK_ATTRIBUTES:
            self.flag(node, f"installs or reaches a hook that runs on every call (`{text}`)")
        elif attr in KERNEL_MACHINERY:
            self.flag(node, f"reaches a Triton kernel's launch machinery (`{text}`)")
        elif attr in PROCESS_ATTRIBUTES or (attr in OS_PROCESS_ATTRIBUTES
                                            and held_by.rsplit(".", 1)[-1] == "os"):
            self.flag(node, f"starts another process (`{text}`): no check sees what it runs")
        elif attr in DYNAMIC_ATTRIBUTES and not self._from_forbidden_module(root):
            self.flag(node, f"resolves a name or runs source text at run time (`{text}`)")
        elif attr in LOOKUP_CALLS[1:] and isinstance(node, ast.Attribute):
            self.flag(node, f"uses `{text}` as a value, not in a call")

    def _resolved(self, owner: ast.AST | None) -> str:
        """The dotted name `owner` stands for, its first name read as what a cell imported or
        bound it to (`guards._x`: `flashcourse.checks.guards._x`); "" for any other
        expression."""
        parts = []
        while isinstance(owner, ast.Attribute):
            parts.append(owner.attr)
            owner = owner.value
        if not isinstance(owner, ast.Name):
            return ""
        first = self.imported.get(owner.id) or MODULE_ORIGINS.get(owner.id, owner.id)
        return ".".join([first, *reversed(parts)])

    def _from_forbidden_module(self, root: str | None) -> bool:
        """Whether `root` was imported from a refused module (its import is reported)."""
        return self.imported.get(root or "", "").split(".")[0] in FORBIDDEN_MODULES

    def _reads_global(self, node: ast.Name) -> bool:
        return self.global_loads is None or id(node) in self.global_loads

    def _watched_call(self, func: ast.AST) -> str | None:
        """Which watched call `func` names: one of LOOKUP_CALLS (the builtin, imported from
        `operator`, or any module's attribute) or, for a bare name, one of FORBIDDEN_CALLS."""
        if isinstance(func, ast.Name):
            origin = self.imported.get(func.id, "")
            if origin in ("operator.attrgetter", "operator.methodcaller"):
                return origin.split(".")[1]
            if func.id in FORBIDDEN_CALLS or func.id == "getattr":
                return func.id
        elif isinstance(func, ast.Attribute) and func.attr in LOOKUP_CALLS[1:]:
            return func.attr
        return None

    def _check_lookup(self, node: ast.Call, kind: str) -> None:
        """getattr(obj, name), attrgetter(name, ...), methodcaller(name, ...): a literal name is
        an attribute read like any other; a computed one hides what it reaches."""
        args = node.args
        if kind == "getattr":
            named = args[1:2]
        elif kind == "attrgetter":
            named = args
        else:
            named = args[:1]
        literal = all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in named)
        if not literal or any(isinstance(a, ast.Starred) for a in args):
            self.flag(node, "looks an attribute up by a computed name "
                            f"(`{_short(_dotted(node))}`)")
            return
        # attrgetter's object comes later: its first name is an attribute of something
        owner = args[0] if kind == "getattr" and args else ast.Name("<object>")
        for literal in named:
            for attr in literal.value.split("."):
                self._check_attribute(node, attr, owner, _short(_dotted(node)))
                owner = ast.Attribute(owner, attr)

    def _scan_magic_code(self, node: ast.Call, name: str) -> None:
        """A magic used as a value (`t = %timeit -o f()`): the code it runs, scanned here."""
        texts = [a.value for a in node.args[1:3]
                 if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        inner = ast.Module(body=_magic_statements(name, texts), type_ignores=[])
        for part in ast.walk(inner):  # findings name the magic's line
            if isinstance(part, (ast.stmt, ast.expr)):
                ast.copy_location(part, node)
        self.global_loads = (self.global_loads or set()) | _global_loads(inner)
        self.decoded |= _decoded_names(inner)
        self.runners |= _source_runners(inner)
        self.visit(inner)

    def _object_setattr(self, node: ast.Call) -> bool:
        """`object.__setattr__(owner, "name", value)` with `object` the builtin and a plain
        literal name: the same write as `owner.name = value`, checked as one."""
        func = node.func
        return isinstance(func, ast.Attribute) and func.attr == "__setattr__" and \
            isinstance(func.value, ast.Name) and func.value.id == "object" and \
            "object" not in self.imported and \
            len(node.args) == 3 and not node.keywords and \
            isinstance(node.args[0], (ast.Name, ast.Attribute)) and \
            isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) and \
            node.args[1].value.isidentifier() and not node.args[1].value.startswith("__")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        for keyword in node.keywords:  # np.load(allow_pickle=True), torch.load(weights_only=...)
            unsafe = {"allow_pickle": True, "weights_only": False}.get(keyword.arg or "")
            if unsafe is not None and not (isinstance(keyword.value, ast.Constant)
                                           and keyword.value.value is not unsafe):
                self.flag(node, f"unpickles data (`{keyword.arg}=`): a pickle runs any code")
            if keyword.arg in HOOK_KEYWORDS:
                self.flag(node, f"hands Triton a hook to run around a launch (`{keyword.arg}=`)")
        kind = self._watched_call(func)
        if kind:
            self.reported.add(id(func))  # named by this call's finding, not as a value
        if self._object_setattr(node):  # a frozen dataclass's __post_init__: a plain write
            self.reported.add(id(func))
            written = ast.Attribute(value=node.args[0], attr=node.args[1].value, ctx=ast.Store())
            self._target(ast.copy_location(written, node), node, "assigns to")
        if kind in LOOKUP_CALLS:
            self._check_lookup(node, kind)
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
            decoded = func.id in SOURCE_CALLS and _decodes(node, self.decoded)
            self.flag(node, f"calls `{func.id}()`" + (" on decoded text" if decoded else ""))
        runs_source = (isinstance(func, ast.Attribute) and func.attr in DYNAMIC_ATTRIBUTES) or \
            (isinstance(func, ast.Name) and func.id in self.runners)
        if runs_source and _decodes(node, self.decoded):
            self.reported.add(id(func))
            self.flag(node, f"runs decoded text through `{_dotted(func)}`")
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
            root = _root(func.value) or ""
            if root in ("fc", "flashcourse", "grading", "registry") or \
                    self.imported.get(root, "").startswith("flashcourse"):
                self.flag(node, f"mutates `{_dotted(func.value)}` of the course package")
        shell_call = func.attr in ("system", "getoutput") and _from_the_shell(func) \
            if isinstance(func, ast.Attribute) else False
        if isinstance(func, ast.Attribute) and (shell_call or func.attr in ("run_line_magic",
                                                                            "run_cell_magic")):
            magic = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) \
                else None
            if shell_call:  # `platform.system()` is no shell; `os.system` starts a process
                self.flag(node, f"runs a shell command (`!{magic}`); shell commands are not "
                                "allowed in graded notebooks")
            elif magic not in ALLOWED_MAGICS:
                self.flag(node, f"runs the IPython magic `%{magic}`; only "
                                f"{', '.join(sorted(ALLOWED_MAGICS))} are allowed")
            else:
                self._scan_magic_code(node, magic)
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
    return _with_aliases(sources, names)


def _with_aliases(sources: list[str], names: dict[str, str]) -> dict[str, str]:
    """`names` with every name a cell binds to an attribute or item of an imported or grading
    name (`rec = fc.checks.recording`, `rec = mods["..."]` after `mods = torch.sys.modules`):
    writing to it patches that module as much as the import's name does. Followed through
    chains of such names, in any cell order."""
    roots = {**MODULE_ORIGINS, **names}
    pairs = []
    for source in sources:
        tree = _parse(source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Assign):
                pairs += [(target, node.value) for target in node.targets]
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                pairs.append((node.target, node.value))
    pairs = [(t.id, v) for t, v in _unpacked(pairs) if isinstance(t, ast.Name)]
    for _ in range(len(pairs) + 1):
        grown = False
        for name, value in pairs:
            root = _chain_root(value)
            if root in roots and name not in roots and name != root:
                roots[name] = roots[root] + _dotted(value)[len(root):]
                names[name] = roots[name]
                grown = True
        if not grown:
            break
    return names


def _chain_root(node: ast.AST) -> str | None:
    """The name an attribute and item chain starts at (`mods` for `mods["x"].y`), None for
    anything else (a call's result is a new object, not a part of a module)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _unpacked(pairs):
    """(target, value) pairs with `a, b = x, y` taken apart."""
    for target, value in pairs:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            yield from _unpacked(list(zip(target.elts, value.elts, strict=True)))
        else:
            yield target, value


def scan_cell(cell_label: str, source: str, imported: dict[str, str]) -> list[Finding]:
    """Findings of tampering in one student cell (a syntax error is not tampering; a cell too
    deeply nested to follow is a finding: it could hide anything)."""
    scanner = _Scanner(cell_label, imported)
    try:
        tree = _parse_or_refuse(source)
        if tree is None:
            return []
        scanner.global_loads, scanner.decoded = _global_loads(tree), _decoded_names(tree)
        scanner.runners = _source_runners(tree)
        scanner.visit(tree)
    except (_TooDeep, RecursionError, MemoryError):
        return [*scanner.findings, Finding(cell_label, 0, TOO_DEEP)]
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
    every = imported_names([cell_source(c) for c in cells if c.get("cell_type") == "code"])
    return findings + kernel_free_names(student, every)


# Python builtins a Triton kernel may name (its compiler knows them; in the interpreter any
# name would run as plain Python, which a kernel on the GPU cannot)
KERNEL_BUILTINS = {"range", "min", "max", "len", "int", "float", "abs", "bool", "print",
                   "isinstance", "zip", "enumerate", "True", "False", "None",
                   "______", "NotImplementedError"}  # a blank, a stub: scored as not answered


def _decorator_names(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[str]:
    """The dotted names of a definition's decorators (`triton.autotune(...)`: its callee)."""
    return [_dotted(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]


def _jit_functions(trees) -> dict[str, list[ast.FunctionDef]]:
    """label -> the functions of that cell carrying one of Triton's decorators."""
    found: dict[str, list[ast.FunctionDef]] = {}
    for label, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and \
                    set(_decorator_names(node)) & KERNEL_DECORATORS:
                found.setdefault(label, []).append(node)
    return found


def _constants(trees) -> set[str]:
    """Names the cells bind, at their top level, only to constants: numbers (literals and
    arithmetic on them, `math`'s constants and functions), Triton's dtypes (`tl.float32`),
    other such names, or tl.constexpr of one; one by one or unpacked (`A, B = 1.0, 2.0`)."""
    values: dict[str, list[ast.AST | None]] = {}
    for _, tree in trees:
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target, value in _unpacked([(t, node.value) for t in targets]):
                    for name in ast.walk(target):  # a name unpacked from one value: not known
                        if isinstance(name, ast.Name):
                            values.setdefault(name.id, []).append(
                                _constexpr_of(value) if name is target else None)
            else:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                        values.setdefault(sub.id, []).append(None)
    known: set[str] = set()
    for _ in range(len(values) + 1):  # a constant made of constants bound before or after
        grown = {name for name, bound in values.items() if name not in known and
                 all(value is not None and _constant(value, known) for value in bound)}
        if not grown:
            return known
        known |= grown
    return known


CONSTEXPR_CALLS = {"tl.constexpr", "triton.language.constexpr", "float", "int"}
# Triton's dtypes, which a kernel may take from a global (`ACC = tl.constexpr(tl.float32)`)
TRITON_DTYPES = {"int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "float16", "bfloat16", "float32", "float64", "float8e4nv",
                 "float8e5", "float8e4b15", "float8e4b8", "float8e5b16"}


def _constexpr_of(value: ast.AST) -> ast.AST | None:
    """What `tl.constexpr(x)`, `float(x)` or `int(x)` wraps (None for other arguments), or
    `value` itself."""
    if isinstance(value, ast.Call) and _dotted(value.func) in CONSTEXPR_CALLS:
        return value.args[0] if len(value.args) == 1 and not value.keywords else None
    return value


def _constant(node: ast.AST, known: set[str]) -> bool:
    """Whether an expression is a Triton dtype or numbers (`_numeric`)."""
    if isinstance(node, ast.Attribute) and node.attr in TRITON_DTYPES and \
            _dotted(node.value) in ("tl", "triton.language"):
        return True
    return _numeric(node, known)


def _numeric(node: ast.AST, known: set[str]) -> bool:
    """Whether an expression is arithmetic on literals, `math` and the names in `known`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id not in known and sub.id != "math":
            return False
        if isinstance(sub, ast.Call) and not _dotted(sub.func).startswith("math.") and \
                _dotted(sub.func) not in CONSTEXPR_CALLS:
            return False
        if not isinstance(sub, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Name, ast.Call,
                                ast.Attribute, ast.Load, ast.operator, ast.unaryop)):
            return False
    return True


def kernel_free_names(student: list[tuple[str, str]], imported: dict[str, str]) -> list[Finding]:
    """A @triton.jit function names nothing from outside it but triton, other @triton.jit
    functions (its cells' or the course kernels' a cell imports), the builtins the compiler
    knows and constants: in Triton's interpreter its body is plain Python, and a notebook
    function, numpy or torch called from it would do the work on the CPU where no kernel on
    the GPU could. `imported`: the names every code cell imports."""
    trees = [(label, tree) for label, source in student
             if (tree := _parse(source)) is not None]
    kernels = _jit_functions(trees)
    allowed = ({"tl", "triton"} | KERNEL_BUILTINS | _constants(trees)
               | {f.name for found in kernels.values() for f in found}
               | {name for name, origin in imported.items()
                  if origin.startswith(("triton", "flashcourse.kernels."))
                  # not a name bound to what a kernel's body may not reach (`triton.runtime`)
                  and not set(origin.split(".")) & KERNEL_REFUSED_ATTRIBUTES})
    findings = []
    for label, found in kernels.items():
        for kernel in found:
            local = _locals_of(kernel)
            for node in ast.walk(kernel):
                if isinstance(node, ast.Attribute) and node.attr in KERNEL_REFUSED_ATTRIBUTES:
                    findings.append(Finding(label, node.lineno, (
                        f"the @triton.jit function `{kernel.name}` reaches `{_dotted(node)}`, "
                        "which no kernel on the GPU has")))
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                        node.id not in local and node.id not in allowed:
                    findings.append(Finding(label, node.lineno, (
                        f"the @triton.jit function `{kernel.name}` uses `{node.id}`, which is "
                        "not part of Triton, another @triton.jit function or a constant: a "
                        "kernel's body runs on the GPU")))
                    allowed.add(node.id)  # once per name
    return findings


# ---------------------------------------------------------------- answers that do the work

# Modules of the package that hold references and finished kernels; an answer cell must not
# reach them (demo cells may, to compare).
REFERENCE_MODULES = ("flashcourse.reference", "flashcourse.kernels", "flashcourse.checks",
                     "flashcourse.checks.registry",
                     "flashcourse.checks.recording",
                     # the benchmarks' providers call SDPA and a naive attention for whoever
                     # calls them; the ring's tries compute gradients by autograd; the state
                     # algebra is lesson 5's answer
                     "flashcourse.bench", "flashcourse.distributed.tries",
                     "flashcourse.models.softmax_states")
# Modules among those that hold only data an answer may use: the table of tiles, warps and
# stages (numbers and nothing else: no import, no function, so nothing to reach through it).
DATA_MODULES = ("flashcourse.kernels.tiles",)


def _names_reference(name: str) -> bool:
    return name.startswith(REFERENCE_MODULES) and not any(
        name == data or name.startswith(data + ".") for data in DATA_MODULES) and \
        name not in _kernel_runners()


@functools.cache
def _kernel_runners() -> frozenset[str]:
    """The lessons' runners (`flashcourse.kernels.softmax.online_softmax`): functions of
    flashcourse.kernels whose first parameter is the `kernel` they launch, with no default
    (nothing of the course's own runs in its place). An answer cell may run its own kernel
    through them. Read from the source, so nothing is imported."""
    import importlib.util

    spec = importlib.util.find_spec("flashcourse.kernels")
    runners = set()
    for path in Path(spec.origin).parent.glob("*.py") if spec and spec.origin else ():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            args = node.args if isinstance(node, ast.FunctionDef) else None
            if args is not None and args.args and args.args[0].arg == "kernel" and \
                    len(args.defaults) < len(args.args) and not node.name.startswith("_"):
                runners.add(f"flashcourse.kernels.{path.stem}.{node.name}")
    return frozenset(runners)
# Library calls that compute what an exercise asks the student to write (private spellings
# such as `torch._softmax` or aten's `_scaled_dot_product_flash_attention` count too).
REFERENCE_ATTRIBUTES = {"scaled_dot_product_attention", "softmax", "log_softmax",
                        "flash_attention", "flex_attention", "standard_attention",
                        "multi_head_attention_forward", "Softmax", "LogSoftmax",
                        "MultiheadAttention"}
# Library machinery that computes a derivative: an answer that derives a backward pass uses
# none of it (`torch._native_multi_head_attention`, `torch._safe_softmax` and other private
# spellings of softmax and attention count as references above).
# (`torch.autograd.Function`, which wraps the student's own kernels, is not among them).
GRADIENT_ATTRIBUTES = {"backward", "requires_grad", "requires_grad_", "vjp", "jvp", "jacrev",
                       "jacfwd", "grad"}
# Helpers followed from an answer towards a reference, at most (`a` calls `b` calls `c`...).
MAX_HELPER_DEPTH = 64


def _is_reference_attribute(name: str) -> bool:
    lowered = name.lower()
    return name in REFERENCE_ATTRIBUTES or name.lstrip("_") in REFERENCE_ATTRIBUTES or \
        (name.startswith("_") and ("softmax" in lowered or "attention" in lowered)) or \
        name in GRADIENT_ATTRIBUTES or \
        "scaled_dot_product" in name


@functools.cache
def _installed(top: str) -> bool:
    """Whether a top-level module `top` can be imported here (found, not imported)."""
    import importlib.util

    try:
        return top in sys.builtin_module_names or importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


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


def _resolves_to_reference(dotted: str, aliases: dict[str, str]) -> bool:
    """Whether `root.rest` names a reference through what `root` was imported as: a module of
    REFERENCE_MODULES or something in one, or a library reference imported by name
    (`from torch.nn.functional import softmax as sm`)."""
    root, _, rest = dotted.partition(".")
    module = aliases.get(root, "")
    if not module:
        return False
    full = f"{module}.{rest}" if rest else module
    return _names_reference(full) or _is_reference_attribute(module.rsplit(".", 1)[-1])


def _literal_lookups(node: ast.Call, aliases: dict[str, str]) -> list[tuple[ast.AST | None, str]]:
    """(object, dotted name) of each attribute a call looks up by a literal name:
    getattr(obj, "name"), attrgetter("a.b")(obj), attrgetter("a.b"), methodcaller("name")."""
    def literals(call: ast.Call) -> list[str]:
        return [a.value for a in call.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)]

    def called(call: ast.Call) -> str:
        func = call.func
        if isinstance(func, ast.Name):
            return aliases.get(func.id, func.id).removeprefix("operator.")
        return func.attr if isinstance(func, ast.Attribute) else ""

    args = node.args
    if called(node) == "getattr" and len(args) >= 2 and isinstance(args[1], ast.Constant) and \
            isinstance(args[1].value, str):
        return [(args[0], args[1].value)]
    if called(node) in ("attrgetter", "methodcaller"):
        return [(None, text) for text in literals(node)]
    if isinstance(node.func, ast.Call) and args and \
            called(node.func) in ("attrgetter", "methodcaller"):  # attrgetter("a.b")(torch)
        return [(args[0], text) for text in literals(node.func)]
    return []


def _reference_in(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The reference `node` itself uses, in words; None when it uses none."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        if isinstance(node, ast.ImportFrom):  # what it binds: module.name, or all of module
            names = [node.module or "" if alias.name == "*" else f"{node.module}.{alias.name}"
                     for alias in node.names]
        else:
            names = [alias.name for alias in node.names]
        return next((n for n in names if _names_reference(n)
                     or _is_reference_attribute(n.rsplit(".", 1)[-1])), None)
    if isinstance(node, ast.Call):
        applied = isinstance(node.func, ast.Call)  # attrgetter(...)(obj): its names seen inside
        for obj, dotted in _literal_lookups(node, aliases):
            named = not applied and any(_is_reference_attribute(p) for p in dotted.split("."))
            if named or (obj is not None and _resolves_to_reference(f"{_dotted(obj)}.{dotted}",
                                                                    aliases)):
                return _short(_dotted(node))
        return None
    if isinstance(node, ast.Attribute) and _is_reference_attribute(node.attr):
        return _dotted(node)
    if isinstance(node, (ast.Attribute, ast.Name)):
        dotted = _dotted(node)
        if _resolves_to_reference(dotted, aliases):
            return dotted
    return None


def _global_bindings(tree: ast.Module, library: set[str]) -> list[tuple[str, ast.AST]]:
    """(name, what it is bound to) for each notebook-wide name a cell binds: definitions,
    assignments, loop and `with` targets, names a function declares global (bound to the whole
    function), and containers filled by a method call (`helpers.append(f)`), in the cell's
    body or in a function's, lambda's or class's (`store["f"] = f` with `store` no local of
    it). Module attributes (`library`) are left out: the tamper scan refuses writes to them."""
    found: list[tuple[str, ast.AST]] = []
    # each node with the names local where it runs; None at the cell's top level
    stack: list[tuple[ast.AST, frozenset[str] | None]] = [(node, None) for node in tree.body]
    while stack:
        node, local = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            if local is None and not isinstance(node, ast.Lambda):
                found.append((node.name, node))
                found += [(name, node) for inner in ast.walk(node)
                          if isinstance(inner, ast.Global) for name in inner.names]
            inner = frozenset() if local is None else local  # a class body binds no global
            if not isinstance(node, ast.ClassDef):
                inner |= _locals_of(node)
            body = node.body if isinstance(node.body, list) else [node.body]
            stack += [(part, inner) for part in body]
            continue
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value:
            pairs = [(node.target, node.value)]
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            pairs = [(node.target, node.iter)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs = [(node.optional_vars, node.context_expr)]
        elif isinstance(node, ast.ImportFrom):
            pairs = [(ast.Name(alias.asname or alias.name),
                      ast.ImportFrom(node.module, [alias], node.level)) for alias in node.names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            pairs = [(ast.Attribute(node.func.value), node)]  # `helpers.append(f)`: a write
        for target, value in pairs:
            for part in _target_parts(target):
                if isinstance(part, ast.Name):
                    if local is None:
                        found.append((part.id, value))
                elif (root := _root(part)) and root not in library and \
                        root not in (local or ()):
                    found.append((root, value))  # `table["x"] = f` fills `table`
        stack.extend((child, local) for child in ast.iter_child_nodes(node))
    return found


def _target_parts(target: ast.AST) -> list[ast.AST]:
    """The names and attribute or item writes an assignment target is made of."""
    parts, stack = [], [target]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Tuple, ast.List)):
            stack += node.elts
        elif isinstance(node, ast.Starred):
            stack.append(node.value)
        else:
            parts.append(node)
    return parts


def _shape(node: ast.AST) -> str:
    """What a binding says, line numbers aside: equal for a lesson cell left as it was."""
    try:
        return ast.dump(node)
    except (RecursionError, MemoryError):
        return ""


@dataclass(frozen=True)
class _Reach:
    cell: str  # the cell that binds the name
    reference: str  # the reference it reaches, in words
    through: tuple[str, ...]  # the names on the way, nearest first


def _names_reaching_references(parsed: list[tuple[str, ast.Module, set[int]]],
                               aliases: dict[str, str], library: set[str],
                               given: set[tuple[str, str]]) -> dict[str, list[_Reach]]:
    """Every notebook-wide name whose binding reaches a reference, itself or through other such
    names (followed MAX_HELPER_DEPTH deep). A binding the lesson's own cells make (`given`:
    lesson 8's `machine_backends` offers SDPA on purpose) is no reference by itself, but still
    carries one that a student's name it reads reaches."""
    bindings: list[tuple[str, str, set[str]]] = []  # name, cell, notebook-wide names read
    reaching: dict[str, list[_Reach]] = {}
    reached: set[int] = set()  # indices of the bindings found to reach a reference
    queue: deque[tuple[str, int]] = deque()
    for label, tree, loads in parsed:
        for name, value in _global_bindings(tree, library):
            read = {n.id for n in ast.walk(value) if isinstance(n, ast.Name) and id(n) in loads}
            bindings.append((name, label, read))
            own = None if (name, _shape(value)) in given else next(
                (found for inner in ast.walk(value) if (found := _reference_in(inner, aliases))),
                None)
            if own:
                reached.add(len(bindings) - 1)
                if name not in reaching:
                    queue.append((name, 0))
                reaching.setdefault(name, []).append(_Reach(label, own, ()))
    readers: dict[str, list[int]] = {}
    for index, (_, _, read) in enumerate(bindings):
        for name in read:
            readers.setdefault(name, []).append(index)
    while queue:
        name, depth = queue.popleft()
        if depth >= MAX_HELPER_DEPTH:
            continue
        first = reaching[name][0]
        for index in readers.get(name, []):
            reader, label, _ = bindings[index]
            if index in reached:
                continue
            reached.add(index)
            if reader not in reaching:
                queue.append((reader, depth + 1))
            reaching.setdefault(reader, []).append(
                _Reach(label, first.reference, (name, *first.through)))
    return reaching


def _lesson_bindings(lesson_cells: list[dict], answer_ids: set[str],
                     library: set[str]) -> set[tuple[str, str]]:
    """(name, shape) of what the lesson's own code cells bind (not its answer cells)."""
    given = set()
    for cell in lesson_cells:
        cell_id = cell.get("id")
        if cell.get("cell_type") != "code" or cell_id in answer_ids or is_grading_id(cell_id):
            continue
        tree = _parse(cell_source(cell))
        if tree is not None:
            given |= {(name, _shape(value)) for name, value in _global_bindings(tree, library)}
    return given


def reference_calls(cells: list[dict], answer_ids: set[str],
                    lesson_cells: list[dict] | None = None) -> list[Finding]:
    """Uses of a reference in the answer cells (`answer_ids`): library attention or softmax,
    or the package's own reference, attention helpers, kernels or checks, reached directly,
    by a literal getattr, or through a name bound in another cell whose binding reaches one.
    `lesson_cells`: the exercise notebook's cells, whose own bindings are given to the student
    (the grader passes them; without them no binding is the lesson's)."""
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
    library = set(CANONICAL) | set(aliases)
    given = _lesson_bindings(lesson_cells or [], answer_ids, library)
    parsed = [(label, tree, _global_loads(tree)) for label, source in student
              if (tree := _parse(source)) is not None]
    reaching = _names_reaching_references(parsed, aliases, library, given)
    findings = []
    for label, tree, loads in parsed:
        if label not in answer_ids:
            continue
        self_tests = _self_test_calls(tree)
        for node in ast.walk(tree):
            if id(node) in self_tests:
                continue
            line = getattr(node, "lineno", 0)
            found = _reference_in(node, aliases)
            if found:
                findings.append(Finding(label, line, f"uses the reference `{found}` in an "
                                                     f"answer{SELF_TEST_NOTE}"))
                continue
            elsewhere = [r for r in reaching.get(getattr(node, "id", ""), []) if r.cell != label]
            if elsewhere and id(node) in loads:
                reach = elsewhere[0]
                way = f" by way of {', '.join(f'`{n}`' for n in reach.through)}" \
                    if reach.through else ""
                findings.append(Finding(
                    label, line, f"uses `{node.id}` (bound in `{reach.cell}`) in an answer: it "
                                 f"reaches the reference `{reach.reference}`{way}"
                                 f"{SELF_TEST_NOTE}"))
    unique = {str(f): f for f in findings}
    return list(unique.values())


# What a reference in an answer cell may do instead: test the answer, outside it.
SELF_TEST_NOTE = ("; an answer does its work itself: to test it against the reference, "
                  "compare the two in an `assert` of the cell or in a cell of your own")


# Testing functions a self-test calls instead of `assert` (`np.testing.assert_allclose`).
TESTING_CALLS = {"assert_allclose", "assert_close", "assert_array_equal", "assert_equal",
                 "assert_array_almost_equal", "assert_almost_equal"}


def _self_test_calls(tree: ast.Module) -> set[int]:
    """ids of the nodes naming what a self-test calls (`assert np.allclose(mine(x),
    reference(x))`, `np.testing.assert_allclose(...)`, at the cell's top level or in its loops
    and branches, never in a function): a reference whose result only feeds the test. The
    test may bind nothing (no walrus), make no function (no lambda) and no generator that
    outlives it (one `all` or `any` consumes is fine) that would keep the reference or its
    result; a call writing into an argument (`out=`) is no test."""
    found: set[int] = set()
    for test in _test_expressions(tree.body):
        inner = list(ast.walk(test))
        consumed = {id(node.args[0]) for node in inner if isinstance(node, ast.Call)
                    and _called_name(node.func) in ("all", "any") and len(node.args) == 1}
        if any(isinstance(node, (ast.NamedExpr, ast.Lambda)) or (
                isinstance(node, ast.GeneratorExp) and id(node) not in consumed)
               for node in inner):
            continue
        looped = {name.id for node in inner if isinstance(node, ast.comprehension)
                  for name in ast.walk(node.target) if isinstance(name, ast.Name)}
        for call in inner:
            if isinstance(call, ast.Call) and _dotted_name_root(call.func) not in (None, *looped) \
                    and all(keyword.arg not in (None, "out") for keyword in call.keywords):
                found |= {id(part) for part in ast.walk(call.func)}
    return found


def _test_expressions(body: list[ast.stmt]):
    """The tests of a cell's self-tests: each `assert`'s test and each testing call, at the top
    level or in loops, branches and `with` blocks (not in a function or class)."""
    for statement in body:
        if isinstance(statement, ast.Assert):
            yield statement.test
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) and \
                _called_name(statement.value.func) in TESTING_CALLS:
            yield statement.value
        elif isinstance(statement, (ast.For, ast.While, ast.If, ast.With)):
            yield from _test_expressions([*statement.body, *getattr(statement, "orelse", [])])


def _dotted_name_root(node: ast.AST) -> str | None:
    """The first name of a dotted name (`np` for `np.linalg.norm`); None for any other
    expression."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


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
                names = _decorator_names(node)
                jit = isinstance(node, ast.FunctionDef) and "triton.jit" in names and \
                    all(name in KERNEL_DECORATORS for name in names)
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
            problems.append(f"{exercise_id}: `{name}` is not defined as a @triton.jit function "
                            "(decorated by Triton's own decorators only)")
        elif others:
            problems.append(f"{exercise_id}: `{name}` is bound again outside its @triton.jit "
                            f"definition (in {', '.join(others)})")
    return problems
