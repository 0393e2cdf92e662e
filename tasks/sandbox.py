"""Run model-written Python inside a bubblewrap jail, and decide pass/fail outside it.

A run is the program (every segment but the last: model-written, untrusted) and its tests (the last
segment: trusted dataset code). They run as two processes, each in its own jail (`sandbox_child.py`
is the launcher of both). The program executes its code, then answers requests. The judge runs the
tests; what they take from the program (the function under test, a class, a constant) reaches them
as plain data decoded into genuine builtin objects (an instance of a builtin's subclass, e.g. a
Counter, as the builtin value it holds), or else as a stand-in that can be called, have attributes
read and set, and be passed back, but equals only itself and has no truth value. Comparisons,
builtins and asserts therefore all run on genuine objects in the judge, which the program cannot
see, signal or write to; builtin names (`abs`) are the judge's own unless they are all the tests
take from the program (MBPP/126 tests a function named `sum`). A run passes only if the judge writes
`pass` on its own stdout and exits 0; nothing the program prints, returns or exits with decides it.
Before a process scores its first program, `check_jail` proves that the jail gives a known-correct
and a known-wrong program their verdicts; a jail that cannot is refused with what it printed, never
left to score every program as wrong.

Guaranteed by the kernel, through bubblewrap (`bwrap`, Debian package `bubblewrap`; required, there
is no unjailed fallback):
- an unprivileged uid of its own: a root harness runs bwrap privileged and `setpriv` drops to a
  uid no other running jail has (no capabilities, empty bounding set, no_new_privs): each worker
  slot leases a pair, program and judge, by a lock file under /run that every scorer process on
  the host respects, so RLIMIT_NPROC (per uid) counts one jail's tasks only and a fork-heavy
  program cannot starve another scorer's; a non-root harness gets an unprivileged user namespace
  (uid 65534, bwrap's `--disable-userns`);
- no user namespaces of its own, under either harness: a seccomp filter (libseccomp's, loaded by
  bwrap before the jail's command starts; `sandbox_jail.userns_filter`) fails unshare and clone
  with CLONE_NEWUSER (EPERM) and clone3 (ENOSYS: libc falls back to clone), and kills a thread
  that makes a syscall of another ABI (i386, x32), so `unshare -r` and the mounts it would allow
  are refused;
- the file system: read-only binds of /usr (and the /bin, /lib links into it), the Python
  installation and its venv; a read-only copy of the launcher; a private tmpfs at /tmp
  (`Limits.disk_bytes`) that vanishes with the jail, mounted before the binds, so a Python
  installed under /tmp is bound over it rather than hidden, and holding the work dir, which the
  jailed uid makes itself (a program may remove it, as it could its own temporary directory); a
  fresh /proc (the jail's own processes) and a minimal /dev. Nothing else of the host exists in
  the jail and the binds are read-only, so no path, descriptor or dir_fd lets the code read the
  harness's files or environment, or write, chmod, utime or pin (immutable-flag ioctl) anything
  that outlives the run;
- no network (own network namespace: a loopback that is down); own PID, IPC and UTS namespaces; a
  new session (no terminal injection);
- rlimits set inside the jail before the untrusted code is compiled: CPU time (what decides a
  timeout, so a loaded machine does not fail a correct program), address space, file size, tasks
  (RLIMIT_NPROC, per uid), open files, no core dumps; plus a generous wall-clock backstop and an
  output cap enforced here;
- cleanup: killing a jail's bwrap ends its whole PID namespace, and `--die-with-parent` ends the
  jails when the harness thread that started them dies, SIGKILL included;
- a clean environment: PATH, HOME/TMPDIR (/tmp), LANG and single-thread BLAS settings;
- of the host's paths, only /usr's and the Python trees': bwrap reads its options, the launcher
  and the filter from pipes (`sandbox_jail.start`), and a shell step takes the interpreter's path
  from the environment and unsets it, so the argv of bwrap, the jail's pid 1 (/proc/1/cmdline),
  names no other host path, nor does the jail's mountinfo or environment.

Guarded only by an audit hook inside the program (defence in depth; the jail holds without it, as
the hostile tests check with `audit_hook=False`): refusing process creation, sockets, ctypes,
tracing, signals to other processes and file changes outside /tmp.

Not guaranteed: the kernel itself (the seccomp filter refuses new user namespaces only: every
other syscall is reachable); the Python trees are bound at their host paths (the venv's
interpreter finds its base Python there), so the code sees those paths (sys.prefix, its own
/proc/self/cmdline, the mount points and backing device in /proc/self/mountinfo), and a venv
inside a checkout shows the checkout's path; under a root harness, pid 1's argv shows the leased
uid; tmpfs pages count against the host's memory, not RLIMIT_AS; under a non-root harness the
jails share uid 65534. Names the tests take from the program are trusted as the official harnesses
trust them (HumanEval's scorer gives the judge the prompt's own helpers, so a completion cannot rig
`poly`). Tests that iterate or compare a non-plain object of the program fail here (no MBPP or
HumanEval reference solution needs that).
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from harness.errors import UserError
from tasks.sandbox_jail import collect, start, stop, userns_filter

CHILD = Path(__file__).with_name("sandbox_child.py")
LAUNCHER = "/spotbench/launcher.py"  # where CHILD appears inside a jail
JAIL_TMP = "/tmp"  # the jail's private tmpfs, mounted before the binds so that none is hidden
WORKDIR = "/tmp/work"  # the jail's own working directory, made by the jailed uid (see work_dir)
JAIL_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": JAIL_TMP,
    "TMPDIR": JAIL_TMP,
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
# The jail's command: a shell step that takes the interpreter's path from the environment (set by
# bwrap), so that no host path is on bwrap's argv, which the jail's pid 1 shows; then, for a root
# harness, setpriv (its arguments follow ROLE), which names the interpreter when it cannot run it.
INTERPRETER_VAR = "SPOTBENCH_PYTHON"
INTERPRETER = f'python=${INTERPRETER_VAR}; unset {INTERPRETER_VAR} PWD; exec "$@" "$python" -I -B {LAUNCHER} "$0"'
UID_BASE = 2_100_000_000  # root harness: lease n runs its program as UID_BASE + 2n, judge + 1
UID_LEASES = 1 << 20  # uid pairs to lease from (far below 2**32 - UID_BASE)
UID_LOCKS = Path("/run/spotbench-jail-uids")  # one lock file per leased pair, held while in use


@dataclass(frozen=True)
class Limits:
    """Per-program limits. Defaults suit HumanEval/MBPP tests (the slowest reference solutions take
    about a second of CPU; MBPP/123 takes four). CPU time decides (a loaded machine slows a program
    down but does not make it use more CPU); the wall clock is a generous backstop for programs
    that wait without computing. Either one ends the run as a `timeout`."""

    cpu_s: int = 10  # CPU seconds of each jailed process (RLIMIT_CPU)
    wall_s: float | None = None  # None: 6 x cpu_s
    memory_bytes: int = 1 << 30
    output_bytes: int = 1 << 20
    file_bytes: int = 16 << 20
    disk_bytes: int = 64 << 20  # size of the work dir's tmpfs
    processes: int = 16  # tasks (processes and threads) per jail


@dataclass(frozen=True)
class Outcome:
    """What happened to one run. `status` is passed, failed, timeout (CPU time or the wall clock ran
    out: not a verdict on the tests), output_limit or killed;
    `returncode` is the program's (None if it was stopped); stderr is the program's, then the
    judge's (the failing assert)."""

    passed: bool
    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float


