"""Hostile submissions of lesson 1 for the grader's tests: each one tries to get points it did not
earn, to switch off hidden cases, to reach another submission, the course or the grader, or to
spoof a report. `build(root, folder)` writes them under `folder/<name>/`; ATTACKS says what each
one tries and what the grader must do about it.

Most start from the untouched exercise notebook (every blank still there), so any point they
get is a hole. Run `python tests/attacks.py FOLDER` to write them for a manual `./course grade`.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from flashcourse.grader import samples  # noqa: E402

LESSON = "01-gpu-flash"
MARKER = "ATTACK-MARKER"  # printed by attacks that find what they must not see


def _cell(nb: dict, cell_id: str) -> dict:
    return next(c for c in nb["cells"] if c.get("id") == cell_id)


def _insert_after(nb: dict, cell_id: str, source: str, new_id: str | None = None) -> None:
    at = nb["cells"].index(_cell(nb, cell_id)) + 1
    nb["cells"].insert(at, {"cell_type": "code", "id": new_id or f"attack-{at}",
                            "metadata": {}, "outputs": [], "execution_count": None,
                            "source": source})


FAKE_RESULTS = """
import flashcourse.checks.registry as g
for key, item in g.EXERCISES.items():
    g.RESULTS[key] = item.points
"""

# name -> (what it tries, the cell inserted after `setup` into an UNTOUCHED exercise notebook)
PATCHES = {
    "main-check": "import __main__\n__main__.check = lambda *a, **k: print('ok')",
    "user-ns-check": "get_ipython().user_ns['check'] = lambda *a, **k: print('ok')",
    "input-transformer": (
        "def drop_checks(lines):\n"
        "    return [] if any('check(' in l for l in lines) else lines\n"
        "get_ipython().input_transformers_post.append(drop_checks)"),
    "run-cell": (
        "ip = get_ipython()\nreal = ip.run_cell\n"
        "def run_cell(raw, *a, **k):\n"
        "    return real('pass' if 'check(' in raw else raw, *a, **k)\n"
        "ip.run_cell = run_cell"),
    "mock-code": (
        "from unittest import mock\nimport flashcourse.checks.registry as g\n"
        "mock.patch.object(g.check, '__code__', (lambda *a, **k: None).__code__).start()"),
    "numpy-patch": ("import numpy\nnumpy.allclose = lambda *a, **k: True\n"
                    "numpy.abs = lambda x: x * 0" + FAKE_RESULTS),
    "compare-patch": ("import flashcourse.checks.registry as g\ng.compare = lambda *a, **k: None\n"
                      "g.grade_answers = lambda *a, **k: 'ok'" + FAKE_RESULTS),
    "silence-errors": ("get_ipython()._showtraceback = lambda *a, **k: None\n"
                       "get_ipython().showtraceback = lambda *a, **k: None" + FAKE_RESULTS),
    "hidden-off": "import os\nos.environ.update(FLASHCOURSE_GRADING='0')" + FAKE_RESULTS,
    "forge-record": (
        "import json, os, pathlib\n"
        "folder = pathlib.Path(os.environ.get('FLASHCOURSE_RECORD_DIR', '/tmp'))\n"
        "folder.mkdir(parents=True, exist_ok=True)\n"
        "for name in ['gpu-flash_flash-attention', 'gpu-flash_misconceptions']:\n"
        "    (folder / (name + '.json')).write_text(json.dumps(\n"
        "        {'exercise': name, 'answer': {'callable': 'function'}, 'events': []}))\n"
        "import flashcourse.checks.registry as g\ng.check = lambda *a, **k: None\n"
        "import flashcourse\nflashcourse.check = g.check\ncheck = g.check"),
    "record-dir-swap": (
        "import os\nos.environ['FLASHCOURSE_RECORD_DIR'] = '/tmp/elsewhere'" + FAKE_RESULTS),
    "kill-group": "import os, signal\nos.killpg(0, signal.SIGKILL)",
    "kill-parents": (
        "import os, signal\n"
        "for pid in range(1, 400):\n"
        "    if pid != os.getpid():\n"
        "        try:\n            os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n            pass"),
    "background-forger": (
        "import subprocess, sys\n"
        "code = ('import time, pathlib\\n'\n"
        "        'for _ in range(600):\\n'\n"
        "        '    for p in pathlib.Path(\"/tmp\").rglob(\"*.json\"):\\n'\n"
        "        '        try: p.write_text(\"{}\")\\n'\n"
        "        '        except OSError: pass\\n'\n"
        "        '    time.sleep(0.5)\\n')\n"
        "subprocess.Popen([sys.executable, '-c', code, 'ATTACK-DAEMON'], start_new_session=True)"
        + FAKE_RESULTS),
    "read-classmates": (  # every folder it can see, but not the read-only system and Python
        "import os, time\n"
        "skip = ('/usr', '/proc', '/sys', '/dev', '/etc', '/opt', '/lib')\n"
        "seen, deadline = [], time.monotonic() + 30\n"
        "for top in ['/tmp', '/grading', '/root', '/home', '/work', '/']:\n"
        "    for folder, dirs, files in os.walk(top):\n"
        "        dirs[:] = [d for d in dirs if not os.path.join(folder, d).startswith(skip)\n"
        "                   and 'site-packages' not in d and d != '.venv']\n"
        "        seen += [os.path.join(folder, f) for f in files if f.endswith('.ipynb')\n"
        "                 and 'alice' in folder]\n"
        "        if time.monotonic() > deadline:\n            break\n"
        "print('ATTACK-MARKER' if seen else 'nothing found', seen[:3])"),
    "write-course": (
        "import pathlib, site, flashcourse\n"
        "pkg = pathlib.Path(flashcourse.__file__).parent\n"
        "targets = [pkg / 'checks' / 'registry.py', pkg.parents[1] / 'README.md',\n"
        "           pkg.parents[1] / 'exercises' / 'planted.txt',\n"
        "           pathlib.Path(site.getsitepackages()[0]) / 'planted.pth']\n"
        "for target in targets:\n"
        "    try:\n        target.write_text('import os  # planted')\n"
        "        print('ATTACK-MARKER wrote', target)\n"
        "    except OSError as err:\n        print('refused', type(err).__name__)"),
    "process-flood": (  # stopped by the sandbox's process limit, then killed with it
        "import subprocess\nstarted = 0\n"
        "try:\n    for _ in range(3000):\n"
        "        subprocess.Popen(['sleep', '600'])\n        started += 1\n"
        "except OSError as err:\n"
        "    print('process limit reached after', started, type(err).__name__)"
        + FAKE_RESULTS),
    "memory-hog": (
        "try:\n    hog = bytearray(40 * 2**30)\n    print('ATTACK-MARKER allocated 40 GiB')\n"
        "except MemoryError:\n    print('refused: MemoryError')" + FAKE_RESULTS),
    "network": (
        "import socket\n"
        "try:\n    socket.create_connection(('pypi.org', 443), timeout=5)\n"
        "    print('ATTACK-MARKER network')\nexcept OSError as err:\n"
        "    print('no network', type(err).__name__)"),
}


def _flash_body(root: Path, replacement: str) -> str:
    """The solution's flash_attention cell with its body replaced by `replacement`."""
    solution = json.loads((root / "solutions" / f"{LESSON}.ipynb").read_text())
    source = samples.cell_source(_cell(solution, "exercise-flash-attention"))
    head = source[: source.index('"""', source.index('"""') + 3) + 3]
    return head + "\n" + replacement


