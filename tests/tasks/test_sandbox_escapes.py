"""Hostile programs that try to get out: every kind must be contained by the jail, with and
without the audit hook.

Each kind tries to read the harness's secrets, write or pin host files, leave processes behind,
get root, harm the harness or reach the network (a user namespace of its own and the host's
paths: test_sandbox_isolation.py). The contained tests run each kind twice: in
production form ("jail+hook") and with the jail as the only guard ("jail-only"). The
`test_control_*` tests are negative controls: the same attack run without the jail does get out,
so the contained tests can fail. False passes and resource exhaustion are in
test_sandbox_hostile.py.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tasks import sandbox
from tasks.sandbox import Limits

GOOD = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\n"
FAST = Limits(wall_s=3.0)


def jailed(program: str, hook: bool, tests: str = TESTS) -> sandbox.Outcome:
    return sandbox.run([("solution", program), ("tests", tests)], FAST, audit_hook=hook)


# ---- the host's files: invisible outside, read-only where visible ----

OUTSIDE_WRITES = [
    "import os\nos.remove({p!r})",
    "open({p!r}, 'w').write('dead')",
    "open({p!r}, 'a').write('dead')",
    "import os\nos.close(os.open({p!r}, os.O_WRONLY | os.O_TRUNC))",
    "import shutil, os\nshutil.rmtree(os.path.dirname({p!r}))",
    "import os\nos.rename({p!r}, 'stolen')",
    "import os\nos.symlink({p!r}, 'link')\nopen('link', 'w').write('dead')",
    "import os\nos.link({p!r}, 'hard')\nopen('hard', 'w').write('dead')",
    "import os\nos.chdir(os.path.dirname({p!r}))\nopen('canary.txt', 'w').write('dead')",
    "import os\nos.chmod({p!r}, 0)",
    "import pathlib\npathlib.Path({p!r}).write_text('dead')",
    (
        "import os\nfd = os.open(os.path.dirname({p!r}), os.O_RDONLY)\n"
        "os.close(os.open('canary.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=fd))"
    ),
    "import os\nos.chmod(os.open({p!r}, os.O_RDONLY), 0)",
    "import os\nos.utime(os.open({p!r}, os.O_RDONLY), (0, 0))",
    "import os\nos.truncate(os.open({p!r}, os.O_WRONLY), 0)",
]


@pytest.fixture
def canary(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("outside") / "canary.txt"
    path.write_text("alive")
    return path


def state(path: Path) -> tuple | None:
    try:
        return path.read_text(), path.stat().st_mode, path.stat().st_mtime_ns
    except OSError:
        return None


@pytest.mark.parametrize("attack", OUTSIDE_WRITES)
def test_write_outside_is_contained(canary, attack, hook):
    before = state(canary)
    outcome = jailed(GOOD + attack.format(p=str(canary)) + "\n", hook)
    assert not outcome.passed and state(canary) == before


@pytest.mark.parametrize("attack", OUTSIDE_WRITES)
def test_control_write_outside_gets_out_unjailed(canary, attack, tmp_path):
    before = state(canary)
    subprocess.run([sys.executable, "-c", attack.format(p=str(canary))], cwd=tmp_path, capture_output=True, timeout=30)
    assert state(canary) != before


VISIBLE_READ_ONLY = [  # each a no-op if it succeeds, so a failed containment harms nothing
    "os.open(LIB, os.O_WRONLY | os.O_APPEND)",
    "os.utime(CFG, ns=times(CFG))",
    "fd = os.open(CFG, os.O_RDONLY)\nos.chmod(fd, os.stat(fd).st_mode & 0o7777)",
    "fd = os.open(LIB, os.O_RDONLY)\nos.utime(fd, ns=times(fd))",
    "os.mkdir(LIB + '.planted')\nos.rmdir(LIB + '.planted')",
]
VISIBLE = """import os, sys
LIB, CFG = os.__file__, sys.prefix + "/pyvenv.cfg"  # the stdlib's os.py, the venv's config


def times(file):
    return os.stat(file).st_atime_ns, os.stat(file).st_mtime_ns
