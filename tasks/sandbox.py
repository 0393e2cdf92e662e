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

Guaranteed by the kernel, through bubblewrap (`bwrap`, Debian package `bubblewrap`; required, there
is no unjailed fallback):
- an unprivileged uid: a root harness runs bwrap privileged and `setpriv` drops to a uid of its own
  per worker slot and role (no capabilities, empty bounding set, no_new_privs); a non-root harness
  gets an unprivileged user namespace (uid 65534, no nested user namespaces);
- the file system: read-only binds of /usr (and the /bin, /lib links into it), the Python
  installation, its venv and the launcher; a private tmpfs work dir (`Limits.disk_bytes`) that
  vanishes with the jail; a fresh /proc (the jail's own processes) and a minimal /dev. Nothing else
  of the host exists in the jail and the binds are read-only, so no path, descriptor or dir_fd lets
  the code read the harness's files or environment, or write, chmod, utime or pin (immutable-flag
  ioctl) anything that outlives the run;
- no network (own network namespace: a loopback that is down); own PID, IPC and UTS namespaces; a
  new session (no terminal injection);
- rlimits set inside the jail before the untrusted code is compiled: CPU time, address space, file
  size, tasks (RLIMIT_NPROC, per uid), open files, no core dumps; plus a wall-clock deadline and an
  output cap enforced here;
- cleanup: killing a jail's bwrap ends its whole PID namespace, and `--die-with-parent` ends the
  jails when the harness thread that started them dies, SIGKILL included;
- a clean environment: PATH, HOME/TMPDIR (the work dir), LANG and single-thread BLAS settings.

Guarded only by an audit hook inside the program (defence in depth; the jail holds without it, as
the hostile tests check with `audit_hook=False`): refusing process creation, sockets, ctypes,
tracing, signals to other processes and file changes outside the work dir.

Not guaranteed: the kernel itself (no seccomp filter: the jailed code reaches every syscall, and
under a root harness may create user namespaces of its own); tmpfs pages count against the host's
memory, not RLIMIT_AS; parallel harness processes reuse the same per-slot uids, so their
RLIMIT_NPROC counts add up. Names the tests take from the program are trusted as the official
harnesses trust them (HumanEval's scorer gives the judge the prompt's own helpers, so a completion
cannot rig `poly`). Tests that iterate or compare a non-plain object of the program fail here (no
MBPP or HumanEval reference solution needs that).
"""

from __future__ import annotations

import json
import math
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from harness.errors import UserError

CHILD = Path(__file__).with_name("sandbox_child.py")
LAUNCHER = "/spotbench/launcher.py"  # where CHILD appears inside a jail
WORKDIR = "/tmp"  # the jail's private tmpfs
JAIL_ENV = {"PATH": "/usr/bin:/bin", "HOME": WORKDIR, "TMPDIR": WORKDIR, "LANG": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
UID_BASE = 2_100_000_000  # root harness: slot s runs its program as UID_BASE + 2s, judge + 1
GRACE_S = 1.0  # how long the program may take to exit once the judge is done


@dataclass(frozen=True)
class Limits:
    """Per-program limits. Defaults suit HumanEval/MBPP tests (the slowest reference solutions take
    about a second)."""

    wall_s: float = 10.0
    cpu_s: int | None = None  # None: one second past the wall clock, which then always fires first
    memory_bytes: int = 1 << 30
    output_bytes: int = 1 << 20
    file_bytes: int = 16 << 20
    disk_bytes: int = 64 << 20  # size of the work dir's tmpfs
    processes: int = 16  # tasks (processes and threads) per jail


@dataclass(frozen=True)
class Outcome:
    """What happened to one run. `status` is passed, failed, timeout, output_limit or killed;
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
    """Worker slots: each bounds one run at a time and owns the uids of its jails."""
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()
    for slot in range(count):
        slots.put(slot)
    return slots


_SLOTS = _slot_queue(default_workers())


@cache
def tools() -> tuple[str, str]:
    """Paths of bwrap and setpriv; a clear error where bubblewrap is missing (no unjailed run)."""
    bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
    if bwrap is None or setpriv is None:
        raise UserError("the code sandbox needs bubblewrap and setpriv: "
                        "apt-get install -y bubblewrap util-linux")
    return bwrap, setpriv


@cache
def read_only_view() -> tuple[str, ...]:
    """bwrap arguments for what a jail sees of the host: /usr, the top-level links or dirs into it,
    the Python installation and the venv at their own paths (the venv's interpreter finds both),
    and the launcher."""
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

    bound = ["/usr"]
    python = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for tree in sorted(python):
        if not any(tree == b or tree.startswith(b + "/") for b in bound):
            bound.append(tree)
            args += [*parents(tree), "--ro-bind", tree, tree]
    return (*args, *parents(LAUNCHER), "--ro-bind", str(CHILD), LAUNCHER)


