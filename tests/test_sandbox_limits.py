"""The sandbox's limits that bubblewrap does not give (grader/limits.py) and its mounts: a uid no
other sandbox holds, with its keyrings cleared; the memory of a whole sandbox capped (cgroup or
watchdog); tmpfs of bounded size; nothing of the course beyond what a notebook's run reads."""

import contextlib
import json
import multiprocessing
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashcourse.grader import cli, limits, sandbox

TEST_UID_BASE = 64100  # away from the grader's own pool: a grader may be running meanwhile
TEST_POOL_SIZE = 16
CAP = 200 * 2**20  # memory cap of the tests' sandboxes
WORKER = 150 * 2**20  # memory of each of their processes: under the cap on its own
ADD_KEY_SYSCALL = {"x86_64": 248, "aarch64": 217}

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can run as another uid")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed")


# ---------------------------------------------------------------- uid leases


def _hold_a_lease(barrier, uids) -> None:
    with limits.UidLease(TEST_UID_BASE, TEST_POOL_SIZE) as lease:
        uids.put(lease.uid)
        barrier.wait(timeout=60)  # every process holds its lease at the same time


def test_leases_in_parallel_processes_never_share_a_uid():
    context = multiprocessing.get_context("spawn")  # no fork of a threaded test process
    count = 4
    barrier, uids = context.Barrier(count), context.Queue()
    workers = [context.Process(target=_hold_a_lease, args=(barrier, uids))
               for _ in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0] * count
    held = [uids.get(timeout=5) for _ in range(count)]
    assert len(set(held)) == count
    assert all(TEST_UID_BASE <= uid < TEST_UID_BASE + TEST_POOL_SIZE for uid in held)


def test_a_uid_is_leased_again_once_released_and_an_exhausted_pool_says_so():
    with limits.UidLease(TEST_UID_BASE, 2) as first:
        assert first.gid == first.uid
        with limits.UidLease(TEST_UID_BASE, 2) as second:
            assert second.uid != first.uid
            with pytest.raises(limits.NoFreeUid, match="in use"):
                limits.UidLease(TEST_UID_BASE, 2).__enter__()
    with limits.UidLease(TEST_UID_BASE, 2) as again:
        assert again.uid == first.uid


def test_a_lease_skips_uids_that_name_an_account(monkeypatch):
    monkeypatch.setattr(limits, "_has_account", lambda uid: uid == TEST_UID_BASE)
    with limits.UidLease(TEST_UID_BASE, 2) as lease:
        assert lease.uid == TEST_UID_BASE + 1


def test_the_lock_folder_is_private():
    info = os.lstat(limits.lock_folder())
    assert info.st_uid == os.geteuid() and oct(info.st_mode & 0o777) == oct(0o700)


_KEYS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, keyctl, add_key, action = (int(a) for a in sys.argv[1:5])
os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
for keyring in (-4, -5):  # the user keyring, the user session keyring
    if action:
        serial = libc.syscall(ctypes.c_long(add_key), b"user", b"left-behind", b"secret",
                              ctypes.c_long(6), ctypes.c_long(keyring))
        if serial == -1:
            sys.exit("add_key: " + os.strerror(ctypes.get_errno()))
    size = libc.syscall(*(ctypes.c_long(a) for a in (keyctl, 11, keyring, 0, 0)))  # READ
    if size == -1:
        sys.exit("keyctl: " + os.strerror(ctypes.get_errno()))
    print(size // 4)  # serials in the keyring
"""


def _keys_as(uid: int, add: bool) -> list[int]:
    """As `uid`: add a key to each of its keyrings when `add`; how many keys each holds."""
    machine = platform.machine()
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _KEYS, str(uid), str(limits.KEYCTL_SYSCALL[machine]),
         str(ADD_KEY_SYSCALL[machine]), str(int(add))],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"no kernel keyrings here: {result.stderr.strip()}")
    return [int(n) for n in result.stdout.split()]


@needs_root
@pytest.mark.skipif(platform.machine() not in limits.KEYCTL_SYSCALL,
                    reason="keyctl's syscall number is known for x86_64 and aarch64")
def test_a_lease_clears_the_keys_its_uid_stored():
    with limits.UidLease(TEST_UID_BASE, TEST_POOL_SIZE) as lease:
        assert _keys_as(lease.uid, add=False) == [0, 0]  # cleared on entry too
        assert _keys_as(lease.uid, add=True) == [1, 1]
    assert _keys_as(lease.uid, add=False) == [0, 0]


@needs_root
def test_a_lease_kills_what_still_runs_as_its_uid():
    with limits.UidLease(TEST_UID_BASE, TEST_POOL_SIZE) as lease:
        left = subprocess.Popen([*sandbox.drop_privileges(lease.uid), "sleep", "60"])
        time.sleep(0.2)
    assert left.wait(timeout=10) == -signal.SIGKILL


# The grader, with a session keyring of its own (as systemd and PAM give), starts a command
# that says which session keyring it has.
_GRADER_WITH_A_SESSION_KEYRING = """
import ctypes, json, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
keyctl, prefix = int(sys.argv[1]), json.loads(sys.argv[2])
if libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(1), b"grader-session") == -1:
    sys.exit("keyctl: no keyrings")
