"""Hostile programs that try to see past the jail: a user namespace of their own (root and mounts
inside it) or the host's paths. Each kind is contained with and without the audit hook ("jail+hook",
"jail-only"); the `test_control_*` tests are negative controls: without the filter, or with the
jail's arguments on bwrap's argv, the same attack gets out, so the contained tests can fail.
"""

from __future__ import annotations

import os
import platform
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks import sandbox
from tasks.sandbox import Limits

GOOD = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\n"
FAST = Limits(wall_s=3.0)


def jailed(program: str, hook: bool) -> sandbox.Outcome:
    return sandbox.run([("solution", program), ("tests", TESTS)], FAST, audit_hook=hook)


# ---- the kernel: no user namespace of its own, so no root and no mounts inside the jail ----

CLONE_NUMBERS = {"x86_64": (56, 435), "aarch64": (220, 435)}  # clone, clone3
NEW_USER = 0x10000000 | signal.SIGCHLD  # CLONE_NEWUSER, and the child's exit signal
UNSHARE_R = """import subprocess
out = subprocess.run(["unshare", "-r", "id", "-u"], capture_output=True, text=True)
print("ESCAPED" if out.stdout.strip() == "0" else "refused: " + out.stderr.strip())
"""
UNSHARE_RM = """import subprocess
command = ["unshare", "-rm", "sh", "-c", "mount -t tmpfs none /tmp && echo ESCAPED"]
out = subprocess.run(command, capture_output=True, text=True)
print(out.stdout.strip() or "refused: " + out.stderr.strip())
"""
UNSHARE_CALL = """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("ESCAPED" if libc.unshare(0x10000000) == 0 else f"refused: errno {ctypes.get_errno()}")
"""
CLONE_CALL = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
{call}
if pid == 0:
    os._exit(0)  # the child, in a user namespace of its own
