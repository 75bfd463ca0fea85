"""What bubblewrap and prlimit cannot bound for one sandbox (grader side).

- `UidLease`: a uid (and the gid of the same number) for one sandbox, held by no other sandbox
  at the same time, of this grader run or of any other on the machine: one lock file per uid,
  taken with an exclusive flock. Before and after, that uid's kernel keyrings are cleared and
  its leftover processes killed, so nothing one sandbox left behind reaches the next.
- `fresh_keyring_prefix`: a session keyring of the sandbox's own, not the grader's (which every
  sandbox would otherwise share).
- `memory_cap`: a bound on the memory of a whole sandbox, all its processes together: a memory
  cgroup of its own where the host lets the grader make one (cgroup v2 or v1), else a watchdog
  that sums the memory of the sandbox's processes and kills them all above the bound. Either
  way `MemoryCap.hit` says afterwards whether the sandbox was stopped for it.

A grader started by another user than root runs its sandboxes as that user: a lease then only
reserves the number, and the cap is a cgroup only where the host delegates one to that user.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import os
import platform
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

SANDBOX_UID_BASE = 61000  # sandboxes run as uids (and gids) SANDBOX_UID_BASE and up
UID_POOL_SIZE = 512
LOCK_FOLDER = Path("/run/flashcourse-grade")
# where /run is not writable; the same path for every grader run (not $TMPDIR, which may differ)
FALLBACK_LOCK_FOLDER = Path("/tmp")
CGROUP_NAME = "flashcourse-grade"  # the folder of the sandboxes' cgroups, under the grader's own
POLL_SECONDS = 0.2  # how often the cap looks at a running sandbox
KILL_WAIT_SECONDS = 5.0  # how long to wait for killed processes to go

KEYCTL_JOIN_SESSION_KEYRING = 1
KEYCTL_CLEAR = 7
KEY_SPEC_USER_KEYRING = -4
KEY_SPEC_USER_SESSION_KEYRING = -5
KEYCTL_SYSCALL = {"x86_64": 250, "aarch64": 219}  # the syscall's number, per machine

# Runs as root in a fresh, single-threaded interpreter, then becomes the uid (a grader thread
# must not change its own uid, and the uid may not be able to read Python's files).
_CLEAR_KEYRINGS = f"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, number = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)
for keyring in ({KEY_SPEC_USER_KEYRING}, {KEY_SPEC_USER_SESSION_KEYRING}):
    args = [ctypes.c_long(a) for a in (number, {KEYCTL_CLEAR}, keyring)]
    if libc.syscall(*args) == -1:
        sys.exit(os.strerror(ctypes.get_errno()))
"""

# Joins a new, empty session keyring, then runs the rest of the command line in its place.
_JOIN_FRESH_KEYRING = f"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
number = ctypes.c_long(int(sys.argv[1]))
if libc.syscall(number, ctypes.c_long({KEYCTL_JOIN_SESSION_KEYRING}), None) == -1:
    if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):  # no keyrings: nothing to share
        sys.exit("cannot give the sandbox a keyring of its own: "
                 + os.strerror(ctypes.get_errno()))
os.execvp(sys.argv[2], sys.argv[2:])
"""

_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        print(f"grader: {message}", file=sys.stderr)


class NoFreeUid(RuntimeError):
    """Every uid of the pool is held by a running sandbox."""


def lock_folder() -> Path:
    """The folder of the uid lock files, made 0700 when missing; refused when it is a link or
    someone else can write to it (they could swap a lock file for a fresh one)."""
    folder = LOCK_FOLDER
    if not os.access(folder.parent, os.W_OK):
        folder = FALLBACK_LOCK_FOLDER / f"{LOCK_FOLDER.name}-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = os.lstat(folder)
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
            or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        raise RuntimeError(f"{folder} must be a folder of this user's that no one else can "
                           "write to: remove it and grade again")
    return folder


def _has_account(uid: int) -> bool:
    """Whether the number names a user or a group: never lend a real account's rights."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