which = f"import ctypes; print(ctypes.CDLL(None).syscall(*(ctypes.c_long(a) for a in "
which += f"({keyctl}, 0, -3, 0))))"  # KEYCTL_GET_KEYRING_ID of the session keyring
print(libc.syscall(*(ctypes.c_long(a) for a in (keyctl, 0, -3, 0))))
subprocess.run([*prefix, sys.executable, "-I", "-S", "-c", which], check=True)
"""


@pytest.mark.skipif(platform.machine() not in limits.KEYCTL_SYSCALL,
                    reason="keyctl's syscall number is known for x86_64 and aarch64")
def test_a_sandbox_gets_a_session_keyring_of_its_own():
    def keyrings(prefix: list[str]) -> tuple[str, str]:
        result = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _GRADER_WITH_A_SESSION_KEYRING,
             str(limits.KEYCTL_SYSCALL[platform.machine()]), json.dumps(prefix)],
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            pytest.skip(f"no kernel keyrings here: {result.stderr.strip()}")
        grader, sandboxed = result.stdout.split()
        return grader, sandboxed

    grader, inherited = keyrings([])
    assert inherited == grader  # what the prefix is for
    grader, own = keyrings(limits.fresh_keyring_prefix())
    assert own != grader and int(own) > 0


# ---------------------------------------------------------------- memory of a whole sandbox

_PROCESSES = """
import subprocess, sys
size, count, seconds = (int(a) for a in sys.argv[1:4])
worker = f"import time; data = b'x' * {size}; time.sleep({seconds})"
workers = [subprocess.Popen([sys.executable, "-c", worker]) for _ in range(count)]
sys.exit(max(w.wait() for w in workers))
"""


def _run_capped(use_cgroup: bool, count: int, seconds: int):
    """Run `count` processes of WORKER bytes each for `seconds` under a cap of CAP; (cap,
    exit status, seconds taken)."""
    started = time.monotonic()
    with limits.memory_cap(CAP, use_cgroup=use_cgroup) as cap:
        if use_cgroup and cap.cgroup is None:
            pytest.skip("no writable memory cgroup here")
        process = subprocess.Popen(
            [*cap.prefix, sys.executable, "-c", _PROCESSES, str(WORKER), str(count),
             str(seconds)], start_new_session=True)
        cap.watch(process.pid)
        try:
            status = process.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return cap, status, time.monotonic() - started


@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup", "watchdog"])
def test_a_sandbox_over_its_memory_cap_is_stopped(use_cgroup):
    cap, status, seconds = _run_capped(use_cgroup, count=4, seconds=60)  # 3x the cap together
    assert cap.hit and status != 0 and seconds < 50
    assert cap.kind.startswith("cgroup") == use_cgroup
    assert cap.message() == f"stopped: the sandbox used more than {CAP / 2**30:g} GiB of memory"
    if cap.cgroup is not None:
        assert not cap.cgroup.path.exists()  # removed


@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup", "watchdog"])
def test_a_sandbox_under_its_memory_cap_runs_to_its_end(use_cgroup):
    cap, status, _ = _run_capped(use_cgroup, count=1, seconds=1)
    assert status == 0 and not cap.hit


# ---------------------------------------------------------------- tmpfs of bounded size


def test_a_sized_tmpfs_is_sized_and_made_before_it_is_mounted():
    assert sandbox.sized_tmpfs("/tmp", 5, "1777") == ["--perms", "1777", "--size", "5",
                                                      "--tmpfs", "/tmp"]
    assert sandbox.sized_tmpfs("/grading", 5) == ["--size", "5", "--tmpfs", "/grading"]


def _bwrap(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    user = ["--unshare-user"] if os.geteuid() != 0 else []
    return subprocess.run([shutil.which("bwrap"), "--die-with-parent", *user, "--unshare-pid",
                           *args], capture_output=True, text=True, check=False, timeout=300,
                          env=env or {"PATH": "/usr/bin:/bin", "LANG": "C"})


@needs_bwrap
def test_writing_past_a_sized_tmpfs_fails_with_no_space_left():
    writes = ("stat -c %a /tmp; head -c 500000 /dev/zero > /tmp/small && echo small-ok; "
              "head -c 2000000 /dev/zero > /tmp/big")
    result = _bwrap("--ro-bind", "/", "/", "--dev", "/dev",
                    *sandbox.sized_tmpfs("/tmp", 2**20, "1777"), "--", "sh", "-c", writes)
    assert result.stdout.split() == ["1777", "small-ok"]
    assert result.returncode != 0 and "No space left on device" in result.stderr


# ---------------------------------------------------------------- what of the course is seen


def _fake_course(base: Path) -> tuple[Path, list[Path]]:
    """A course with classmates' submissions, reports, a workspace and a history in it."""
    course = base / "course"
    for name in ("src/pkg", "exercises", "lessons", "assets", "solutions", "work/bob-workspace",
                 ".git", "grading-output/old-report", "classmates-subs/alice-unique-name",
                 *sandbox.ANSWERS_HIDDEN):
        (course / name).mkdir(parents=True)
    (course / "pyproject.toml").write_text("[project]\n")
    for name in sandbox.ANSWERS_HIDDEN:
        (course / name / "01-gpu-flash.toml").write_text("answer-unique-text = 1\n")
    notebook = course / "classmates-subs" / "alice-unique-name" / "01-gpu-flash.ipynb"
    notebook.write_text("{}")
    return course, cli.hidden_folders(course, [notebook], course / "grading-output")


