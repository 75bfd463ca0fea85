"""The references' tripwires (checks/tripwires.py), in fresh processes: installed, they import
nothing (lesson 1 never loads torch), wire each reference as its module's import completes (a
copy taken right after `import torch` is the tripwire), and name the references loaded without
one when the import hook was taken away or an original put back. The graded attacks of
tests/test_grade.py check the same in the sandbox, end to end."""

import json
import subprocess
import sys

PRELUDE = """
import json, sys
from flashcourse.checks import tripwires
tripwires.install()
def wired(value):
    return getattr(value, "__flashcourse_tripwire__", None)
"""


def _run(body: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PRELUDE + body], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_references_are_wired_as_their_modules_load():
    found = _run("""
before = "torch" in sys.modules
import torch
copy = torch.nn.functional.scaled_dot_product_attention
from flashcourse.reference import standard_attention
print(json.dumps({"torch before": before, "copy": wired(copy),
                  "softmax": wired(torch.softmax), "method": wired(torch.Tensor.softmax),
                  "reference": wired(standard_attention), "gone": tripwires.intact()}))
""")
    assert found == {"torch before": False,
                     "copy": "torch.nn.functional.scaled_dot_product_attention",
                     "softmax": "torch.softmax", "method": "torch.Tensor.softmax",
                     "reference": "flashcourse.reference.standard_attention", "gone": []}


def test_a_reference_loaded_past_the_hook_or_put_back_is_named():
    found = _run("""
sys.meta_path[:] = [f for f in sys.meta_path if "tripwire" not in type(f).__module__]
import torch
unhooked = tripwires.intact()
from flashcourse import reference
import inspect
original = inspect.getclosurevars(reference.softmax).nonlocals["original"]
reference.softmax = original
print(json.dumps({"unhooked": unhooked, "wired": wired(torch.softmax),
                  "put back": tripwires.intact()}))
""")
    assert found["wired"] is None
    assert "torch.softmax" in found["unhooked"]
    assert "torch.nn.functional.scaled_dot_product_attention" in found["unhooked"]
    assert "flashcourse.reference.softmax" not in found["unhooked"]  # wired at install
    assert "flashcourse.reference.softmax" in found["put back"]


def test_a_tripwire_does_not_hand_out_its_original():
    """functools.wraps leaves `__wrapped__` on a wrapper: a name resolved at run time
    (`pydoc.locate("flashcourse.reference.standard_attention.__wrapped__")`) would reach the
    reference past its tripwire."""
    found = _run("""
import pydoc
from flashcourse import reference
wire = reference.standard_attention
print(json.dumps({"wired": wired(wire), "wrapped": hasattr(wire, "__wrapped__"),
                  "located": wired(pydoc.locate("flashcourse.reference.standard_attention")),
                  "name": wire.__name__}))
""")
    assert found == {"wired": "flashcourse.reference.standard_attention", "wrapped": False,
                     "located": "flashcourse.reference.standard_attention",
                     "name": "standard_attention"}


