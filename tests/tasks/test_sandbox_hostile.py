"""Hostile programs: every kind must be contained by the jail, with and without the audit hook.

Each kind is a program that tries to get out (write, read or signal outside, leave processes or an
undeletable directory behind, reach the network) or to score a pass it did not earn. The contained
tests run each kind twice: in production form ("jail+hook") and with the jail as the only guard
("jail-only"), so what is claimed for the jail is shown without the hook. The `test_control_*`
tests are negative controls: the same kind run without the jail (directly, or through a naive
in-process checker) does get out, so the contained tests can fail.
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
WRONG_TESTS = "assert add(1, 2) == 999\n"  # an honest program fails these
HUMANEVAL_TESTS = "def check(candidate):\n    assert candidate(1, 2) == 999\n\ncheck(add)\n"
HUMANEVAL_ABS_TESTS = ("def check(candidate):\n    assert candidate(0.0, 0.0) == 0.0\n"
                       "    assert abs(candidate(1.5, 1.0) - 99.0) < 1e-6\n\ncheck(add)\n")
FAST = Limits(wall_s=3.0)
ALWAYS_EQUAL = "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
FRAME_WALK = """
import gc, os, re, sys
texts, frame = [], sys._getframe()
while frame:
    texts += [v for v in frame.f_locals.values() if isinstance(v, (str, bytes))]
    frame = frame.f_back
texts += [v for d in gc.get_objects() if isinstance(d, dict) for v in d.values() if isinstance(v, (str, bytes))]
for text in texts:
    text = text.decode(errors="replace") if isinstance(text, bytes) else text
    if re.fullmatch("[0-9a-f]{32}", text):
        print("\\n" + text, flush=True)
        os._exit(0)