def default_workers() -> int:
    """One program per available CPU: the programs are CPU-bound."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _slot_queue(count: int) -> queue.SimpleQueue[int]:
    """Worker slots: each bounds one run at a time and leases the uids of its jails."""
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()
    for slot in range(count):
        slots.put(slot)
    return slots


_SLOTS = _slot_queue(default_workers())
_LEASES: dict[int, tuple[int, int]] = {}  # slot -> (pid that leased, first uid of the pair)
_LEASING = threading.Lock()


def slot_uid(slot: int) -> int:
    """The first of the two uids `slot` runs its jails as (a root harness only), leased once per
    process; a forked process leases its own."""
    with _LEASING:
        pid, uid = _LEASES.get(slot, (None, 0))
        if pid != os.getpid():
            uid = lease_uids()
            _LEASES[slot] = (os.getpid(), uid)
    return uid


def lease_uids() -> int:
    """A uid pair no live process on this host holds: the first lock file under UID_LOCKS that
    takes an exclusive flock. The descriptor stays open, so the lease ends with the process."""
    try:
        UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
        for n in range(UID_LEASES):
            fd = os.open(UID_LOCKS / str(n), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return UID_BASE + 2 * n
    except OSError as error:
        raise UserError(
            f"the code sandbox cannot lease jail uids under {UID_LOCKS}: {error}; "
            "run the scorer as root on a host with a writable /run"
        ) from None
    raise UserError(
        f"the code sandbox has no free jail uids: {UID_LEASES} pairs are leased; run fewer scorer processes"
    )


@cache
def tools() -> tuple[str, str]:
    """Paths of bwrap and setpriv; a clear error where bubblewrap is missing (no unjailed run)."""
    bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
    if bwrap is None or setpriv is None:
        raise UserError("the code sandbox needs bubblewrap and setpriv: apt-get install -y bubblewrap util-linux")
    return bwrap, setpriv


@cache
def read_only_view() -> tuple[str, ...]:
    """bwrap arguments for what a jail sees of the host: /usr, the top-level links or dirs into it,
    and the Python installation and the venv at their own paths (the venv's interpreter finds both);
    the launcher's directory, which `_spawn` fills with a copy of the launcher."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    made: set[Path] = set()

    def parents(path: str) -> list[str]:
        """Make the dirs above a mount point 0755, so the unprivileged uid can walk to it."""
        needed = [p for p in reversed(Path(path).parents[:-1]) if p not in made]
        made.update(needed)
        return [arg for p in needed for arg in ("--perms", "0755", "--dir", str(p))]

    for tree in python_trees():
        args += [*parents(tree), "--ro-bind", tree, tree]
    return (*args, *parents(LAUNCHER))


@cache
def python_trees() -> tuple[str, ...]:
    """The Python installation and venv trees a jail binds besides /usr, wherever they live (under
    /tmp they land inside the jail's tmpfs, which is mounted first). A tree at or above the jail's
    /tmp would hide its tmpfs: refused."""
    bound = ["/usr"]
    python = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for tree in sorted(python):
        if not any(under(tree, b) for b in bound):
            if under(JAIL_TMP, tree):
                raise UserError(
                    f"the code sandbox cannot jail a Python installed at {tree}: it "
                    f"would hide the jail's {JAIL_TMP}; install Python or the venv "
                    "in a directory of its own"
                )
            bound.append(tree)
    return tuple(bound[1:])


def under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


@cache
def work_dir() -> str:
    """The jail's working directory: WORKDIR, or WORKDIR-N where a bound tree lives under it. The
    jailed uid makes it, so a program may remove it as it could its own temporary directory."""
    trees, name, n = python_trees(), WORKDIR, 0
    while any(under(tree, name) for tree in trees):
        n += 1
        name = f"{WORKDIR}-{n}"
    return name


def jail_command(role: str, uid: int, limits: Limits) -> list[str]:
    """`python -I -B launcher.py ROLE` in a fresh jail: bwrap with everything unshared, and for a
    root harness setpriv down to `uid` (bwrap's own user namespace would map the jail to root). The
    interpreter's path reaches the command through the environment (see INTERPRETER)."""
    bwrap, setpriv = tools()
    command = [
        bwrap,
        "--perms",
        "1777",
        "--size",
        str(limits.disk_bytes),
        "--tmpfs",
        JAIL_TMP,
        *read_only_view(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--chdir",
        JAIL_TMP,
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]
    for name, value in {**JAIL_ENV, INTERPRETER_VAR: sys.executable}.items():
        command += ["--setenv", name, value]
    if os.geteuid() == 0:
        return [
            *command,
            "--cap-add",
            "CAP_SETUID,CAP_SETGID,CAP_SETPCAP",
            "--",
            "/bin/sh",
            "-c",
            INTERPRETER,
            role,
            setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ]
    command += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns", "--cap-drop", "ALL", "--"]
    return [*command, "/bin/sh", "-c", INTERPRETER, role]


def run(segments: list[tuple[str, str]], limits: Limits = Limits(), *, audit_hook: bool = True) -> Outcome:
    """Run the program `segments[:-1]` ((name, source) pairs, executed in order in one namespace)
    against the tests `segments[-1]`, once. `audit_hook=False` leaves the jail as the only guard.

    At most `default_workers()` runs at a time in this process, however many threads call this, so
    parallel scorers do not oversubscribe the machine. The first run of a process waits for
    `check_jail`: a jail that cannot score raises instead of failing every program."""
    if len(segments) < 2:
        raise ValueError("a run needs the program's segments and then the tests")
    check_jail()
    return _in_slot(segments, limits, audit_hook)


def _in_slot(segments: list[tuple[str, str]], limits: Limits, audit_hook: bool) -> Outcome:
    slot = _SLOTS.get()
    try:
        return _run(segments, limits, slot, audit_hook)
    finally:
        _SLOTS.put(slot)


PROBE_TESTS = "assert add(2, 3) == 5\n"
PROBE_RIGHT = "def add(a, b):\n    return a + b\n"
PROBE_WRONG = "def add(a, b):\n    return a - b\n"
_checked = threading.Lock()
_jail_works = False


def check_jail() -> None:
    """Prove that the jail scores before anything is scored with it: a known-correct program must
    pass and a known-wrong one fail its assert. Otherwise (bubblewrap refused, the interpreter not
    found in the jail, ...) raise a one-line UserError with what the jail printed, because a broken
    jail would score every program as wrong, silently. Once per process once it has held."""
    global _jail_works
    with _checked:
        if _jail_works:
            return
        limits = Limits(cpu_s=10, wall_s=60)
        right = _in_slot([("solution", PROBE_RIGHT), ("tests", PROBE_TESTS)], limits, True)
        wrong = _in_slot([("solution", PROBE_WRONG), ("tests", PROBE_TESTS)], limits, True)
        for name, outcome, expected in (("known-correct", right, "passed"), ("known-wrong", wrong, "failed")):
            if outcome.status != expected or (expected == "failed" and "AssertionError" not in outcome.stderr):
                said = (
                    " | ".join(line.strip() for line in outcome.stderr.splitlines() if line.strip())[:600] or "nothing"
                )
                raise UserError(
                    f"the code sandbox does not work: a {name} program came out "
                    f"{outcome.status} (expected {expected}); the jail said: {said}; "
                    "fix the jail (bwrap must run here: see tasks/sandbox.py) before "
                    "scoring code"
                )
        _jail_works = True


def run_many(
    programs: list[list[tuple[str, str]]], limits: Limits = Limits(), workers: int | None = None
) -> list[Outcome]:
    """Run many programs in parallel (bounded by `workers` and the process-wide slots)."""
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(lambda segments: run(segments, limits), programs))


def _run(segments: list[tuple[str, str]], limits: Limits, slot: int, audit_hook: bool) -> Outcome:
    child_limits = {
        "cpu_s": limits.cpu_s,
        "memory_bytes": limits.memory_bytes,
        "file_bytes": limits.file_bytes,
        "processes": limits.processes,
    }
    requests, replies = os.pipe(), os.pipe()  # judge -> program, program -> judge
    where = {"tmp_dir": JAIL_TMP, "work_dir": work_dir()}
    jobs: tuple[tuple[str, dict], ...] = (
        (
            "program",
            {
                "limits": child_limits,
                "segments": segments[:-1],
                **where,
                "audit_hook": audit_hook,
                "channel": [requests[0], replies[1]],
            },
        ),
        ("judge", {"limits": child_limits, "tests": segments[-1][1], **where, "channel": [replies[0], requests[1]]}),
    )
    began = time.monotonic()
    procs: list[subprocess.Popen] = []
    status = "done"
    try:
        try:
            for index, (role, job) in enumerate(jobs):
                uid = slot_uid(slot) + index if os.geteuid() == 0 else 65534
                procs.append(_spawn(jail_command(role, uid, limits), job))
        finally:
            for fd in (*requests, *replies):
                os.close(fd)
        wall_s = limits.wall_s if limits.wall_s is not None else 6 * limits.cpu_s
        program, judge = procs
        status, out = collect(program, judge, began + wall_s, limits.output_bytes)
    finally:
        codes = [stop(proc, patient=status == "done") for proc in procs]
    program_code, judge_code = codes
    if status == "done":
        status = _status(program_code, judge_code, out["judge_stdout"])
    stderr = out["program_stderr"][-2048:] + out["judge_stderr"][-2048:]
    return Outcome(
        status == "passed",
        status,
        program_code,
        out["program_stdout"][-4096:].decode(errors="replace"),
        stderr.decode(errors="replace"),
        time.monotonic() - began,
    )


def _spawn(command: list[str], job: dict) -> subprocess.Popen:
    """Start one jail with the launcher and the seccomp filter, and hand it its job on stdin; the
    channel fds travel by number."""
    files = {LAUNCHER: CHILD.read_bytes()}
    return start(command, json.dumps(job).encode(), job["channel"], env=JAIL_ENV, files=files, seccomp=userns_filter())


def _status(program_code: int | None, judge_code: int | None, verdict: bytes) -> str:
    """passed only on the judge's word; else why the run failed (bwrap reports a child killed by
    signal N as 128 + N)."""
    if judge_code == 0 and verdict == b"pass\n":
        return "passed"
    codes = [c for c in (program_code, judge_code) if c is not None]
    if 128 + signal.SIGXCPU in codes:
        return "timeout"
    if any(c > 128 for c in codes):
        return "killed"
    return "failed"
