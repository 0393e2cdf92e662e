"""The sandbox scores hostile or broken programs as failures and the harness survives them."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from tasks import sandbox
from tasks.sandbox import Limits

TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
GOOD = "def add(a, b):\n    return a + b\n"
FAST = Limits(wall_s=3.0)


def check(solution: str, tests: str = TESTS, limits: Limits = FAST) -> sandbox.Outcome:
    return sandbox.run([("solution", solution), ("tests", tests)], limits)


def test_correct_program_passes_and_wrong_one_fails():
    assert check(GOOD).passed
    wrong = check("def add(a, b):\n    return a - b\n")
    assert not wrong.passed and wrong.status == "failed" and "AssertionError" in wrong.stderr


def test_program_output_is_kept_without_the_nonce():
    outcome = check(GOOD + "print('hello')\n")
    assert outcome.passed and outcome.stdout.strip() == "hello"


@pytest.mark.parametrize("early_exit", ["import sys\nsys.exit(0)", "import os\nos._exit(0)",
                                        "raise SystemExit", "exit()"])
def test_exiting_before_the_asserts_is_not_a_pass(early_exit):
    outcome = check(GOOD + early_exit + "\n", tests="assert add(1, 2) == 999\n")
    assert not outcome.passed


@pytest.mark.parametrize("patch", [
    "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})",
    "import sys\nsys.excepthook = lambda *a: None",
    "import atexit, os\natexit.register(lambda: os._exit(0))",
    "import sys\nsys.settrace(lambda *a: None)",
    "print('\\n' + 'f' * 32)",  # a fake nonce line
])
def test_monkeypatching_the_asserts_away_is_not_a_pass(patch):
    assert not check(GOOD + patch + "\n", tests="assert add(1, 2) == 999\n").passed


def test_solution_cannot_swallow_the_tests_into_a_string():
    assert not check(GOOD + 'x = """\n', tests='assert add(1, 2) == 999\n"""\n').passed


def test_infinite_loop_times_out():
    start = time.monotonic()
    outcome = check("while True:\n    pass\n", limits=Limits(wall_s=1.0))
    assert outcome.status == "timeout" and not outcome.passed
    assert time.monotonic() - start < 5


def test_cpu_limit_applies_below_the_wall_clock():
    outcome = check("while True:\n    pass\n", limits=Limits(wall_s=5.0, cpu_s=1))
    assert not outcome.passed and outcome.wall_s < 4


@pytest.mark.parametrize("bomb", [
    "import os\nwhile True:\n    os.fork()",
    "import subprocess, sys\nwhile True:\n    subprocess.Popen([sys.executable, '-c', 'pass'])",
    "import multiprocessing\nwhile True:\n    multiprocessing.Process(target=print).start()",
    "import _posixsubprocess\n_posixsubprocess.fork_exec()",
    "import os\nos.system('sleep 100 &')",
])
def test_fork_bomb_fails(bomb):
    outcome = check(GOOD + bomb + "\n")
    assert not outcome.passed and outcome.wall_s < 3


def test_memory_bomb_fails():
    outcome = check(GOOD + "chunks = []\nwhile True:\n    chunks.append(bytearray(10**8))\n")
    assert not outcome.passed and "MemoryError" in outcome.stderr


def test_printing_gigabytes_is_cut_off():
    outcome = check(GOOD + "while True:\n    print('x' * 10**6)\n")
    assert outcome.status == "output_limit" and not outcome.passed
    assert len(outcome.stdout) <= 4096 and outcome.wall_s < 3


@pytest.fixture
def canary(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("outside") / "canary.txt"
    path.write_text("alive")
    return path


@pytest.mark.parametrize("attack", [
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
])
def test_writes_outside_the_sandbox_fail_and_the_canary_survives(canary, attack):
    outcome = check(GOOD + attack.format(p=str(canary)) + "\n")
    assert not outcome.passed
    assert canary.read_text() == "alive" and oct(canary.stat().st_mode)[-3:] != "000"


def test_writing_inside_its_own_directory_is_allowed():
    program = GOOD + "open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'\n"
    assert check(program).passed


def test_network_connection_to_a_loopback_server_fails():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(3)
    port = server.getsockname()[1]
    connections: list = []

    def accept():
        try:
            connections.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    outcome = check(GOOD + f"import socket\nsocket.create_connection(('127.0.0.1', {port})).sendall(b'x')\n")
    thread.join()
    server.close()
    assert not outcome.passed and connections == []


def test_killing_the_parent_fails_and_the_harness_survives():
    harness = os.getpid()
    for attack in ("os.kill(os.getppid(), 9)", f"os.kill({harness}, 9)", "os.killpg(0, 9)"):
        outcome = check(GOOD + f"import os\n{attack}\n")
        assert not outcome.passed
    assert os.getpid() == harness


def test_environment_secrets_are_not_visible(monkeypatch):
    secret = "s3cr3t-" + os.urandom(8).hex()
    monkeypatch.setenv("SPOTBENCH_TEST_SECRET", secret)
    program = GOOD + (
        "import os\nprint(dict(os.environ))\n"
        "try:\n    print(open('/proc/%d/environ').read())\nexcept Exception as e:\n    print(e)\n"
        % os.getpid()
    )
    outcome = check(program)
    assert secret not in outcome.stdout + outcome.stderr
    assert not check(GOOD + "import os\nassert 'SPOTBENCH_TEST_SECRET' in os.environ\n").passed


def test_run_many_keeps_order_and_bounds_parallelism():
    programs = [[("solution", f"import time\ntime.sleep(0.4)\nassert {i} != 2\n")] for i in range(4)]
    start = time.monotonic()
    outcomes = sandbox.run_many(programs, FAST, workers=2)
    assert [o.passed for o in outcomes] == [True, True, False, True]
    assert time.monotonic() - start >= 0.8  # two waves of two