"""
CAUGHT_TESTS = "try:\n    add(1, 2)\nexcept Exception:\n    pass\n" + WRONG_TESTS

FALSE_PASSES = {  # name: (program, tests, the naive checker it fools or None)
    "sys.exit(0) before the tests": (GOOD + "import sys\nsys.exit(0)\n", WRONG_TESTS, "status"),
    "os._exit(0) before the tests": (GOOD + "import os\nos._exit(0)\n", WRONG_TESTS, "status"),
    "raise SystemExit": (GOOD + "raise SystemExit\n", WRONG_TESTS, "status"),
    "exit()": (GOOD + "exit()\n", WRONG_TESTS, "status"),
    "atexit os._exit(0)": (GOOD + "import atexit, os\natexit.register(lambda: os._exit(0))\n",
                           WRONG_TESTS, "status"),
    "AssertionError replaced": (
        GOOD + "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n",
        WRONG_TESTS, None),
    "sys.excepthook silenced": (GOOD + "import sys\nsys.excepthook = lambda *a: None\n",
                                WRONG_TESTS, None),
    "sys.settrace": (GOOD + "import sys\nsys.settrace(lambda *a: None)\n", WRONG_TESTS, None),
    "fake nonce line": (GOOD + "print('\\n' + 'f' * 32)\n", WRONG_TESTS, None),
    "tests swallowed into a string": (GOOD + 'x = """\n', WRONG_TESTS + '"""\n', "status"),
    "nonce read from the launcher's frame": (GOOD + FRAME_WALK, WRONG_TESTS, "nonce"),
    "always-equal object (MBPP)": (ALWAYS_EQUAL + "def add(a, b):\n    return Anything()\n",
                                   WRONG_TESTS, "nonce"),
    "always-equal object (HumanEval)": (ALWAYS_EQUAL + "def add(a, b):\n    return Anything()\n",
                                        HUMANEVAL_TESTS, "nonce"),
    "always-equal object in a list": (ALWAYS_EQUAL + "def add(a, b):\n    return [Anything()]\n",
                                      "assert add(1, 2) == [999]\n", "nonce"),
    "int subclass equal to anything": (
        "class Int(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\ndef add(a, b):\n    return Int(0)\n", WRONG_TESTS, "nonce"),
    "builtins.abs replaced (HumanEval)": ("import builtins\nbuiltins.abs = lambda x: 0\n" + GOOD,
                                          HUMANEVAL_ABS_TESTS, "nonce"),
    "abs shadowed at module level (HumanEval)": (GOOD + "abs = lambda x: 0\n", HUMANEVAL_ABS_TESTS,
                                                 "nonce"),
    "abs rebound from inside the function (HumanEval)": (
        "def add(a, b):\n    global abs\n    abs = lambda x: 0\n    return a + b\n",
        HUMANEVAL_ABS_TESTS, "nonce"),
    "sorted shadowed next to the function under test": (
        GOOD + "def sorted(x):\n    return 0\n", "assert sorted([add(1, 2)]) == sorted([999])\n",
        "nonce"),
    "math.isclose rigged": (GOOD + "import math\nmath.isclose = lambda *a, **k: True\n",
                            "import math\nassert math.isclose(add(1, 2), 999)\n", "nonce"),
    "SystemExit inside the function under test": ("def add(a, b):\n    raise SystemExit(0)\n",
                                                  CAUGHT_TESTS, "status"),
    "dying inside the function under test": ("import os\ndef add(a, b):\n    os._exit(0)\n",
                                             CAUGHT_TESTS, "status"),
    "forged verdict and replies on every descriptor": (
        GOOD + "import os\nfor fd in range(1, 64):\n    try:\n"
        "        os.write(fd, b'pass\\n{\"ok\": 999}\\n{\"ok\": 999}\\n')\n"
        "    except OSError:\n        pass\n", WRONG_TESTS, None),
}


def jailed(program: str, tests: str = WRONG_TESTS, hook: bool = True,
           limits: Limits = FAST) -> sandbox.Outcome:
    return sandbox.run([("solution", program), ("tests", tests)], limits, audit_hook=hook)


def naive_passes(program: str, tests: str, checker: str) -> bool:
    """What an unjailed in-process checker says: 'status' passes on exit status 0 of program +
    tests run as one script; 'nonce' also needs a random nonce, which it holds in a local, printed
    after the tests (the previous design of this sandbox)."""
    if checker == "status":
        done = subprocess.run([sys.executable, "-c", program + tests], capture_output=True,
                              timeout=30)
        return done.returncode == 0
    launcher = textwrap.dedent("""
        import sys
        def main():
            nonce, program, tests = sys.stdin.read().split("\\0")
            namespace = {"__name__": "__main__"}
            exec(compile(program, "<solution>", "exec"), namespace)
            exec(compile(tests, "<tests>", "exec"), namespace)
            print("\\n" + nonce)
        main()
    """)
    nonce = os.urandom(16).hex()
    done = subprocess.run([sys.executable, "-c", launcher], input=f"{nonce}\0{program}\0{tests}",
                          capture_output=True, text=True, timeout=30)
    return done.returncode == 0 and done.stdout.endswith(f"\n{nonce}\n")


@pytest.fixture(params=[True, False], ids=["jail+hook", "jail-only"])
def hook(request) -> bool:
    return request.param


@pytest.mark.parametrize("kind", FALSE_PASSES)
def test_false_pass_is_a_fail(kind, hook):
    program, tests, _ = FALSE_PASSES[kind]
    assert not jailed(program, tests, hook).passed


@pytest.mark.parametrize("kind", [k for k, v in FALSE_PASSES.items() if v[2]])
def test_control_false_pass_fools_a_naive_checker(kind):
    program, tests, checker = FALSE_PASSES[kind]
    assert naive_passes(program, tests, checker)


def test_honest_programs_still_pass(hook):
    """The other side of every false-pass case: the same tests, honestly met."""
    assert jailed(GOOD, "assert add(1, 2) == 3\n", hook).passed
    assert jailed("def add(a, b):\n    return 99.0 if a else 0.0\n", HUMANEVAL_ABS_TESTS, hook).passed
    assert jailed("def add(a, b):\n    return 999\n", HUMANEVAL_TESTS, hook).passed


RIGGED_POLY = "    poly.__code__ = (lambda xs, x: 0.0).__code__\n    return 0.0\n"


def humaneval_32():
    from tasks.registry import get_task

    task = get_task("humaneval")
    return task, next(s for s in task.load() if s.sample_id == "HumanEval/32")


@pytest.mark.slow  # loads the evaluate metric
def test_helper_rigged_by_the_completion_is_not_trusted():
    """HumanEval/32's test checks the root with the prompt's `poly`; the judge uses its own."""
    task, sample = humaneval_32()
    assert task.score([sample], [sample.target])[0]["correct"]
    assert not task.score([sample], [RIGGED_POLY])[0]["correct"]


def test_control_helper_rigged_by_the_completion_passes_with_the_programs_helper():
    _, sample = humaneval_32()
    assert sandbox.run([("solution", sample.question + RIGGED_POLY), ("tests", sample.reference)]).passed
    assert naive_passes(sample.question + RIGGED_POLY, sample.reference, "status")


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
    "import os\nfd = os.open(os.path.dirname({p!r}), os.O_RDONLY)\n"
    "os.close(os.open('canary.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=fd))",
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
    outcome = jailed(GOOD + attack.format(p=str(canary)) + "\n", "assert add(1, 2) == 3\n", hook)
    assert not outcome.passed and state(canary) == before


@pytest.mark.parametrize("attack", OUTSIDE_WRITES)
def test_control_write_outside_gets_out_unjailed(canary, attack, tmp_path):
    before = state(canary)
    subprocess.run([sys.executable, "-c", attack.format(p=str(canary))], cwd=tmp_path,
                   capture_output=True, timeout=30)
    assert state(canary) != before


VISIBLE_READ_ONLY = [  # each a no-op if it succeeds, so a failed containment harms nothing
    "fd = os.open(os.__file__, os.O_WRONLY | os.O_APPEND)",
    "st = os.stat(sys.prefix + '/pyvenv.cfg')\nos.utime(sys.prefix + '/pyvenv.cfg', ns=(st.st_atime_ns, st.st_mtime_ns))",
    "fd = os.open(sys.prefix + '/pyvenv.cfg', os.O_RDONLY)\nos.chmod(fd, os.stat(fd).st_mode & 0o7777)",
    "fd = os.open(os.__file__, os.O_RDONLY)\nst = os.stat(fd)\nos.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))",
    "os.mkdir(os.path.join(os.path.dirname(os.__file__), 'planted'))\nos.rmdir(os.path.join(os.path.dirname(os.__file__), 'planted'))",
]


@pytest.mark.parametrize("attack", VISIBLE_READ_ONLY)
def test_visible_host_files_are_read_only(attack, hook):
    program = f"import os, sys\ntry:\n{textwrap.indent(attack, '    ')}\n    print('ESCAPED')\nexcept OSError:\n    pass\n"
    outcome = jailed(GOOD + program, "assert add(1, 2) == 3\n", hook)
    assert outcome.passed and "ESCAPED" not in outcome.stdout


@pytest.mark.parametrize("attack", VISIBLE_READ_ONLY)
def test_control_visible_host_files_are_writable_unjailed(attack):
    if os.geteuid() != 0:
        pytest.skip("the harness is not root, so these files are read-only to it too")
    program = f"import os, sys\n{attack}\nprint('ESCAPED')\n"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30)
    assert "ESCAPED" in done.stdout


SECRET_READS = {  # attack: whether it reads the secret when run unjailed (the control)
    "print(dict(os.environ))": True,
    "print(open('/proc/{pid}/environ').read())": True,
    "print(open('/proc/1/environ').read())": False,
    "fd = os.open('/proc', os.O_RDONLY)\n"
    "print(os.read(os.open('{pid}/environ', os.O_RDONLY, dir_fd=fd), 99999))": True,
    "fd = os.open('/', os.O_RDONLY)\n"
    "print(os.read(os.open('proc/{pid}/environ', os.O_RDONLY, dir_fd=fd), 99999))": True,
    "print([open(f'/proc/{{p}}/environ').read() for p in os.listdir('/proc') if p.isdigit()])": False,
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
    code = SECRET_SCORER.format(root=str(Path(sandbox.__file__).resolve().parents[1]),
                                attack=attack, secret_file=str(path), jail=jail, hook=hook)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SPOTBENCH_TEST_SECRET": secret})
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
    outcome = jailed(GOOD + ROOT_SHELL.format(p=canary), "assert add(1, 2) == 3\n", hook)
    assert canary.read_text() == "alive" and "uid 0" not in outcome.stdout
    if not hook:
        assert outcome.passed and "uid " in outcome.stdout  # the shell ran, jailed
    if hook:
        assert not outcome.passed  # the hook refuses the import


def test_control_process_module_loaded_again_gives_a_shell_unjailed(canary):
    done = subprocess.run([sys.executable, "-c", ROOT_SHELL.format(p=canary)], capture_output=True,
                          text=True, timeout=30)
    assert f"uid {os.geteuid()}" in done.stdout and canary.read_text() == "dead\n"


def marked_processes(marker: str) -> list[int]:
    """Live `sleep MARKER` processes."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            alive = entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            if alive and (entry / "cmdline").read_bytes() == f"sleep\0{marker}\0".encode():
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
    outcome = jailed(GOOD + SURVIVORS[kind].format(m=tag) + "import time\ntime.sleep(0.5)\n",
                     "assert add(1, 2) == 3\n", hook)
    assert wait_gone(tag) == []
    assert outcome.passed != hook  # refused by the hook; allowed, and then killed, in the jail