@needs_bwrap
def test_a_sandbox_sees_only_the_course_parts_and_no_hidden_name(tmp_path):
    course, hidden = _fake_course(tmp_path)
    mounts = sandbox._mounts(course, hidden)
    for path in hidden:
        assert not any(str(path) in arg for arg in mounts)
    answers = [course.resolve() / name for name in sandbox.ANSWERS_HIDDEN]
    script = (f"ls -A {course.resolve()}; ls -A {' '.join(map(str, answers))}; "
              f"cat {answers[0]}/*; touch {answers[0]}/planted; "
              "cat /proc/self/mountinfo /proc/1/cmdline")
    result = _bwrap(*sandbox.sized_tmpfs("/tmp", 2**20, "1777"), *mounts,
                    *sandbox._answers_hidden(course), "--dev", "/dev", "--proc", "/proc", "--",
                    "sh", "-c", script)
    listed = result.stdout.split("\n")
    # lessons/ and solutions/ hold the answers: absent; the self-check files: an empty folder
    # that cannot be written either
    assert sorted(listed[:4]) == ["assets", "exercises", "pyproject.toml", "src"], listed
    assert "Read-only file system" in result.stderr, result.stderr
    for name in ("alice-unique-name", "classmates-subs", "bob-workspace", "old-report",
                 "solutions", ".git", "lessons", "answer-unique-text"):
        assert name not in result.stdout


def test_submissions_inside_a_folder_every_sandbox_sees_are_refused(tmp_path):
    course, _ = _fake_course(tmp_path)
    notebook = course / "src" / "subs" / "alice" / "01-gpu-flash.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text("{}")
    hidden = cli.hidden_folders(course, [notebook], None)
    with pytest.raises(sandbox.SandboxUnavailable, match="Move the submissions"):
        sandbox._mounts(course, hidden)


@needs_bwrap
def test_the_course_package_imports_in_a_sandbox_that_sees_nothing_else_of_it(root):
    submitted = [root / "submissions" / "alice" / "01-gpu-flash.ipynb"]
    hidden = cli.hidden_folders(root, submitted, root / "grading-output")
    probe = ("import os, flashcourse; "
             f"print(sorted(os.listdir({str(root)!r}))); print(flashcourse.__file__)")
    with contextlib.ExitStack() as stack:
        user = []
        if os.geteuid() == 0:  # as the grader runs it: a uid of its own, which owns nothing
            lease = stack.enter_context(limits.UidLease(TEST_UID_BASE, TEST_POOL_SIZE))
            user = sandbox.drop_privileges(lease.uid)
        result = _bwrap(*sandbox.sized_tmpfs("/tmp", 2**28, "1777"),
                        *sandbox._mounts(root, hidden), "--dev", "/dev", "--proc", "/proc",
                        "--", *user, sys.executable, "-c", probe,
                        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp",
                             "MPLCONFIGDIR": "/tmp/matplotlib", "LANG": "C.UTF-8"})
    assert result.returncode == 0, result.stderr[-3000:]
    listed, module = result.stdout.splitlines()[-2:]
    venv = Path(sys.prefix).resolve()
    inside = [venv.name] if venv.parent == root else []
    present = [name for name in sandbox.COURSE_PARTS if (root / name).exists()]
    assert listed == str(sorted(present + inside))
    assert module == str(root / "src" / "flashcourse" / "__init__.py")


def test_the_work_folder_is_private_and_named_by_digits_only():
    """Its path is on the bwrap command line a submission can read (/proc/1/cmdline and
    mountinfo in the sandbox): random letters once spelled a classmate's name there."""
    folders = [cli.numbered_work_folder() for _ in range(3)]
    try:
        assert len(set(folders)) == 3
        for folder in folders:
            assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700
            prefix, digits = folder.name.split("-")
            assert prefix == "fcgrade" and digits.isdigit() and len(digits) == 12
    finally:
        for folder in folders:
            folder.rmdir()
