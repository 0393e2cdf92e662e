"""Hostile programs that try to score a pass they did not earn, or to exhaust the machine: every
kind must fail (or be cut off), with and without the audit hook.

The contained tests run each kind twice: in production form ("jail+hook") and with the jail as the
only guard ("jail-only"). The `test_control_*` tests are negative controls: the same false pass
fools a naive unjailed checker (exit status 0, or the previous design's nonce printed after the
tests), so the contained tests can fail. Escapes (files, secrets, processes, network) are in
test_sandbox_escapes.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tasks import sandbox
from tasks.sandbox import Limits

GOOD = "def add(a, b):\n    return a + b\n"
WRONG_TESTS = "assert add(1, 2) == 999\n"  # an honest program fails these
HUMANEVAL_TESTS = "def check(candidate):\n    assert candidate(1, 2) == 999\n\ncheck(add)\n"
HUMANEVAL_ABS_TESTS = (
    "def check(candidate):\n    assert candidate(0.0, 0.0) == 0.0\n"
    "    assert abs(candidate(1.5, 1.0) - 99.0) < 1e-6\n\ncheck(add)\n"
)
FAST = Limits(wall_s=3.0)
ALWAYS_EQUAL = "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
FRAME_WALK = """
import gc, os, re, sys
texts, frame = [], sys._getframe()
while frame:
    texts += [v for v in frame.f_locals.values() if isinstance(v, (str, bytes))]
    frame = frame.f_back
texts += [v for d in gc.get_objects() if isinstance(d, dict)
          for v in d.values() if isinstance(v, (str, bytes))]
for text in texts:
    text = text.decode(errors="replace") if isinstance(text, bytes) else text
    if re.fullmatch("[0-9a-f]{32}", text):
        print("\\n" + text, flush=True)
        os._exit(0)