def jail_command(role: str, uid: int, limits: Limits) -> list[str]:
    """`python -I -B launcher.py ROLE` in a fresh jail: bwrap with everything unshared, and for a
    root harness setpriv down to `uid` (bwrap's own user namespace would map the jail to root)."""
    bwrap, setpriv = tools()
    command = [bwrap, *read_only_view(), "--proc", "/proc", "--dev", "/dev",
               "--perms", "1777", "--size", str(limits.disk_bytes), "--tmpfs", WORKDIR,
               "--chdir", WORKDIR, "--unshare-ipc", "--unshare-pid", "--unshare-net",
               "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
               "--clearenv"]
    for name, value in JAIL_ENV.items():
        command += ["--setenv", name, value]
    if os.geteuid() == 0:
        command += ["--cap-add", "CAP_SETUID,CAP_SETGID,CAP_SETPCAP", "--", setpriv,
                    f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                    "--bounding-set=-all", "--"]
    else:
        command += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns",
                    "--cap-drop", "ALL", "--"]
    return [*command, sys.executable, "-I", "-B", LAUNCHER, role]


def run(segments: list[tuple[str, str]], limits: Limits = Limits(), *,
        audit_hook: bool = True) -> Outcome:
    """Run the program `segments[:-1]` ((name, source) pairs, executed in order in one namespace)
    against the tests `segments[-1]`, once. `audit_hook=False` leaves the jail as the only guard.

    At most `default_workers()` runs at a time in this process, however many threads call this, so
    parallel scorers do not oversubscribe the machine."""
    if len(segments) < 2:
        raise ValueError("a run needs the program's segments and then the tests")
    slot = _SLOTS.get()
    try:
        return _run(segments, limits, slot, audit_hook)
    finally:
        _SLOTS.put(slot)


def run_many(programs: list[list[tuple[str, str]]], limits: Limits = Limits(),
             workers: int | None = None) -> list[Outcome]:
    """Run many programs in parallel (bounded by `workers` and the process-wide slots)."""
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(lambda segments: run(segments, limits), programs))


def _run(segments: list[tuple[str, str]], limits: Limits, slot: int, audit_hook: bool) -> Outcome:
    child_limits = {"cpu_s": limits.cpu_s or math.ceil(limits.wall_s) + 1,
                    "memory_bytes": limits.memory_bytes, "file_bytes": limits.file_bytes,
                    "processes": limits.processes}
    requests, replies = os.pipe(), os.pipe()  # judge -> program, program -> judge
    jobs = (("program", {"limits": child_limits, "segments": segments[:-1],
                         "audit_hook": audit_hook, "channel": [requests[0], replies[1]]}),
            ("judge", {"limits": child_limits, "tests": segments[-1][1],
                       "channel": [replies[0], requests[1]]}))
    start = time.monotonic()
    procs: list[subprocess.Popen] = []
    status = "done"
    try:
        try:
            for index, (role, job) in enumerate(jobs):
                procs.append(_spawn(jail_command(role, UID_BASE + 2 * slot + index, limits), job))
        finally:
            for fd in (*requests, *replies):
                os.close(fd)
        status, out = _collect(*procs, start + limits.wall_s, limits.output_bytes)
    finally:
        codes = [_stop(proc, patient=status == "done") for proc in procs]
    program_code, judge_code = codes
    if status == "done":
        status = _status(program_code, judge_code, out["judge_stdout"])
    stderr = out["program_stderr"][-2048:] + out["judge_stderr"][-2048:]
    return Outcome(status == "passed", status, program_code,
                   out["program_stdout"][-4096:].decode(errors="replace"),
                   stderr.decode(errors="replace"), time.monotonic() - start)


def _spawn(command: list[str], job: dict) -> subprocess.Popen:
    """Start one jail and hand it its job on stdin; the channel fds travel by number."""
    channel = job["channel"]
    proc = subprocess.Popen(command, env=JAIL_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                            pass_fds=channel)
    try:
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc


def _collect(program: subprocess.Popen, judge: subprocess.Popen, deadline: float,
             cap: int) -> tuple[str, dict[str, bytes]]:
    """Read both jails' output until all of it ends: 'done', 'timeout' or 'output_limit'. Once the
    judge is done, the program gets `GRACE_S` to exit (it does as soon as the channel closes)."""
    streams = {program.stdout.fileno(): "program_stdout", program.stderr.fileno(): "program_stderr",
               judge.stdout.fileno(): "judge_stdout", judge.stderr.fileno(): "judge_stderr"}
    out = {name: bytearray() for name in streams.values()}
    judge_open = {judge.stdout.fileno(), judge.stderr.fileno()}
    status = "done"
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = "timeout" if judge_open else "done"
                break
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    out[streams[key.fd]] += chunk
                    continue
                selector.unregister(key.fd)
                judge_open.discard(key.fd)
                if not judge_open:
                    deadline = min(deadline, time.monotonic() + GRACE_S)
            if sum(map(len, out.values())) > cap:
                status = "output_limit"
                break
    return status, {name: bytes(data) for name, data in out.items()}


def _stop(proc: subprocess.Popen, patient: bool) -> int | None:
    """The jail's exit code if it ended by itself (waiting up to GRACE_S when `patient`), else
    None after killing it: killing bwrap ends its whole PID namespace. Killed before it is reaped,
    so its process group id cannot have been reused."""
    try:
        code = proc.wait(GRACE_S if patient else 0)
    except subprocess.TimeoutExpired:
        code = None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return code


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