"""


@pytest.mark.parametrize("attack", VISIBLE_READ_ONLY)
def test_visible_host_files_are_read_only(attack, hook):
    program = f"{VISIBLE}\ntry:\n{textwrap.indent(attack, '    ')}\n    print('ESCAPED')\nexcept OSError:\n    pass\n"
    outcome = jailed(GOOD + program, hook)
    assert outcome.passed and "ESCAPED" not in outcome.stdout


@pytest.mark.parametrize("attack", VISIBLE_READ_ONLY)
def test_control_visible_host_files_are_writable_unjailed(attack):
    if os.geteuid() != 0:
        pytest.skip("the harness is not root, so these files are read-only to it too")
    program = f"{VISIBLE}\n{attack}\nprint('ESCAPED')\n"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30)
    assert "ESCAPED" in done.stdout


SECRET_READS = {  # attack: whether it reads the secret when run unjailed (the control)
    "print(dict(os.environ))": True,
    "print(open('/proc/{pid}/environ').read())": True,
    "print(open('/proc/1/environ').read())": False,
    "fd = os.open('/proc', os.O_RDONLY)\nprint(os.read(os.open('{pid}/environ', os.O_RDONLY, dir_fd=fd), 99999))": True,
    "fd = os.open('/', os.O_RDONLY)\n"
    "print(os.read(os.open('proc/{pid}/environ', os.O_RDONLY, dir_fd=fd), 99999))": True,
    "print([open(f'/proc/{{p}}/environ').read() for p in os.listdir('/proc') if p != 'self'\n"
    "       and p.isdigit()])": False,
    "print(open({secret_file!r}).read())": True,
}


SECRET_SCORER = """
import os, subprocess, sys
sys.path.insert(0, {root!r})
from tasks import sandbox
attack = "import os\\n" + {attack!r}.format(pid=os.getpid(), secret_file={secret_file!r})
if {jail!r}:
    outcome = sandbox.run([("solution", attack), ("tests", "pass")], audit_hook={hook!r})
    print(outcome.stdout + outcome.stderr)
else:
    print(subprocess.run([sys.executable, "-c", attack], capture_output=True, text=True).stdout)
"""


def scorer_output(attack: str, jail: bool, hook: bool, tmp_path: Path) -> tuple[str, str]:
    """(secret, what a scorer holding the secret in its environment and in a 0600 file printed
    after running `attack` jailed or directly)."""
    secret = "s3cr3t-" + os.urandom(8).hex()
    path = tmp_path / "secret.txt"
    path.write_text(secret)
    path.chmod(0o600)
    code = SECRET_SCORER.format(
        root=str(Path(sandbox.__file__).resolve().parents[1]),
        attack=attack,
        secret_file=str(path),
        jail=jail,
        hook=hook,
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SPOTBENCH_TEST_SECRET": secret},
    )
    assert done.returncode == 0, done.stderr
    return secret, done.stdout


@pytest.mark.parametrize("attack", SECRET_READS)
def test_scorer_secrets_are_not_readable(attack, hook, tmp_path):
    program = f"try:\n{textwrap.indent(attack, '    ')}\nexcept Exception as e:\n    print(e)\n"
    secret, output = scorer_output(program, True, hook, tmp_path)
    assert secret not in output


@pytest.mark.parametrize("attack", [attack for attack, control in SECRET_READS.items() if control])
def test_control_secrets_are_readable_unjailed(attack, tmp_path):
    secret, output = scorer_output(attack, False, True, tmp_path)
    assert secret in output


IMMUTABLE = """
import fcntl, os, struct
FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x40086602, 0x10
target = {target!r}
os.makedirs(target + "/pinned", exist_ok=True)
fd = os.open(target + "/pinned", os.O_RDONLY)
fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", FS_IMMUTABLE_FL))
print("ESCAPED")
"""


def test_immutable_flag_leaves_nothing_undeletable(hook):
    before = set(os.listdir(tempfile.gettempdir()))
    outcome = jailed(GOOD + IMMUTABLE.format(target="."), hook)
    assert "ESCAPED" not in outcome.stdout and not outcome.passed
    assert set(os.listdir(tempfile.gettempdir())) <= before  # the work dir was a jail tmpfs


def test_control_immutable_flag_pins_a_directory_unjailed(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root may set the immutable flag")
    done = subprocess.run(
        [sys.executable, "-c", IMMUTABLE.format(target=str(tmp_path))], capture_output=True, text=True, timeout=30
    )
    if "ESCAPED" not in done.stdout:
        pytest.skip(f"this file system has no immutable flag: {done.stderr[-200:]}")
    pinned = os.open(tmp_path / "pinned", os.O_RDONLY)
    try:
        with pytest.raises(PermissionError):
            os.rmdir(tmp_path / "pinned")
    finally:
        fcntl.ioctl(pinned, 0x40086602, struct.pack("i", 0))  # FS_IOC_SETFLAGS: clear the flag
        os.close(pinned)


# ---- processes: no root, no survivors, no harm to the harness ----

ROOT_SHELL = """
import importlib.util, os
import _posixsubprocess as disarmed
spec = importlib.util.spec_from_file_location("evil._posixsubprocess", disarmed.__file__)
fresh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fresh)
out_r, out_w = os.pipe()
err_r, err_w = os.pipe()
fresh.fork_exec([b"/bin/sh", b"-c", b"id -u; echo dead > {p}"], [b"/bin/sh"], True, (out_w,),
                None, None, -1, -1, -1, out_w, -1, -1, err_r, err_w, True, False, -1, None, None,
                None, -1, None, False)