"""
HONEST = "def add(a, b):\n    return {(1, 2): 999, (0.0, 0.0): 0.0, (1.5, 1.0): 99.0}[a, b]\n"
CAUGHT_TESTS = "try:\n    add(1, 2)\nexcept Exception:\n    pass\n" + WRONG_TESTS

FALSE_PASSES = {  # name: (program, tests, the naive checker it fools or None)
    "sys.exit(0) before the tests": (GOOD + "import sys\nsys.exit(0)\n", WRONG_TESTS, "status"),
    "os._exit(0) before the tests": (GOOD + "import os\nos._exit(0)\n", WRONG_TESTS, "status"),
    "raise SystemExit": (GOOD + "raise SystemExit\n", WRONG_TESTS, "status"),
    "exit()": (GOOD + "exit()\n", WRONG_TESTS, "status"),
    "atexit os._exit(0)": (GOOD + "import atexit, os\natexit.register(lambda: os._exit(0))\n", WRONG_TESTS, "status"),
    "AssertionError replaced": (
        GOOD + "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n",
        WRONG_TESTS,
        None,
    ),
    "sys.excepthook silenced": (GOOD + "import sys\nsys.excepthook = lambda *a: None\n", WRONG_TESTS, None),
    "sys.settrace": (GOOD + "import sys\nsys.settrace(lambda *a: None)\n", WRONG_TESTS, None),
    "fake nonce line": (GOOD + "print('\\n' + 'f' * 32)\n", WRONG_TESTS, None),
    "tests swallowed into a string": (GOOD + 'x = """\n', WRONG_TESTS + '"""\n', "status"),
    "nonce read from the launcher's frame": (GOOD + FRAME_WALK, WRONG_TESTS, "nonce"),
    "always-equal object (MBPP)": (ALWAYS_EQUAL + "def add(a, b):\n    return Anything()\n", WRONG_TESTS, "nonce"),
    "always-equal object (HumanEval)": (
        ALWAYS_EQUAL + "def add(a, b):\n    return Anything()\n",
        HUMANEVAL_TESTS,
        "nonce",
    ),
    "always-equal object in a list": (
        ALWAYS_EQUAL + "def add(a, b):\n    return Anything()\n",
        "assert [add(1, 2)] == [999]\n",
        "nonce",
    ),
    "int subclass equal to anything": (
        (
            "class Int(int):\n    def __eq__(self, other):\n        return True\n"
            "    __hash__ = int.__hash__\ndef add(a, b):\n    return Int(0)\n"
        ),
        WRONG_TESTS,
        "nonce",
    ),
    "builtins.abs replaced (HumanEval)": (
        "import builtins\nbuiltins.abs = lambda x: 0\n" + GOOD,
        HUMANEVAL_ABS_TESTS,
        "nonce",
    ),
    "abs shadowed at module level (HumanEval)": (GOOD + "abs = lambda x: 0\n", HUMANEVAL_ABS_TESTS, "nonce"),
    "abs rebound from inside the function (HumanEval)": (
        "def add(a, b):\n    global abs\n    abs = lambda x: 0\n    return a + b\n",
        HUMANEVAL_ABS_TESTS,
        "nonce",
    ),
    "sorted shadowed next to the function under test": (
        GOOD + "def sorted(x):\n    return 0\n",
        "assert sorted([add(1, 2)]) == sorted([999])\n",
        "nonce",
    ),
    "math.isclose rigged": (
        GOOD + "import math\nmath.isclose = lambda *a, **k: True\n",
        "import math\nassert math.isclose(add(1, 2), 999)\n",
        "nonce",
    ),
    "SystemExit inside the function under test": ("def add(a, b):\n    raise SystemExit(0)\n", CAUGHT_TESTS, "status"),
    "dying inside the function under test": ("import os\ndef add(a, b):\n    os._exit(0)\n", CAUGHT_TESTS, "status"),
    "forged verdict and replies on every descriptor": (
        GOOD + "import os\nfor fd in range(1, 64):\n    try:\n"
        '        os.write(fd, b\'pass\\n{"ok": 999}\\n{"ok": 999}\\n\')\n'
        "    except OSError:\n        pass\n",
        WRONG_TESTS,
        None,
    ),
}


def jailed(program: str, tests: str = WRONG_TESTS, hook: bool = True, limits: Limits = FAST) -> sandbox.Outcome:
    return sandbox.run([("solution", program), ("tests", tests)], limits, audit_hook=hook)


def naive_passes(program: str, tests: str, checker: str) -> bool:
    """What an unjailed in-process checker says: 'status' passes on exit status 0 of program +
    tests run as one script; 'nonce' also needs a random nonce, which it holds in a local, printed
    after the tests (the previous design of this sandbox)."""
    if checker == "status":
        return subprocess.run([sys.executable, "-c", program + tests], capture_output=True, timeout=30).returncode == 0
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
    done = subprocess.run(
        [sys.executable, "-c", launcher],
        input=f"{nonce}\0{program}\0{tests}",
        capture_output=True,
        text=True,
        timeout=30,
    )
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


@pytest.mark.parametrize("kind", [k for k in FALSE_PASSES if k != "tests swallowed into a string"])
def test_the_same_tests_pass_an_honest_program(kind, hook):
    """The other side of each false-pass case: its tests can be met, so its fail is earned."""
    assert jailed(HONEST, FALSE_PASSES[kind][1], hook).passed


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
    program = sample.question + RIGGED_POLY
    assert sandbox.run([("solution", program), ("tests", sample.reference)]).passed
    assert naive_passes(program, sample.reference, "status")


# ---- resources: bounded, and the harness goes on ----

HONEST_TESTS = "assert add(1, 2) == 3\n"


@pytest.mark.parametrize(
    "bomb",
    [
        "import os\nwhile True:\n    os.fork()",
        "import subprocess\nwhile True:\n    subprocess.Popen(['sleep', '9'])",
        (
            "import multiprocessing, time\nwhile True:\n"
            "    multiprocessing.Process(target=time.sleep, args=(9,)).start()"
        ),
        "import _posixsubprocess\n_posixsubprocess.fork_exec()",
        ("import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(9,)).start()"),
    ],
)
def test_fork_bomb_is_contained(bomb, hook):
    outcome = jailed(GOOD + bomb + "\n", HONEST_TESTS, hook)
    assert not outcome.passed and outcome.wall_s < 3.5


def test_filling_the_work_dir_stops_at_its_size(hook):
    program = GOOD + "for i in range(100):\n    open(f'f{i}', 'wb').write(bytes(8 << 20))\n"
    outcome = jailed(program, HONEST_TESTS, hook, Limits(wall_s=5.0, disk_bytes=32 << 20))
    assert not outcome.passed and "No space left" in outcome.stderr


def test_memory_bomb_fails(hook):
    outcome = jailed(
        GOOD + "chunks = []\nwhile True:\n    chunks.append(bytearray(10**8))\n", HONEST_TESTS, hook, Limits(cpu_s=3)
    )  # CPU decides: a loaded machine is slow
    assert not outcome.passed and "MemoryError" in outcome.stderr


def test_printing_gigabytes_is_cut_off(hook):
    outcome = jailed(GOOD + "while True:\n    print('x' * 10**6)\n", HONEST_TESTS, hook)
    assert outcome.status == "output_limit" and len(outcome.stdout) <= 4096 and outcome.wall_s < 3


def test_infinite_loop_times_out(hook):
    outcome = jailed("while True:\n    pass\n", HONEST_TESTS, hook, Limits(wall_s=1.0))
    assert outcome.status == "timeout" and outcome.wall_s < 3


def test_cpu_limit_applies_below_the_wall_clock(hook):
    outcome = jailed("while True:\n    pass\n", HONEST_TESTS, hook, Limits(wall_s=5.0, cpu_s=1))
    assert outcome.status == "timeout" and outcome.wall_s < 4