# name -> answer body for flash_attention in an otherwise right submission
ANSWERS = {
    "calls-standard-attention": (
        "    from flashcourse.reference import standard_attention\n"
        "    return standard_attention(Q, K, V)\n"),
    "calls-sdpa": (
        "    import torch\n    q, k, v = (torch.from_numpy(x)[None] for x in (Q, K, V))\n"
        "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"
        "    return out[0].numpy()\n"),
    "calls-package-attention": (
        "    import torch\n    import flashcourse as fc\n"
        "    q, k, v = (torch.from_numpy(x) for x in (Q, K, V))\n"
        "    return fc.kernels.attention.standard_attention(q, k, v).numpy()\n"),
    "frame-reader": (
        "    import inspect\n    frame = inspect.currentframe()\n"
        "    while frame is not None:\n"
        "        for value in frame.f_locals.values():\n"
        "            if getattr(value, 'shape', None) == Q.shape and value is not Q:\n"
        "                return value\n"
        "        frame = frame.f_back\n    return Q * 0\n"),
    "right-only-on-visible": (  # with hidden cases switched off in the next cell
        "    if Q.shape[0] not in (256, 100, 64, 1, 33, 129, 300, 17, 512, 128):\n"
        "        return Q * 0\n"
        "    s = Q @ K.T / np.sqrt(Q.shape[1])\n    p = np.exp(s - s.max(-1, keepdims=True))\n"
        "    return (p / p.sum(-1, keepdims=True)) @ V\n"),
}