@pytest.mark.parametrize("bomb", [
    "import os\nwhile True:\n    os.fork()",
    "import subprocess, sys\nwhile True:\n    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(9)'])",
    "import multiprocessing, time\nwhile True:\n    multiprocessing.Process(target=time.sleep, args=(9,)).start()",
    "import _posixsubprocess\n_posixsubprocess.fork_exec()",
    "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(9,)).start()",
])
def test_fork_bomb_is_contained(bomb, hook):
    outcome = jailed(GOOD + bomb + "\n", "assert add(1, 2) == 3\n", hook)
    assert not outcome.passed and outcome.wall_s < 3.5


SCORER = """
import sys
sys.path.insert(0, {root!r})
from tasks import sandbox
program = "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    os.execvp('sleep', ['sleep', {m!r}])\\n" \\
          "os.execvp('sleep', ['sleep', {m!r}])\\n"
sandbox.run([("solution", program), ("tests", "pass")], sandbox.Limits(wall_s=60), audit_hook=False)
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


def test_killing_the_harness_fails_and_the_harness_survives(hook):
    harness = os.getpid()
    for attack in ("os.kill(os.getppid(), 9)", f"os.kill({harness}, 9)", "os.killpg(0, 9)",
                   "os.kill(1, 9)", "[os.kill(int(p), 9) for p in os.listdir('/proc') if p.isdigit()]"):
        outcome = jailed(GOOD + f"import os\n{attack}\n", "assert add(1, 2) == 3\n", hook)
        assert not outcome.passed
    assert os.getpid() == harness


def test_control_a_child_can_kill_its_parent_unjailed():
    parent = subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.run("
                             "[sys.executable, '-c', 'import os; os.kill(os.getppid(), 9)']); print('alive')"],
                            capture_output=True, text=True, timeout=30)
    assert parent.returncode == -signal.SIGKILL and "alive" not in parent.stdout


# ---- temp dirs, network, resources ----

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
    outcome = jailed(GOOD + IMMUTABLE.format(target="."), "assert add(1, 2) == 3\n", hook)
    assert "ESCAPED" not in outcome.stdout and not outcome.passed
    assert set(os.listdir(tempfile.gettempdir())) <= before  # the work dir was a jail tmpfs


def test_control_immutable_flag_pins_a_directory_unjailed(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root may set the immutable flag")
    done = subprocess.run([sys.executable, "-c", IMMUTABLE.format(target=str(tmp_path))],
                          capture_output=True, text=True, timeout=30)
    if "ESCAPED" not in done.stdout:
        pytest.skip(f"this file system has no immutable flag: {done.stderr[-200:]}")
    pinned = os.open(tmp_path / "pinned", os.O_RDONLY)
    try:
        with pytest.raises(PermissionError):
            os.rmdir(tmp_path / "pinned")
    finally:
        fcntl.ioctl(pinned, 0x40086602, struct.pack("i", 0))  # FS_IOC_SETFLAGS: clear the flag
        os.close(pinned)


def test_filling_the_work_dir_stops_at_its_size(hook):
    program = GOOD + "for i in range(100):\n    open(f'f{i}', 'wb').write(bytes(8 << 20))\n"
    outcome = jailed(program, "assert add(1, 2) == 3\n", hook, Limits(wall_s=5.0, disk_bytes=32 << 20))
    assert not outcome.passed and "No space left" in outcome.stderr


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
    outcome = jailed(program, "assert add(1, 2) == 3\n", hook)
    assert not outcome.passed and not connected(listener)


def test_control_network_reaches_the_listener_unjailed(listener):
    program = f"import socket\nsocket.create_connection({listener.getsockname()!r})"
    subprocess.run([sys.executable, "-c", program], timeout=30)
    assert connected(listener)


def test_memory_bomb_fails(hook):
    outcome = jailed(GOOD + "chunks = []\nwhile True:\n    chunks.append(bytearray(10**8))\n",
                     "assert add(1, 2) == 3\n", hook)
    assert not outcome.passed and "MemoryError" in outcome.stderr


def test_printing_gigabytes_is_cut_off(hook):
    outcome = jailed(GOOD + "while True:\n    print('x' * 10**6)\n", "assert add(1, 2) == 3\n", hook)
    assert outcome.status == "output_limit" and len(outcome.stdout) <= 4096 and outcome.wall_s < 3


def test_infinite_loop_times_out(hook):
    outcome = jailed("while True:\n    pass\n", "assert add(1, 2) == 3\n", hook, Limits(wall_s=1.0))
    assert outcome.status == "timeout" and outcome.wall_s < 3


def test_cpu_limit_applies_below_the_wall_clock(hook):
    outcome = jailed("while True:\n    pass\n", "assert add(1, 2) == 3\n", hook,
                     Limits(wall_s=5.0, cpu_s=1))
    assert outcome.status == "timeout" and outcome.wall_s < 4