class UidLease:
    """`with UidLease() as lease:` run one sandbox as `lease.uid` / `lease.gid`. Raises NoFreeUid
    when the whole pool is held; uids that name an account are skipped."""

    def __init__(self, base: int = SANDBOX_UID_BASE, size: int = UID_POOL_SIZE,
                 folder: Path | None = None):
        self.base, self.size, self.folder = base, size, folder
        self.uid = self.gid = -1
        self._lock: int | None = None

    def __enter__(self) -> UidLease:
        folder = self.folder or lock_folder()
        for uid in range(self.base, self.base + self.size):
            if _has_account(uid):
                continue
            lock = os.open(folder / f"uid-{uid}.lock",
                           os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:  # held until the file is closed: a grader that dies frees its uids
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(lock)
                continue
            self._lock, self.uid, self.gid = lock, uid, uid
            try:
                scrub_uid(uid)
            except BaseException:
                self._release()
                raise
            return self
        raise NoFreeUid(f"all {self.size} sandbox uids from {self.base} are in use; grade "
                        "with fewer --jobs or wait for other grader runs to end")

    def __exit__(self, *exc) -> None:
        try:
            scrub_uid(self.uid)
        finally:
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # closing drops the flock
            self._lock = None


def scrub_uid(uid: int) -> None:
    """Kill what still runs as `uid` and clear its keyrings (root only: a user cannot act as
    another)."""
    if os.geteuid() != 0:
        return
    kill_processes_of(uid)
    clear_keyrings(uid)


def kill_processes_of(uid: int) -> None:
    """SIGKILL every live process with `uid` as its real, effective, saved or file-system uid,
    until none is left (or KILL_WAIT_SECONDS have passed)."""
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while time.monotonic() < deadline:
        found = [pid for pid in _pids() if _runs_as(pid, uid)]
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _runs_as(pid: int, uid: int) -> bool:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False  # gone
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    if fields.get("State", "").split()[:1] == ["Z"]:
        return False  # a zombie runs nothing; its parent reaps it
    return str(uid) in fields.get("Uid", "").split()


def clear_keyrings(uid: int) -> None:
    """Empty `uid`'s user and user-session keyrings (root only). Where the kernel offers no
    keyrings (or a seccomp filter refuses them), say so once: no sandbox can store keys there
    either."""
    number = KEYCTL_SYSCALL.get(platform.machine())
    if number is None:
        _say_once(f"keyrings are not cleared between sandboxes on {platform.machine()}")
        return
    result = subprocess.run([sys.executable, "-I", "-S", "-c", _CLEAR_KEYRINGS, str(uid),
                             str(number)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        reason = result.stderr.strip().splitlines()[-1:] or [f"status {result.returncode}"]
        _say_once(f"cannot clear the sandbox users' keyrings ({reason[0]}); going on")


def fresh_keyring_prefix() -> list[str]:
    """The command prefix that runs the rest in a new, empty session keyring. Without it a
    sandbox inherits the grader's session keyring (systemd gives services one, PAM gives logins
    one), possesses it whatever its uid, and can leave keys in it for the next sandbox."""
    number = KEYCTL_SYSCALL.get(platform.machine())
    if number is None:
        _say_once(f"sandboxes share the grader's session keyring on {platform.machine()}")
        return []
    return [sys.executable, "-I", "-S", "-c", _JOIN_FRESH_KEYRING, str(number)]


class MemoryCap:
    """The memory bound of one sandbox, made by `memory_cap`. Start the sandbox with `prefix`
    in front of its command (empty for the watchdog) and in its own session, then
    `watch(pid)`. `hit` is True once the sandbox was stopped for using more than `limit`."""

    def __init__(self, limit: int, uid: int | None, cgroup: _Cgroup | None):
        self.limit, self.uid, self.cgroup = limit, uid, cgroup
        self.kind = cgroup.kind if cgroup else "watchdog"
        self.prefix = cgroup.prefix() if cgroup else []
        self.hit = False
        self._root: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def message(self) -> str:
        return f"stopped: the sandbox used more than {self.limit / 2**30:g} GiB of memory"

    def watch(self, pid: int) -> None:
        """Watch the sandbox started as `pid` (the leader of its own process group)."""
        self._root = pid
        self._thread = threading.Thread(target=self._watch, name=f"memory-cap-{pid}",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if self._over():
                self.hit = True
                self._kill()
                return

    def _over(self) -> bool:
        if self.cgroup is not None:  # the kernel holds the bound; this one only sees it hit
            return self.cgroup.limit_hit()
        return sum(_memory_of(pid) for pid in self._members()) > self.limit

    def _members(self) -> set[int]:
        """The sandbox's processes: the tree under its first one and, with a uid, every process
        running as that uid, in case one left the tree."""
        tree = _descendants(self._root) if self._root is not None else set()
        if self.uid is not None:
            tree |= {pid for pid in _pids() if _owner_of(pid) == self.uid}
        return tree

    def _kill(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()
            return
        if self._root is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._root, signal.SIGKILL)
        for pid in self._members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.cgroup is not None:
            self.hit = self.hit or self.cgroup.limit_hit()
            self.cgroup.kill()
            self.cgroup.remove()


@contextlib.contextmanager
def memory_cap(limit_bytes: int, uid: int | None = None,
               use_cgroup: bool = True) -> Iterator[MemoryCap]:
    """Bound the memory of one sandbox, every process of it together, to `limit_bytes`:

        with memory_cap(limit, uid) as cap:
            process = subprocess.Popen(cap.prefix + argv, start_new_session=True, ...)
            cap.watch(process.pid)
            ...  # wait for it, kill it
        if cap.hit: ...  # cap.message()

    A cgroup of its own when the host lets the grader make one (`use_cgroup`), else the
    watchdog. On leaving, whatever still runs in the cgroup is killed and the cgroup removed."""
    cgroup = _Cgroup.make(limit_bytes) if use_cgroup else None
    cap = MemoryCap(limit_bytes, uid, cgroup)
    try:
        yield cap
    finally:
        cap.close()


def _descendants(root: int) -> set[int]:
    """`root` and every process under it, from every process's parent."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # gone
        parent = int(text[text.rindex(")") + 2:].split()[1])  # the name may hold ')' too
        children.setdefault(parent, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo += children.get(pid, [])
    return tree


def _owner_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _memory_of(pid: int) -> int:
    """The proportional set size of a process (shared pages split between their users, so a
    forked worker is not counted twice), else its resident size; 0 when it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    try:
        resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return resident * os.sysconf("SC_PAGE_SIZE")


class _Cgroup:
    """A fresh memory cgroup for one sandbox, v2 (unified) or v1."""

    def __init__(self, path: Path, version: int):
        self.path, self.version = path, version
        self.kind = f"cgroup v{version}"

    @classmethod
    def make(cls, limit: int) -> _Cgroup | None:
        """The first place the host lets this process make a cgroup with the limit set: near
        its own cgroup first (inside the grader's own bounds), then the hierarchy's top."""
        for version, parent in _cgroup_parents():
            path = parent / CGROUP_NAME / f"sandbox-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.parent.mkdir(exist_ok=True)
                if version == 2:  # its children get the memory controller only when asked
                    (path.parent / "cgroup.subtree_control").write_text("+memory")
                path.mkdir()
            except OSError:
                continue
            cgroup = cls(path, version)
            try:
                cgroup._set_limit(limit)
            except OSError:
                cgroup.remove()
                continue
            return cgroup
        return None

    def _set_limit(self, limit: int) -> None:
        if self.version == 2:
            (self.path / "memory.max").write_text(str(limit))
            self._write_if_there("memory.swap.max", "0")  # swap would be memory past the bound
            self._write_if_there("memory.oom.group", "1")  # the kernel kills all, not one
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            self._write_if_there("memory.memsw.limit_in_bytes", str(limit))  # swap included

    def _write_if_there(self, name: str, value: str) -> None:
        if (self.path / name).exists():
            (self.path / name).write_text(value)

    def prefix(self) -> list[str]:
        """The command prefix that moves the process into the cgroup, then runs the rest: it
        is in before it runs anything, and so are all its children. When the move fails, the
        command does not run."""
        shell = shutil.which("sh") or "/bin/sh"
        return [shell, "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    def limit_hit(self) -> bool:
        try:
            if self.version == 2:
                events = _counters(self.path / "memory.events")
                return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0
            control = _counters(self.path / "memory.oom_control")
            if "oom_kill" in control:
                return control["oom_kill"] > 0
            # kernels before 4.13 count no OOM kills: the times the limit was reached instead
            return int((self.path / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def _pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL everything in the cgroup and wait until it is empty."""
        with contextlib.suppress(OSError):  # one write kills all, on kernels since 5.14
            (self.path / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while (pids := self._pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as err:  # busy while the last processes are leaving it
                if err.errno != errno.EBUSY or time.monotonic() > deadline:
                    _say_once(f"cannot remove the sandbox cgroup {self.path}: {err}")
                    return
                time.sleep(0.05)


def _counters(path: Path) -> dict[str, int]:
    pairs = (line.split() for line in path.read_text().splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


def _cgroup_parents() -> Iterator[tuple[int, Path]]:
    """(version, folder) where a sandbox cgroup could go, best first: the grader's own memory
    cgroup and its ancestors in v2 (only those that hand the memory controller down), its own
    v1 memory cgroup, then the top of each hierarchy."""
    try:
        own = dict(_own_cgroups())
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    for line in mounts:
        fields = line.split()
        dash = fields.index("-")
        root, point, fstype, options = fields[3], Path(fields[4]), fields[dash + 1], \
            fields[dash + 3].split(",")
        if fstype == "cgroup2" and "" in own:
            inside = _inside(point, root, own[""])
            for folder in [inside, *inside.parents] if inside else [point]:
                if not folder.is_relative_to(point):
                    break
                if _hands_down_memory(folder):
                    yield 2, folder
        elif fstype == "cgroup" and "memory" in options and "memory" in own:
            inside = _inside(point, root, own["memory"])
            yield from ((1, folder) for folder in dict.fromkeys([inside or point, point]))


def _own_cgroups() -> Iterator[tuple[str, str]]:
    """(controller, path) of this process's cgroups; controller "" is the v2 hierarchy."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            yield controller, path


def _inside(point: Path, root: str, path: str) -> Path | None:
    """Where the cgroup `path` is under a hierarchy mounted at `point` from `root`."""
    relative = os.path.relpath(path, root)
    return None if relative.startswith("..") else (point / relative).resolve()


def _hands_down_memory(folder: Path) -> bool:
    try:
        controllers = (folder / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False
    return "memory" in controllers and os.access(folder, os.W_OK)