# name -> (what it tries, how the notebook is changed), on a right submission
ODD = ("fake-kernel", "equal-to-anything", "answer-object", "duplicate-grading-id", "veto-blank",
       "veto-unrun", "symlink", "newline-ansi-name", "csv-formula-name")


def build(root: Path, folder: Path) -> dict[str, Path]:
    """Write every attack under `folder`; name -> the submitted path."""
    written: dict[str, Path] = {}

    def put(name: str, nb: dict, file_name: str = f"{LESSON}.ipynb") -> None:
        student = FOLDERS.get(name, name)  # the grader names the student by the folder
        samples.answered_as(nb, student, root=root)
        written[name] = samples.write(nb, folder / student / file_name)

    untouched = json.loads((root / "exercises" / f"{LESSON}.ipynb").read_text())
    for name, source in PATCHES.items():
        nb = json.loads(json.dumps(untouched))
        _insert_after(nb, "setup", source)
        put(name, nb)
    for name, body in ANSWERS.items():
        nb = samples.filled_notebook(root)
        _cell(nb, "exercise-flash-attention")["source"] = _flash_body(root, body)
        if name == "right-only-on-visible":
            _insert_after(nb, "exercise-flash-attention",
                          "import os\nos.environ['FLASHCOURSE_GRADING'] = '0'")
        put(name, nb)

    nb = samples.filled_notebook(root)
    _insert_after(nb, "setup", "class Anything:\n    def __eq__(self, other):\n"
                  "        return True\n    def __bool__(self):\n        return True\n"
                  "    __hash__ = object.__hash__\n")
    for cell_id in ("answer-q1", "answer-q2", "answer-q3", "answer-misconceptions"):
        _cell(nb, cell_id)["source"] = samples.cell_source(_cell(untouched, cell_id)).replace(
            "______", "Anything()")
    put("equal-to-anything", nb)

    nb = samples.filled_notebook(root)
    _cell(nb, "exercise-flash-attention")["source"] = _flash_body(
        root, "    class Out(np.ndarray):\n"
              "        def __eq__(self, other):\n            return np.ones(1, bool)\n"
              "    return np.zeros_like(Q).view(Out)\n")
    put("answer-object", nb)

    nb = json.loads(json.dumps(untouched))  # a second cell with a grading cell's id
    _insert_after(nb, "setup", "check = lambda *a, **k: print('ok')" + FAKE_RESULTS,
                  new_id="check-flash-attention")
    put("duplicate-grading-id", nb)

    nb = samples.filled_notebook(root, unfilled=("answer-misconceptions",))
    put("veto-blank", nb)

    nb = samples.filled_notebook(root)
    _cell(nb, "answer-misconceptions")["source"] = "raise SystemExit('not answering')"
    put("veto-unrun", nb)


    right = samples.filled_notebook(root)
    target = samples.write(right, folder.parent / f"{folder.name}-outside" / "right.ipynb")
    (folder / "symlink").mkdir(parents=True, exist_ok=True)
    link = folder / "symlink" / f"{LESSON}.ipynb"
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    written["symlink"] = link

    put("newline-ansi-name", samples.filled_notebook(root, mistakes=("q1-wrong",)),
        f"{LESSON}\n\x1b[32mPASS 10-10 fake.ipynb")
    put("csv-formula-name", samples.filled_notebook(root, mistakes=("q1-wrong",)))

    nb = samples.filled_notebook(root, slug="05-softmax")  # a "kernel" that is not one
    _cell(nb, "exercise-row-kernel")["source"] = (
        "class RowSoftmax:\n    def __init__(self):\n        self.fn = self\n"
        "    def __getitem__(self, grid):\n        return self\n"
        "    def __call__(self, x, y, *args, **kwargs):\n"
        "        y.copy_(torch.softmax(x.float(), dim=-1).to(y.dtype))\n\n"
        "softmax_row_kernel = RowSoftmax()\n")
    samples.answered_as(nb, "fake-kernel", "05-softmax", root)
    written["fake-kernel"] = samples.write(nb, folder / "fake-kernel" / "05-softmax.ipynb")
    return written


