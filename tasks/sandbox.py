"""Run model-written Python in a locked-down child process and decide pass/fail unforgeably.

Each program runs as `[unshare --net --pid --fork --kill-child] python -I -B sandbox_child.py` in
a fresh temporary directory, with a clean environment, in its own session, and is fed its code and a
random pass nonce on stdin (never on disk, in argv or in the environment). A program *passes* only if
it exits 0 AND its stdout ends with the nonce, which the launcher writes only after every segment
(solution, then the harness's tests, compiled separately so the solution cannot swallow them into a
string) ran to completion. So `sys.exit(0)` / `os._exit(0)` before the tests, `atexit` tricks,
exceptions swallowed by a replaced `sys.excepthook`, or replacing builtins do not pass.

Guaranteed by the kernel (hold even against deliberately hostile code):
- wall-clock limit (the harness kills the whole process group at the deadline), CPU time
  (RLIMIT_CPU), address space (RLIMIT_AS), size of any file written (RLIMIT_FSIZE), no core dumps;
- bounded output: the harness reads at most `output_bytes` and kills the program past that;
- a clean environment: only PATH, HOME/TMPDIR (the temp dir) and LANG; no inherited secrets or fds;
- cleanup: the process group is SIGKILLed at the end; with `unshare` the program is PID 1 of its own
  PID namespace, so everything it started dies with it, even if it left the process group;
- with `unshare`: no network at all (a fresh network namespace has only a loopback that is down).
- RLIMIT_NPROC only when the harness is not root (the kernel ignores it for root).

Guarded by an audit hook (`sys.addaudithook`) installed before the program runs, which refuses:
sockets; process creation (fork, exec, spawn, system, subprocess, whose C fork primitive is also
replaced); signals to any other process; ctypes and other modules that reach below the hooks;
sys.settrace/setprofile (which could jump over asserts); raising the rlimits; writing, deleting,
renaming, linking or chmod-ing anything outside the temp dir (paths resolved through symlinks);
reading files outside the Python installation, sys.path and the temp dir (so not /proc/<pid>/environ
of the harness, nor ~/.ssh).

Not guaranteed: the harness runs as root here, so file-system protection outside the temp dir rests
on the audit hook, which is a Python-level guard and not a security boundary: code that corrupts the
interpreter's memory (e.g. through a CPython bug) can remove it. The nonce lives in the launcher's
memory, so code that deliberately walks interpreter frames to find it could forge a pass. Test
results can still be gamed by returning objects that compare equal to anything. Treat this as a
robust harness against mistakes and casual misbehaviour of model-written code, not as a jail for an
adversary; run untrusted workloads in a VM or container on top of it.
"""

from __future__ import annotations

import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

CHILD = Path(__file__).with_name("sandbox_child.py")
UNSHARE_VARIANTS = (
    ["unshare", "--net", "--pid", "--fork", "--kill-child"],
    ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"],
)


@dataclass(frozen=True)
class Limits:
    """Per-program limits. Defaults suit HumanEval/MBPP tests (the slowest reference solutions take
    about a second)."""

    wall_s: float = 10.0
    cpu_s: int | None = None  # None: one second past the wall clock, which then always fires first
    memory_bytes: int = 1 << 30
    output_bytes: int = 1 << 20
    file_bytes: int = 16 << 20
    processes: int = 16


@dataclass(frozen=True)
class Outcome:
    """What happened to one program. `status` is passed, failed, timeout, output_limit or killed."""

    passed: bool
    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float


@cache
def isolation_prefix() -> tuple[str, ...]:
    """The first `unshare` invocation that works here (root: plain namespaces; otherwise through a
    user namespace), or () where namespaces are unavailable."""
    if shutil.which("unshare") is None:
        return ()
    for variant in UNSHARE_VARIANTS:
        try:
            probe = subprocess.run([*variant, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return tuple(variant)
    return ()


def default_workers() -> int:
    """One program per available CPU: the programs are CPU-bound."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_SLOTS = threading.BoundedSemaphore(default_workers())


def _user_tasks() -> int:
    """Tasks (processes and threads) of this user, which RLIMIT_NPROC counts; 0 for root."""
    if os.geteuid() == 0:
        return 0
    count = 0
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat().st_uid == os.getuid():
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return count


def run(segments: list[tuple[str, str]], limits: Limits = Limits()) -> Outcome:
    """Run the code `segments` ((name, source) pairs, executed in order in one namespace) once.

    At most `default_workers()` programs run at a time in this process, however many threads call
    this, so parallel scorers do not oversubscribe the machine."""
    with _SLOTS:
        return _run(segments, limits)


def run_many(programs: list[list[tuple[str, str]]], limits: Limits = Limits(),
             workers: int | None = None) -> list[Outcome]:
    """Run many programs in parallel (bounded by `workers` and the process-wide slots)."""
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(lambda segments: run(segments, limits), programs))


def _run(segments: list[tuple[str, str]], limits: Limits) -> Outcome:
    import json

    nonce = secrets.token_hex(16)
    child_limits = asdict(limits)
    child_limits["cpu_s"] = limits.cpu_s or math.ceil(limits.wall_s) + 1
    if limits.processes and os.geteuid() != 0:
        child_limits["processes"] = _user_tasks() + limits.processes
    else:
        child_limits["processes"] = 0
    job = json.dumps({"nonce": nonce, "limits": child_limits, "segments": segments}).encode()
    workdir = tempfile.mkdtemp(prefix="spotbench-sandbox-")
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
    command = [*isolation_prefix(), sys.executable, "-I", "-B", str(CHILD)]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True)
        try:
            status, stdout, stderr = _communicate(proc, job, start + limits.wall_s,
                                                  limits.output_bytes)
        finally:
            _kill_group(proc)  # before reaping, so the group id cannot have been reused
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    wall = time.monotonic() - start
    code = proc.returncode
    marker = b"\n" + nonce.encode() + b"\n"
    if status == "done":
        if code == 0 and stdout.endswith(marker):
            status, stdout = "passed", stdout[: -len(marker)]
        elif code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
            status = "timeout"
        elif code is not None and (code < 0 or code > 128):
            status = "killed"
        else:
            status = "failed"
    return Outcome(status == "passed", status, code, stdout[-4096:].decode(errors="replace"),
                   stderr[-4096:].decode(errors="replace"), wall)


def _communicate(proc: subprocess.Popen, job: bytes, deadline: float,
                 cap: int) -> tuple[str, bytes, bytes]:
    """Feed the job, collect at most `cap` bytes of output; 'done', 'timeout' or 'output_limit'."""
    try:
        proc.stdin.write(job)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    with selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream.fileno(), selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", bytes(buffers[proc.stdout.fileno()]), bytes(
                    buffers[proc.stderr.fileno()])
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buffers[key.fd] += chunk
                if sum(map(len, buffers.values())) > cap:
                    return "output_limit", bytes(buffers[proc.stdout.fileno()][:cap]), bytes(
                        buffers[proc.stderr.fileno()][:cap])
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return "timeout", bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()])
    return "done", bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()])


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