print("ESCAPED" if pid > 0 and os.waitpid(pid, 0) else f"refused: errno {{ctypes.get_errno()}}")
"""
USER_NAMESPACES = {  # attack: (its code, printing ESCAPED if it gets a user namespace; the jail's refusal)
    "unshare -r id": (UNSHARE_R, "unshare failed: Operation not permitted"),
    "unshare -rm mounts a tmpfs": (UNSHARE_RM, "unshare failed: Operation not permitted"),
    "unshare(CLONE_NEWUSER)": (UNSHARE_CALL, "refused: errno 1"),  # EPERM
}
if platform.machine() in CLONE_NUMBERS:
    CLONE, CLONE3 = CLONE_NUMBERS[platform.machine()]
    CLONE_ARGS = f"(ctypes.c_uint64 * 8)({NEW_USER & ~0xFF}, 0, 0, 0, {NEW_USER & 0xFF}, 0, 0, 0)"  # flags, exit_signal
    USER_NAMESPACES["clone(CLONE_NEWUSER)"] = (
        CLONE_CALL.format(call=f"pid = libc.syscall(*map(ctypes.c_long, ({CLONE}, {NEW_USER}, 0, 0, 0, 0)))"),
        "refused: errno 1",  # EPERM
    )
    USER_NAMESPACES["clone3(CLONE_NEWUSER)"] = (
        CLONE_CALL.format(
            call=f"pid = libc.syscall(ctypes.c_long({CLONE3}), ctypes.byref({CLONE_ARGS}), ctypes.c_long(64))"
        ),
        "refused: errno 38",  # ENOSYS: libc falls back to clone
    )
ALLOW_ALL = struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)  # BPF_RET|BPF_K SECCOMP_RET_ALLOW: no filter


def attempt(attack: str) -> str:
    """GOOD, then `attack` with any exception it raises (the audit hook's refusals) printed."""
    return GOOD + f"try:\n{textwrap.indent(attack, '    ')}\nexcept Exception as error:\n    print('refused:', error)\n"


@pytest.mark.parametrize("attack", USER_NAMESPACES)
def test_no_user_namespace_inside_the_jail(attack, hook):
    code, refusal = USER_NAMESPACES[attack]
    outcome = jailed(attempt(code), hook)
    assert outcome.passed and "refused" in outcome.stdout and "ESCAPED" not in outcome.stdout, outcome.stdout
    if not hook:  # the attempt reached the kernel, which refused it
        assert refusal in outcome.stdout


@pytest.mark.parametrize("attack", USER_NAMESPACES)
def test_control_a_jail_without_the_filter_lets_a_root_harness_make_user_namespaces(attack, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("a non-root harness's jail has bwrap's --disable-userns besides the filter")
    monkeypatch.setattr(sandbox, "userns_filter", lambda: ALLOW_ALL)
    outcome = jailed(attempt(USER_NAMESPACES[attack][0]), False)
    assert "ESCAPED" in outcome.stdout, outcome.stdout + outcome.stderr


# ---- the host's layout: no host path of the project or the interpreter ----

ROOT = Path(sandbox.__file__).resolve().parents[1]
READ = """try:
    print(repr(open({path!r}, "rb").read().decode()))
except OSError as error:
    print("unreadable", error)
"""
SHOWN = {  # what the jail shows: what of the host it must not show there
    "/proc/1/cmdline": "paths",  # bwrap's argv: the jail's pid 1 is bwrap
    "/proc/1/environ": "environment",
    "/proc/self/environ": "environment",
    "/proc/self/mountinfo": "launcher",  # the Python trees are bound at their host paths
}


def host_paths_shown(path: str, shown: str) -> list[str]:
    """What `shown` (what the program read of `path`) must not show and does: the project's root
    and the interpreter's and venv's paths (outside /usr), in an environment also the variable that
    carries the interpreter's path into the jail; in the mounts, the launcher's source."""
    if SHOWN[path] == "launcher":
        return [name for name in (str(sandbox.CHILD), "tasks/sandbox_child.py") if name in shown]
    trees = {str(ROOT), sys.executable, sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)}
    hidden = {tree for tree in trees if not tree.startswith("/usr/")}
    if SHOWN[path] == "environment":
        hidden.add(sandbox.INTERPRETER_VAR)
    return sorted(tree for tree in hidden if tree in shown)


def read_in_jail(path: str, hook: bool) -> str:
    """What a program read of `path` in the jail: the audit hook refuses /proc, and under a root
    harness /proc/1/environ is bwrap's, a root process's; otherwise it must be readable."""
    outcome = jailed(GOOD + READ.format(path=path), hook)
    assert outcome.passed, outcome.stderr
    refused = hook or (path == "/proc/1/environ" and os.geteuid() == 0)
    assert refused or not outcome.stdout.startswith("unreadable"), outcome.stdout
    return outcome.stdout


@pytest.mark.parametrize("path", SHOWN)
def test_the_jail_shows_no_host_path(path, hook):
    assert host_paths_shown(path, read_in_jail(path, hook)) == []


def argv_start(command, job, pass_fds, *, env, files, seccomp):
    """The jail started as it was before `sandbox_jail.start`: every option, the launcher's source
    and the interpreter on bwrap's argv (and no seccomp filter)."""
    at = command.index("--")
    role, drop = command[at + 4], command[at + 5 :]  # after the shell step: ROLE, then setpriv's words
    launcher = ["--ro-bind", str(sandbox.CHILD), sandbox.LAUNCHER]
    argv = [*command[:at], *launcher, "--", *drop, sys.executable, "-I", "-B", sandbox.LAUNCHER, role]
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pass_fds
    )
    proc.stdin.write(job)
    proc.stdin.close()
    return proc


@pytest.mark.parametrize("path", ["/proc/1/cmdline", "/proc/self/mountinfo"])
def test_control_a_jail_with_its_arguments_on_argv_shows_host_paths(path, monkeypatch):
    monkeypatch.setattr(sandbox, "start", argv_start)
    assert host_paths_shown(path, read_in_jail(path, False))