def test_a_reference_handed_to_library_code_or_a_check_helper_is_a_hit(tmp_path):
    """What the tripwire counts as the student's call: the nearest caller outside Python and
    the environment (past functools or a thread pool the reference was handed to, past course
    code that only calls what it was handed), or no such caller at all; every function a
    lesson's check module defines is a reference too. A course stand-in whose own code names
    the reference (lesson 8's backends) calls it for the course."""
    student = tmp_path / "student_cell.py"  # stands for a notebook cell: outside every library
    student.write_text(
        "import concurrent.futures, functools\n"
        "from flashcourse import reference\n"
        "import torch\n"
        "from flashcourse.checks import gpu_flash\n"
        "def via_thread(q):\n"
        "    pool = concurrent.futures.ThreadPoolExecutor(1)\n"
        "    return pool.submit(reference.standard_attention, q, q, q).result()\n"
        "def via_dispatch(q):\n"
        "    return functools.singledispatch(reference.standard_attention)(q, q, q)\n"
        "def via_check_helper(q):\n"
        "    return gpu_flash.blocked_attention(q, q, q, 4)\n"
        "def via_course_forwarder(q):\n"  # course code that only calls what it is handed
        "    from flashcourse.checks import guards\n"
        "    return guards._synchronized(functools.partial(reference.standard_attention,\n"
        "                                                  q, q, q))\n"
        "def via_stand_in(q):\n"  # a course stand-in whose own code calls the reference
        "    t = torch.from_numpy(q)[None, None]\n"
        "    return BACKEND(t, t, t)\n")
    found = _run(f"""
import functools, importlib.util
import numpy as np
import torch
from flashcourse.checks import gpu_flash, recording
hits = []
recording.publish = lambda mime, data: hits.append(data["name"])
spec = importlib.util.spec_from_file_location("student_cell", {str(student)!r})
cell = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cell)
q = np.random.default_rng(0).standard_normal((8, 4))
cell.via_check_helper(q)  # outside a check: no hit
from flashcourse.checks.performance import tools  # the check hands the student a stand-in
cell.BACKEND = tools._stub_backends(["course"], torch.zeros(2, dtype=torch.int64))["course"]
outside = list(hits)
first = {{}}
for name in ("via_thread", "via_dispatch", "via_check_helper", "via_course_forwarder",
             "via_stand_in"):
    hits.clear()
    recording.student_call(name, lambda: getattr(cell, name)(q))
    first[name] = hits[0] if hits else None
print(json.dumps({{"outside": outside, "first": first, "gone": tripwires.intact()}}))
""")
    assert found["outside"] == [] and found["gone"] == [], found
    assert found["first"] == {"via_thread": "flashcourse.reference.standard_attention",
                              "via_dispatch": "flashcourse.reference.standard_attention",
                              "via_check_helper": "flashcourse.checks.gpu_flash."
                                                  "blocked_attention",
                              "via_course_forwarder": "flashcourse.reference."
                                                      "standard_attention",
                              "via_stand_in": None}, found


def test_an_answer_whose_class_calls_a_reference_is_a_hit():
    """An object whose class's __call__ is a reference (a staticmethod): the check calls the
    reference itself, with no frame of the student's between."""
    found = _run("""
from flashcourse.checks import recording
from flashcourse.models import roofline
hits = []
recording.publish = lambda mime, data: hits.append(data["name"])
class Answer:
    __call__ = staticmethod(roofline.gemm_intensity)
class Honest:
    def __call__(self, *args):
        return 0.0
tripwires.flag_answer(Answer())
tripwires.flag_answer(Honest())
tripwires.flag_answer(lambda *args: 0.0)
print(json.dumps({"hits": hits}))
""")
    assert found == {"hits": ["flashcourse.models.roofline.gemm_intensity"]}, found


def test_a_profile_hook_set_while_a_check_hands_over_student_code_is_in_its_record():
    """A profile or trace function sees a course launcher's locals while the check runs the
    student's kernel (it can write the launcher's output for an empty kernel): the record says
    which hooks were set when the check handed student code over."""
    found = _run("""
import os
from flashcourse.checks import recording
published = []
recording.publish = lambda mime, data: published.append(data)
os.environ[recording.RECORD_CHANNEL_ENV] = "display"
def check(hook):
    sys.setprofile(hook)
    with recording.recording("x/y", None):
        recording.student_call("run", lambda: sys.setprofile(None))  # a hook that leaves
    return published.pop()["hooks_set"]
print(json.dumps({"none": check(None), "profile": check(lambda *args: None),
                  "now": tripwires.hooks_set()}))
""")
    assert found == {"none": [], "profile": ["sys.setprofile"], "now": []}, found


def test_a_torch_mode_is_a_hook_and_the_default_device_is_not():
    """A torch function mode sees the interpreter's copies of a kernel's tensors (it wrote
    softmax into an empty kernel's output); torch's default device is a mode of torch's own."""
    found = _run("""
import torch
from torch.overrides import TorchFunctionMode
class Fill(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
with Fill():
    inside = tripwires.hooks_set()
with torch.device("cpu"):
    device = tripwires.hooks_set()
print(json.dumps({"mode": inside, "device": device, "after": tripwires.hooks_set()}))
""")
    assert found == {"mode": ["torch function mode Fill"], "device": [], "after": []}, found


