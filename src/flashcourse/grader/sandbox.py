"""One bubblewrap sandbox per submission (grader side).

What the sandbox guarantees, for the code of one submission:

- it sees the system, Python, the virtual environment and only the parts of the course a
  notebook needs (`COURSE_PARTS`), read-only: submissions, reports, students' workspaces and
  the repository's history are not mounted at all, so no mount point or argument names them
  (`check_hidden` refuses to grade when one lies inside a bound folder);
- it writes only to two tmpfs of bounded size, its work folder (/grading) and a private /tmp,
  plus a bounded /dev/shm; nothing reaches the host's disk, and what it reports goes over the
  channel on its standard input and output (`run`, `channel.py`, `inside.py`);
- no network (its own network namespace has only loopback), its own PID, IPC and UTS namespaces;
- started by root, it runs as a uid that no other sandbox on the machine holds at the same time
  (`limits.UidLease`, whose keyrings are cleared before and after), in a fresh session keyring,
  with no capabilities and no_new_privs (started by another user, as that user in a user
  namespace), under limits on processes, open files, file size, core files, (on a CPU)
  address space per process, and memory for all its processes together (`limits.memory_cap`:
  a cgroup where the host offers one, else a watchdog);
- it ends at the wall-clock limit or when the grader dies: the whole PID namespace is killed.

What it does not guarantee: the lessons' solutions and the questions' answers are not in it
(`COURSE_PARTS`, `ANSWERS_HIDDEN`), but the course's package is, with the checks' references
(the check runs in the notebook's kernel and computes what a right answer gives there; the
tripwires and the static scan stand guard over their use); it does not limit CPU share or GPU
memory, and on a GPU machine the address-space limit
is left off (CUDA reserves far more address space than it uses).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

MOUNT_POINT = "/grading"
SANDBOX_MEMORY_LIMIT = 8 * 2**30  # all processes of a sandbox together (limits.memory_cap)
ADDRESS_SPACE_LIMIT = 12 * 2**30  # address space per process on a CPU
FILE_LIMIT = 256 * 2**20  # largest file the sandbox may write
PROCESS_LIMIT = 512  # processes and threads of the sandbox user
# Its tmpfs. In a memory cgroup their files count towards SANDBOX_MEMORY_LIMIT; not for the
# watchdog, which sees only what processes map.
WORK_LIMIT = 1 * 2**30  # bytes the sandbox may keep in its work folder (a tmpfs)
TMP_LIMIT = 1 * 2**30  # bytes in its private /tmp (a tmpfs)
SHM_LIMIT = 256 * 2**20  # bytes in /dev/shm (inside bwrap's /dev, an unbounded tmpfs)
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "etc", "opt")
# What running a notebook reads from the course; nothing else of it enters a sandbox (not
# lessons/ nor solutions/, which hold the answers in full).
COURSE_PARTS = ("src", "exercises", "assets", "pyproject.toml")
# Folders of those parts that hold answers and that a notebook's run does without: each is
# covered by an empty read-only folder (the questions' answers: the sandbox's checks only
# record what a question's cell answers, checks/class_items.py, and the grader scores it).
ANSWERS_HIDDEN = ("src/flashcourse/checks/self_checks",)


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot make a sandbox here."""


def bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(
            "bubblewrap (`bwrap`) is not installed, so submissions cannot be isolated. Install "
            "it (Debian/Ubuntu: `apt-get install bubblewrap`), or pass --no-sandbox to grade "
            "without isolation (every report line then says so).")
    return path


def _system_folders() -> list[Path]:
    return [Path("/") / name for name in SYSTEM_DIRS
            if (Path("/") / name).is_dir() and not (Path("/") / name).is_symlink()]


def _python_roots() -> set[Path]:
    """Python's installation and the virtual environment (sys.prefix), wherever they are."""
    return {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
            Path(sys.executable).resolve().parent.parent}


def _course_parts(course: Path) -> list[Path]:
    course = course.resolve()
    return [course / name for name in COURSE_PARTS if (course / name).exists()]


def check_hidden(course: Path, hidden: list[Path]) -> None:
    """Raise SandboxUnavailable when a folder every sandbox must not see (`hidden`: submissions,
    reports, workspaces) lies inside one every sandbox sees: hiding it there would name it in
    the sandbox's mount table and in bwrap's command line."""
    seen = [*_system_folders(), *sorted(_python_roots()), *_course_parts(course)]
    for path in hidden:
        path = path.resolve()
        if not path.exists() or course.resolve().is_relative_to(path):
            continue  # nothing to see there; the course's own ancestors are never hidden
        for folder in seen:
            if path.is_relative_to(folder.resolve()):
                raise SandboxUnavailable(
                    f"{path} holds submissions or reports, which no sandbox may see, but "
                    f"every sandbox sees {folder} (read-only). Move the submissions and "
                    f"reports out of {folder} (keep them outside the course's "
                    f"{', '.join(COURSE_PARTS)} and Python's folders) and grade again.")


def sized_tmpfs(dest: str, limit: int, perms: str | None = None) -> list[str]:
    """bwrap arguments mounting a tmpfs of at most `limit` bytes at `dest` (writing past it
    fails with ENOSPC), with mode `perms` ("1777" for a /tmp) when given."""
    return [*(["--perms", perms] if perms else []), "--size", str(limit), "--tmpfs", dest]