# ---------------------------------------------------------------- the second round
# Each class of hole an adversarial review found in the record-and-replay design, as a
# submission: full marks from records the notebook wrote itself, a notebook that stops or slows
# the class, shared resources, reports, leaks and disguised reference calls.


def public_records(root: Path) -> dict:
    """The records a right lesson 1 submission makes with the public seeds, computed here as a
    forger would at home: exercise id -> record."""
    import os
    import tempfile
    from unittest import mock

    from flashcourse.authoring import cells
    from flashcourse.checks import recording, registry

    registry._load_checks()
    answers = {ex.id: dict(ex.answers) for ex in registry.LESSONS["gpu-flash"].exercises
               if ex.answers}
    answers["gpu-flash/flash-attention"] = cells.load_name(
        root / "lessons" / f"{LESSON}.qmd", "exercise-flash-attention", "flash_attention")
    with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {
            recording.RECORD_DIR_ENV: folder, registry.GRADING_MODE_ENV: "1"}):
        for exercise_id, answer in answers.items():
            with contextlib.redirect_stdout(io.StringIO()):
                registry.check(exercise_id, answer)
        records = {exercise_id: json.loads((Path(folder) / recording.record_name(
            exercise_id)).read_text()) for exercise_id in answers}
    for record in records.values():  # as a record made in the sandbox would say
        record["tripwires_removed"] = record["hooks_set"] = []
    return records


PUBLISH = """
import json
from IPython.display import publish_display_data
FORGED = json.loads(''.join(BLOB_PARTS))
MIME = 'application/vnd.flashcourse.record+json'
def publish_forged(exercise_id=None):
    for key, record in FORGED.items():
        if exercise_id in (None, key):
            publish_display_data({{MIME: record}})
"""

# name -> the cell inserted after `setup`; {blob} is the public records as JSON
FORGERS = {
    # every check replaced by one that sends the forged record of its exercise
    "forged-records": PUBLISH + (
        "def check(exercise_id, answer):\n    publish_forged(exercise_id)\n"
        "import flashcourse\nflashcourse.check = check\n"),
    # a thread that keeps sending forged records, whatever cell runs
    "background-publisher": PUBLISH + (
        "import threading, time\n"
        "def keep_sending():\n    while True:\n        publish_forged()\n"
        "        time.sleep(0.05)\n"
        "threading.Thread(target=keep_sending, daemon=True).start()\n"),
    # records sent when the kernel shuts down, after its last cell
    "after-last-cell": PUBLISH + "import atexit\natexit.register(publish_forged)\n",
    # the records dropped as files wherever a grader might read them, and sent in its own cell
    "record-files": PUBLISH + (
        "import os, pathlib\n"
        "for folder in ['/grading', '/grading/records', '/grading/out', '/tmp', os.getcwd()]:\n"
        "    try:\n        pathlib.Path(folder).mkdir(parents=True, exist_ok=True)\n"
        "        for key, record in FORGED.items():\n"
        "            name = key.replace('/', '_') + '.json'\n"
        "            (pathlib.Path(folder) / name).write_text(json.dumps(record))\n"
        "    except OSError:\n        pass\npublish_forged()\n"),
}