def test_a_pre_run_hook_on_a_kernel_answer_and_triton_launch_hooks_are_hooks():
    """A pre-run hook runs on the host with a launch's arguments before the kernel (in the
    interpreter it wrote softmax into the copies an empty kernel hands back); the check notes
    each kernel it is handed, and Triton's launch hooks are hooks too."""
    found = _run("""
import tempfile, pathlib, triton
from flashcourse.checks import guards
folder = tempfile.mkdtemp()  # @triton.jit reads its kernel's source from a file
pathlib.Path(folder, "empty.py").write_text(
    "import triton\\nimport triton.language as tl\\n@triton.jit\\ndef empty_kernel(x_ptr):\\n"
    "    row = tl.program_id(0)\\n")
sys.path.insert(0, folder)
from empty import empty_kernel
guards.require_jit_kernel(empty_kernel, "x/y")
before = tripwires.hooks_set()
empty_kernel.add_pre_run_hook(lambda *args, **kwargs: None)
hooked = tripwires.hooks_set()
empty_kernel.pre_run_hooks.clear()
chain = triton.knobs.runtime.launch_enter_hook
chain.add(print)
launch = tripwires.hooks_set()
chain.remove(print)
print(json.dumps({"before": before, "hooked": hooked, "launch": launch,
                  "after": tripwires.hooks_set()}))
""")
    assert found == {"before": [], "hooked": ["pre-run hook on kernel empty_kernel"],
                     "launch": ["triton launch_enter_hook"], "after": []}, found


def test_a_kernel_answer_whose_launch_machinery_was_replaced_is_named():
    """An empty kernel whose `run` was replaced on the object (through an alias or
    object.__setattr__) launched host code that wrote softmax; so could a replaced function,
    and in the interpreter a replaced rewriter or a poisoned cache of rewritten functions."""
    found = _run("""
import os, tempfile, pathlib
from flashcourse.checks import guards
folder = tempfile.mkdtemp()  # @triton.jit reads its kernel's source from a file
sys.path.insert(0, folder)
def kernel(module, interpret):
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    pathlib.Path(folder, module + ".py").write_text(
        "import triton\\nimport triton.language as tl\\n@triton.jit\\ndef k(x_ptr):\\n"
        "    row = tl.program_id(0)\\n\\ndef fill(x_ptr):\\n    return 0\\n")
    loaded = __import__(module)
    guards.require_jit_kernel(loaded.k, "x/y")
    return loaded
seen = {}
for module, interpret in (("compiled", False), ("interpreted", True)):
    loaded = kernel(module, interpret)
    k = loaded.k
    seen[module + " untouched"] = tripwires.hooks_set()
    alias = k
    alias.run = print
    seen[module + " run"] = tripwires.hooks_set()
    del alias.run
    original = k.fn
    k.fn = loaded.fill
    seen[module + " fn"] = tripwires.hooks_set()
    k.fn = original
    seen[module + " restored"] = tripwires.hooks_set()
k = loaded.k
type(k).rewritten_fn[k.fn] = loaded.fill
seen["poisoned cache"] = tripwires.hooks_set()
print(json.dumps(seen))
""")
    name = "kernel k: "
    assert found == {
        "compiled untouched": [], "compiled run": [name + "its run replaced"],
        "compiled fn": ["kernel fill: its function replaced"], "compiled restored": [],
        "interpreted untouched": [], "interpreted run": [name + "its run replaced"],
        # the interpreter rewrites the function its rewriter holds, not kernel.fn: a new
        # kernel.fn alone runs nothing new, but the rewriter no longer matches it
        "interpreted fn": ["kernel fill: its rewriter replaced"], "interpreted restored": [],
        "poisoned cache": [name + "the function the interpreter runs replaced"]}, found