def _mounts(course: Path, hidden: list[Path]) -> list[str]:
    """Read-only binds of the system, Python (with its virtual environment) and the course's
    COURSE_PARTS. The rest of the course (submissions, reports, workspaces, .git) is absent,
    so no bind or mount point names it; a folder of `hidden` inside what is bound is refused
    (check_hidden)."""
    check_hidden(course, hidden)
    args: list[str] = []
    for name in SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    roots = _python_roots() | set(_course_parts(course))
    made: set[Path] = set()
    for root in sorted(roots):
        if any(root.is_relative_to(other) and root != other for other in roots):
            continue  # inside another bound folder
        for parent in reversed(root.parents):  # bwrap would make them 0700
            if parent != Path("/") and parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", str(root), str(root)]
    return args


def _answers_hidden(course: Path) -> list[str]:
    """bwrap arguments covering each of ANSWERS_HIDDEN with an empty read-only tmpfs."""
    args: list[str] = []
    for name in ANSWERS_HIDDEN:
        path = course.resolve() / name
        if path.is_dir():
            args += [*sized_tmpfs(str(path), 4096), "--remount-ro", str(path)]
    return args


def command(course: Path, hidden: list[Path], inner: list[str], home_template: Path,
            work_limit: int, tmp_limit: int) -> list[str]:
    """The bwrap command line running `inner`. Its only writable places are two tmpfs of
    bounded size, /grading (its work folder, with the home template read-only inside) and
    /tmp; nothing it writes reaches the host's disk, and what it reports goes over the
    channel (`run`)."""
    user = ["--unshare-user"] if os.geteuid() != 0 else []  # root drops to a uid instead
    return [bwrap(), "--die-with-parent", "--new-session", *user,
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "grading",
            # the private /tmp first: bwrap mounts in order, and a course or Python that lives
            # under /tmp must be bound on top of it, not hidden by it
            *sized_tmpfs("/tmp", tmp_limit, "1777"),
            *_mounts(course, hidden),
            *_answers_hidden(course),
            "--dev", "/dev", "--proc", "/proc",
            *gpu_devices(),
            # bwrap's /dev is a tmpfs without a size: shared memory gets a bounded one of its
            # own, and the rest of /dev turns read-only
            *sized_tmpfs("/dev/shm", SHM_LIMIT, "1777"), "--remount-ro", "/dev",
            *sized_tmpfs(MOUNT_POINT, work_limit, "1777"),
            "--ro-bind", str(home_template), f"{MOUNT_POINT}/home-template",
            "--chdir", MOUNT_POINT,
            "--", *inner]


def gpu_devices() -> list[str]:
    """NVIDIA's device files, and /sys read-only (CUDA reads the PCI tree), when there are any."""
    devices = sorted(Path("/dev").glob("nvidia*"))
    args = [a for device in devices for a in ("--dev-bind", str(device), str(device))]
    return args + (["--ro-bind-try", "/sys", "/sys"] if devices else [])


def drop_privileges(uid: int) -> list[str]:
    """The prefix that runs a command as `uid` with no capabilities (util-linux setpriv)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def limits(gpu: bool) -> list[str]:
    """The prefix setting the sandbox's resource limits (util-linux prlimit; a preexec function
    would run Python between fork and exec, which can deadlock a threaded grader)."""
    prefix = ["prlimit", f"--nproc={PROCESS_LIMIT}", "--nofile=4096", f"--fsize={FILE_LIMIT}",
              "--core=0"]
    if not gpu:
        prefix.append(f"--as={ADDRESS_SPACE_LIMIT}")
    return prefix + ["--"]


LOG_TAIL = 64 * 1024  # bytes of the sandbox's own error output kept


def run(argv: list[str], env: dict, wall: float, talk: Callable[[BinaryIO, BinaryIO], None],
        on_start: Callable[[int], None] | None = None) -> tuple[int | None, float, str]:
    """Run `argv` (`limits(...)` + `command(...)`) with the channel on its standard input and
    output, conducted by `talk(to_sandbox, from_sandbox)` in this thread (`on_start(pid)`
    first: the memory cap's watch); kill its process group at `wall` seconds.
    (exit status or None when killed, seconds, the end of its error output)."""
    started = time.monotonic()
    process = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    timed_out = threading.Event()
    if on_start is not None:
        on_start(process.pid)

    def kill() -> None:
        try:  # bwrap's own process group; the PID namespace dies with its first process
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    tail = bytearray()

    def drain() -> None:  # the error output, bounded: the last LOG_TAIL bytes
        for chunk in iter(lambda: process.stderr.read(65536), b""):
            tail.extend(chunk)
            del tail[:-LOG_TAIL]

    def stop_at_wall() -> None:
        timed_out.set()
        kill()

    timer = threading.Timer(wall, stop_at_wall)
    timer.daemon = True
    timer.start()
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        talk(process.stdin, process.stdout)
        try:
            status = process.wait(timeout=max(1.0, wall - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            status = None
    finally:
        timer.cancel()
        kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        reader.join(timeout=5)
    if timed_out.is_set():
        status = None
    return status, time.monotonic() - started, bytes(tail).decode(errors="replace")