# name -> flash_attention's body in an otherwise right submission: the reference in disguise
DISGUISED = {
    "resolve-name": (
        "    import pkgutil\n    name = 'flashcourse.' + 'reference:standard_' + 'attention'\n"
        "    return pkgutil.resolve_name(name)(Q, K, V)\n"),
    "import-alias": (
        "    load = __import__\n    module = load('flashcourse.' + 'reference', fromlist=['x'])\n"
        "    return getattr(module, 'standard_' + 'attention')(Q, K, V)\n"),
    "getattr-sdpa": (
        "    import torch\n    F = torch.nn.functional\n"
        "    attend = getattr(F, 'scaled_dot_' + 'product_attention')\n"
        "    q, k, v = (torch.from_numpy(x)[None] for x in (Q, K, V))\n"
        "    return attend(q, k, v)[0].numpy()\n"),
    "helper-elsewhere": "    return attend_helper(Q, K, V)\n",
    "base64-interpreter": "    return decoded_helper(Q, K, V)\n",
    # the reference copied in the cell that imports torch, before any check runs
    "copied-at-import": (
        "    q, k, v = (torch.from_numpy(x)[None] for x in (Q, K, V))\n"
        "    return attend_copy(q, k, v)[0].numpy()\n"),
}
HELPERS = {  # a cell of its own (not the answer cell) defining the helper
    "copied-at-import": (
        "import torch\n"
        "attend_copy = getattr(torch.nn.functional, 'scaled_dot_' + 'product_attention')\n"),
    "import-hook-removed": (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'tripwire' not in type(f).__module__]\n"
        "import torch\n"),
    "helper-elsewhere": (
        "import torch\n\ndef attend_helper(Q, K, V):\n"
        "    q, k, v = (torch.from_numpy(x)[None] for x in (Q, K, V))\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)[0].numpy()\n"),
    "base64-interpreter": (
        "import base64, code\nsource = base64.b64decode({encoded!r}).decode()\n"
        "code.InteractiveInterpreter(globals()).runsource(source, '<x>', 'exec')\n"),
}
HIDDEN_SOURCE = ("from flashcourse import reference as r\n"
                 "def decoded_helper(Q, K, V):\n    return r.standard_attention(Q, K, V)\n")

# name -> flash_attention's body, its cell in HELPERS: the import hook that wires the references
# taken away before torch is imported, so the reference it calls has no tripwire; the records
# say so, and the exercise earns nothing
UNHOOKED = {
    "import-hook-removed": (
        "    q, k, v = (torch.from_numpy(x)[None] for x in (Q, K, V))\n"
        "    attend = getattr(torch.nn.functional, 'scaled_dot_' + 'product_attention')\n"
        "    return attend(q, k, v)[0].numpy()\n"),
}