os.close(out_w)
os.close(err_w)
print("uid", os.read(out_r, 100).decode().strip())
"""


def test_process_module_loaded_again_gives_no_root_shell(canary, hook):
    outcome = jailed(GOOD + ROOT_SHELL.format(p=canary), hook)
    assert canary.read_text() == "alive" and "uid 0" not in outcome.stdout
    if not hook:
        assert outcome.passed and "uid " in outcome.stdout  # the shell ran, jailed
    if hook:
        assert not outcome.passed  # the hook refuses the import


def test_control_process_module_loaded_again_gives_a_shell_unjailed(canary):
    done = subprocess.run(
        [sys.executable, "-c", ROOT_SHELL.format(p=canary)], capture_output=True, text=True, timeout=30
    )
    assert f"uid {os.geteuid()}" in done.stdout and canary.read_text() == "dead\n"


def marked_processes(marker: str) -> list[int]:
    """Live `sleep MARKER` processes."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "stat").read_text().rsplit(")")[-1][1] == "Z":
                continue
            if (entry / "cmdline").read_bytes() == f"sleep\0{marker}\0".encode():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_gone(marker: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def marker() -> str:
    """A `sleep` argument unique to one test, to find its processes among all others."""
    return f"{300 + int.from_bytes(os.urandom(3), 'big') / 1e7:.7f}"


SURVIVORS = {  # name: program that tries to leave `sleep MARKER` running
    "os.system in the background": "import os\nos.system('sleep {m} &')\n",
    "subprocess, new session": "import subprocess\nsubprocess.Popen(['sleep', '{m}'], start_new_session=True)\n",
    "double fork and setsid": "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        os.execvp('sleep', ['sleep', '{m}'])\n    os._exit(0)\n",
    "multiprocessing": "import multiprocessing, os\nmultiprocessing.Process(target=os.execvp, "
    "args=('sleep', ['sleep', '{m}'])).start()\n",
}


@pytest.mark.parametrize("kind", SURVIVORS)
def test_no_process_survives_the_run(kind, hook):
    tag = marker()
    outcome = jailed(GOOD + SURVIVORS[kind].format(m=tag) + "import time\ntime.sleep(0.5)\n", hook)
    assert wait_gone(tag) == []
    assert outcome.passed != hook  # refused by the hook; allowed, and then killed, in the jail


SCORER = """
import sys
sys.path.insert(0, {root!r})
from tasks import sandbox
program = ("import os\\nif os.fork() == 0:\\n    os.setsid()\\n"
           "    os.execvp('sleep', ['sleep', {m!r}])\\nos.execvp('sleep', ['sleep', {m!r}])\\n")
sandbox.run([("solution", program), ("tests", "pass")], sandbox.Limits(wall_s=60),
            audit_hook=False)
"""


def test_jails_die_with_a_sigkilled_scorer():
    tag = marker()
    root = str(Path(sandbox.__file__).resolve().parents[1])
    scorer = subprocess.Popen([sys.executable, "-c", SCORER.format(root=root, m=tag)])
    deadline = time.monotonic() + 20
    while len(marked_processes(tag)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(marked_processes(tag)) == 2
    scorer.kill()
    scorer.wait()
    assert wait_gone(tag) == []


def test_control_a_plain_child_survives_a_sigkilled_scorer():
    tag = marker()
    code = f"import subprocess\nsubprocess.Popen(['sleep', '{tag}'], start_new_session=True).wait()"
    scorer = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while not marked_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    scorer.kill()
    scorer.wait()
    time.sleep(0.5)
    survivors = marked_processes(tag)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors


@pytest.mark.parametrize(
    "attack",
    [
        "os.kill(os.getppid(), 9)",
        "os.kill({harness}, 9)",
        "os.killpg(0, 9)",
        "os.kill(1, 9)",
        "[os.kill(int(p), 9) for p in os.listdir('/proc')[::-1] if p.isdigit()]",
    ],
)
def test_killing_the_harness_fails_and_the_harness_survives(attack, hook):
    harness = os.getpid()
    outcome = jailed(GOOD + f"import os\n{attack.format(harness=harness)}\n", hook)
    assert not outcome.passed and os.getpid() == harness


def test_control_a_child_can_kill_its_parent_unjailed():
    child = "import os; os.kill(os.getppid(), 9)"
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {child!r}])\nprint(1)"
    parent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert parent.returncode == -signal.SIGKILL and parent.stdout == ""


# ---- network ----


@pytest.fixture
def listener():
    """A loopback server; connections wait in its backlog, so no thread has to accept them."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def connected(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
        return True
    except BlockingIOError:
        return False


def test_no_network(listener, hook):
    program = GOOD + f"import socket\nsocket.create_connection({listener.getsockname()!r})\n"
    outcome = jailed(program, hook)
    assert not outcome.passed and not connected(listener)


def test_control_network_reaches_the_listener_unjailed(listener):
    program = f"import socket\nsocket.create_connection({listener.getsockname()!r})"
    subprocess.run([sys.executable, "-c", program], timeout=30)
    assert connected(listener)
