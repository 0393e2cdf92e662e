"""Start, watch and stop one bubblewrap jail of the code sandbox (`tasks.sandbox` says what a jail is).

bwrap reads its options, the files it copies into the jail and its seccomp program from pipes
(`--args`, `--ro-bind-data`, `--seccomp`), so its argv, which its pid 1 inside the jail shows as
/proc/1/cmdline, holds no host path, and no bind source of those files shows in the jail's
mountinfo. Every pipe is read to its end and closed by bwrap before the jailed command starts.
"""

from __future__ import annotations

import ctypes
import errno
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from functools import cache

from harness.errors import UserError

GRACE_S = 1.0  # how long the program may take to exit once the judge is done
SECCOMP_LIBRARY = "libseccomp.so.2"
CLONE_NEWUSER = 0x10000000
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO = 0x00050000  # | the errno
SCMP_CMP_MASKED_EQ = 7  # (arg & datum_a) == datum_b


class _ArgCmp(ctypes.Structure):
    """libseccomp's struct scmp_arg_cmp."""

    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


@cache
def userns_filter() -> bytes:
    """The jail's seccomp program (classic BPF, as `bwrap --seccomp` reads it), built by libseccomp:
    unshare and clone with CLONE_NEWUSER fail with EPERM, clone3 (whose flags a filter cannot read)
    fails with ENOSYS so that libc falls back to clone, a syscall of another ABI (i386, x32) kills
    the calling thread, and every other syscall is allowed."""
    try:
        lib = ctypes.CDLL(SECCOMP_LIBRARY)
    except OSError as error:
        raise UserError(f"the code sandbox needs libseccomp ({error}): apt-get install -y libseccomp2") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    context = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not context:
        raise UserError("the code sandbox cannot build its seccomp filter: seccomp_init failed")
    new_user = _ArgCmp(0, SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)  # the flags: argument 0
    rules = [("unshare", errno.EPERM, new_user), ("clone", errno.EPERM, new_user), ("clone3", errno.ENOSYS, None)]
    try:
        for name, code, check in rules:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            checks = (1, ctypes.byref(check)) if check else (0, None)
            if number < 0 or lib.seccomp_rule_add_array(context, SCMP_ACT_ERRNO | code, number, *checks) < 0:
                raise UserError(f"the code sandbox cannot build its seccomp filter: libseccomp refused {name}")
        with tempfile.TemporaryFile() as program:
            if lib.seccomp_export_bpf(context, program.fileno()) < 0:
                raise UserError("the code sandbox cannot build its seccomp filter: seccomp_export_bpf failed")
            program.seek(0)
            return program.read()
    finally:
        lib.seccomp_release(context)


def start(
    command: list[str],
    job: bytes,
    pass_fds: Sequence[int],
    *,
    env: dict[str, str],
    files: dict[str, bytes],
    seccomp: bytes,
) -> subprocess.Popen:
    """Start `command`, bwrap's `[bwrap, *options, "--", *program]`, as `bwrap --args N -- *program`:
    the options, `files` (path in the jail -> contents, bound read-only and readable by every uid)
    and `seccomp` go through pipes, and `job` to the program's stdin. The program inherits
    `pass_fds`; bwrap closes the pipes before it starts the program."""
    at = command.index("--")
    (options_read, options_write), (seccomp_read, seccomp_write) = os.pipe(), os.pipe()
    file_pipes = [os.pipe() for _ in files]
    options = command[1:at]
    for (read, _), path in zip(file_pipes, files):
        options += ["--perms", "0444", "--ro-bind-data", str(read), path]
    options += ["--seccomp", str(seccomp_read)]
    # in the order bwrap reads them: options while parsing, files while building the jail, the filter last
    sends = [(options_write, "\0".join([*options, ""]).encode())]
    sends += [(write, contents) for (_, write), contents in zip(file_pipes, files.values())]
    sends += [(seccomp_write, seccomp)]
    reads = [options_read, seccomp_read, *(read for read, _ in file_pipes)]
    try:
        proc = subprocess.Popen(
            [command[0], "--args", str(options_read), *command[at:]],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=[*pass_fds, *reads],
        )
    except BaseException:
        for write, _ in sends:
            os.close(write)
        raise
    finally:
        for read in reads:
            os.close(read)
    assert proc.stdin is not None  # stdin=PIPE
    for stream, contents in [*((os.fdopen(write, "wb"), contents) for write, contents in sends), (proc.stdin, job)]:
        try:
            with stream:
                stream.write(contents)
        except BrokenPipeError:  # bwrap gave up early; what it printed says why
            pass
    return proc


def collect(
    program: subprocess.Popen, judge: subprocess.Popen, deadline: float, cap: int
) -> tuple[str, dict[str, bytes]]:
    """Read both jails' output until all of it ends: 'done', 'timeout' or 'output_limit'. Once the
    judge is done, the program gets `GRACE_S` to exit (it does as soon as the channel closes)."""
    assert program.stdout and program.stderr and judge.stdout and judge.stderr  # spawned with PIPEs
    streams = {
        program.stdout.fileno(): "program_stdout",
        program.stderr.fileno(): "program_stderr",
        judge.stdout.fileno(): "judge_stdout",
        judge.stderr.fileno(): "judge_stderr",
    }
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


def stop(proc: subprocess.Popen, patient: bool) -> int | None:
    """The jail's exit code if it ended by itself (waiting up to GRACE_S when `patient`), else
    None after killing it: killing bwrap ends its whole PID namespace. Killed before it is reaped,
    so its process group id cannot have been reused."""
    try:
        code = proc.wait(GRACE_S if patient else 0)
    except subprocess.TimeoutExpired:
        code = None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.stdout is not None and proc.stderr is not None  # spawned with PIPEs
    proc.stdout.close()
    proc.stderr.close()
    return code