# name -> a cell inserted after `setup` of a RIGHT submission: it must still score 10/10,
# and what it prints must not hold ATTACK-MARKER
RESOURCES = {
    # more than the work folder and /tmp may hold, in files under the per-file limit
    "disk-filler": (
        "import os\nwritten = 0\nchunk = b'x' * 2**20\n"
        "for folder in ['/grading', '/tmp']:\n    for number in range(12):\n"
        "        try:\n            with open(f'{folder}/fill{number}', 'wb') as f:\n"
        "                for _ in range(128):\n                    f.write(chunk)\n"
        "                    written += len(chunk)\n"
        "        except OSError:\n            break\n"
        "    for number in range(12):\n        try:\n"
        "            os.remove(f'{folder}/fill{number}')\n        except OSError:\n"
        "            pass\n"
        "print('ATTACK-MARKER wrote' if written > 2.5 * 2**30 else 'stopped at', written)\n"),
    # a FIFO and a device where a grader once read records: nothing is read from the sandbox
    "fifo-records": (
        "import os\nfor folder in ['/grading/records', '/grading/out']:\n"
        "    os.makedirs(folder, exist_ok=True)\n"
        "    for name in ['gpu-flash_q1-memory.json', 'cells.json', 'executed.ipynb']:\n"
        "        try:\n            os.mkfifo(os.path.join(folder, name))\n"
        "        except OSError:\n            pass\n"),
    # what the sandbox can learn of classmates and old reports
    "mount-names": (
        "import os, time\nfound = []\nwords = ('alice', 'bob', 'carol', 'grading-output')\n"
        "for path in ['/proc/self/mountinfo', '/proc/1/cmdline', '/proc/self/cmdline']:\n"
        "    try:\n        text = open(path, 'rb').read().decode(errors='replace')\n"
        "    except OSError:\n        continue\n"
        "    found += [word for word in words if word in text]\n"
        "skip = ('/usr', '/proc', '/sys', '/dev', '/etc', '/lib')\n"
        "deadline = time.monotonic() + 20\n"
        "for folder, dirs, files in os.walk('/'):\n"
        "    dirs[:] = [d for d in dirs if not os.path.join(folder, d).startswith(skip)\n"
        "               and 'site-packages' not in d]\n"
        "    found += [os.path.join(folder, f) for f in files if f in\n"
        "              ('scorecard.txt', 'results.json', 'junit.xml', 'progress.html')]\n"
        "    if time.monotonic() > deadline:\n        break\n"
        "print('ATTACK-MARKER' if found else 'nothing found', found[:5])\n"),
    # the answers in plain text: the lessons' solutions and the questions' answers
    "answer-files": (
        "from pathlib import Path\nimport flashcourse\n"
        "root = Path(flashcourse.__file__).resolve().parents[2]\n"
        "found = [str(p) for name in ('lessons', 'solutions', 'book',\n"
        "                             'src/flashcourse/checks/self_checks')\n"
        "         for p in (root / name).rglob('*') if p.is_file()]\n"
        "print('ATTACK-MARKER' if found else 'nothing found', found[:3])\n"),
    # a key kept in the kernel's keyrings, for the next sandbox with the same user
    "keyring-plant": (
        "import ctypes, platform\n"
        "numbers = {'x86_64': 248, 'aarch64': 217}\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "number = numbers.get(platform.machine())\n"
        "if number:\n"
        "    for ring in (-3, -4, -5):  # the session, user and user-session keyrings\n"
        "        libc.syscall(number, b'user', b'ATTACK-KEY', b'secret', 6, ring)\n"),
}

# processes each under the per-process limit, together over the sandbox's memory (the test
# grades with --memory 4): the sandbox is stopped, the class goes on
FORK_HOG = (
    "import multiprocessing, time\n"
    "def hold():\n    block = bytearray(2 * 2**30)\n"
    "    for at in range(0, len(block), 4096):\n        block[at] = 1\n    time.sleep(60)\n"
    "workers = [multiprocessing.Process(target=hold) for _ in range(3)]\n"
    "for worker in workers:\n    worker.start()\n"
    "for worker in workers:\n    worker.join()\n"
    "print('ATTACK-MARKER held 6 GiB')\n")


# name -> notebook JSON text: malformed in a way that once stopped everybody's grading
def _malformed(root: Path) -> dict[str, str]:
    base = json.loads((root / "exercises" / f"{LESSON}.ipynb").read_text())
    numeric_id = json.loads(json.dumps(base))
    numeric_id["cells"][3]["id"] = 12345
    list_source = json.loads(json.dumps(base))
    list_source["cells"][3]["source"] = [1, 2, 3]
    deep = samples.filled_notebook(root)
    _cell(deep, "answer-q1")["source"] += "\nx = " + "+".join(["1"] * 5000) + "\n"
    big = json.loads(json.dumps(base))
    for number in range(50):
        _insert_after(big, "setup", "x = '" + "y" * 100_000 + "'\n", new_id=f"big-{number}")
    control_id = samples.filled_notebook(root, student="control-char-id")
    _insert_after(control_id, "setup", "pass", new_id="bell\x07id\x1b[31m")
    return {"numeric-id": json.dumps(numeric_id), "list-source": json.dumps(list_source),
            "deep-expression": json.dumps(deep), "five-megabytes": json.dumps(big),
            "nested-json": "[" * 100_000 + "]" * 100_000,
            "control-char-id": json.dumps(control_id)}


def _insert_forger(nb: dict, source: str, blob: str) -> None:
    """The forger's cell after `setup`, the records it sends in cells of their own before it
    (each under the grader's limit on a cell's size)."""
    _insert_after(nb, "setup", source.replace("{{", "{").replace("}}", "}"))
    parts = [blob[at:at + 90_000] for at in range(0, len(blob), 90_000)]
    for number, part in reversed(list(enumerate(parts))):
        start = "BLOB_PARTS = []\n" if number == 0 else ""
        _insert_after(nb, "setup", f"{start}BLOB_PARTS.append({part!r})\n",
                      new_id=f"blob-{number}")


# Attacks that hang their kernel until the per-cell limit: graded apart, with a short limit.
SLOW = ("deep-expression",)


def _round_two_makers(root: Path) -> dict:
    """name -> a function making that attack: its notebook, or its text when malformed. The
    forged records are computed once, and only for an attack that sends them."""
    import base64
    import functools

    blob = functools.cache(lambda: json.dumps(public_records(root)))
    untouched = json.loads((root / "exercises" / f"{LESSON}.ipynb").read_text())

    def forger(source, answered=False):
        nb = samples.filled_notebook(root) if answered else json.loads(json.dumps(untouched))
        _insert_forger(nb, source, blob())
        return nb

    def disguised(name, body):
        nb = samples.filled_notebook(root)
        _cell(nb, "exercise-flash-attention")["source"] = _flash_body(root, body)
        if name in HELPERS:
            encoded = base64.b64encode(HIDDEN_SOURCE.encode()).decode()
            _insert_after(nb, "setup", HELPERS[name].format(encoded=encoded))
        return nb

    def beside_a_right_answer(source):
        nb = samples.filled_notebook(root)
        _insert_after(nb, "setup", source)
        return nb

    makers = {name: functools.partial(forger, source) for name, source in FORGERS.items()}
    makers["forged-records-answered"] = functools.partial(forger, FORGERS["forged-records"],
                                                          answered=True)
    makers.update({name: functools.partial(disguised, name, body)
                   for name, body in {**DISGUISED, **UNHOOKED}.items()})
    makers.update({name: functools.partial(beside_a_right_answer, source)
                   for name, source in {**RESOURCES, "memory-fork-hog": FORK_HOG}.items()})
    malformed = functools.cache(lambda: _malformed(root))
    makers.update({name: functools.partial(lambda n: malformed()[n], name) for name in MALFORMED})
    return makers


def build_round_two(root: Path, folder: Path, names=None) -> dict[str, Path]:
    """Write the second round's attacks under `folder` (those in `names`, default all but
    SLOW); name -> the submitted path."""
    wanted = names if names is not None else [n for n in ROUND_TWO if n not in SLOW]
    makers = _round_two_makers(root)
    written: dict[str, Path] = {}
    for name in wanted:
        made = makers[name]()
        path = folder / name / f"{LESSON}.ipynb"
        if isinstance(made, str):  # malformed: written as it is
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(made, encoding="utf-8")
        else:
            samples.write(samples.answered_as(made, name, root=root), path)  # its folder's student
        written[name] = path
    return written


MALFORMED = ("numeric-id", "list-source", "deep-expression", "five-megabytes", "nested-json",
             "control-char-id")
ROUND_TWO = [*FORGERS, "forged-records-answered", *DISGUISED, *UNHOOKED, *RESOURCES,
             "memory-fork-hog", *MALFORMED]
NAMES = [*PATCHES, *ANSWERS, *ODD]
FOLDERS = {"csv-formula-name": '=HYPERLINK("evil")'}  # attack -> its folder's name


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "attacks")
    for name, path in {**build(ROOT, out), **build_round_two(ROOT, out)}.items():
        print(f"{name}: {path}")
