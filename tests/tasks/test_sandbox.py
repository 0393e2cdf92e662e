"""The sandbox scores honest programs as the official harnesses would, values cross exactly, and the
jail is what the docstring says. Hostile programs are in test_sandbox_hostile.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.errors import UserError
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


def test_program_output_is_kept_and_is_not_the_verdict():
    outcome = check(GOOD + "print('hello')\n", tests=TESTS + "print('from the tests')\n")
    assert outcome.passed and outcome.stdout.strip() == "hello"
    assert "from the tests" in outcome.stderr


def test_syntax_errors_fail_on_either_side():
    assert "SyntaxError" in check("def add(a, b)\n").stderr
    assert not check(GOOD, tests="assert (\n").passed


def test_a_run_needs_tests():
    with pytest.raises(ValueError):
        sandbox.run([("solution", GOOD)])


@pytest.mark.parametrize(
    "value",
    [
        "None",
        "True",
        "0",
        "-7",
        "2**64 + 1",
        "-(3**5000)",
        "1.5",
        "float('inf')",
        "-0.0",
        "1 + 2j",
        "'text'",
        "b'\\x00\\xff'",
        "[1, [2, (3, 4)]]",
        "(1, 'a', None)",
        "{1, 2}",
        "frozenset({3})",
        "{'k': [1], 2: (3,)}",
        "{(1, 2): {3}}",
        "int",
        "str",
    ],
)
def test_plain_values_cross_exactly(value):
    program = f"VALUE = {value}\ndef echo(x):\n    return x\ndef value():\n    return VALUE\n"
    tests = (
        f"expected = {value}\n"
        "for got in (value(), echo(expected), VALUE):\n"
        "    assert type(got) is type(expected) and repr(got) == repr(expected)\n"
    )
    assert check(program, tests).passed


def test_builtin_subclasses_cross_as_their_builtin_value():
    program = (
        "import collections\ndef count(xs):\n    return collections.Counter(xs)\n"
        "Point = collections.namedtuple('Point', 'x y')\n"
        "def point():\n    return Point(1, 2)\n"
    )
    tests = (
        "assert count('abca') == {'a': 2, 'b': 1, 'c': 1}\nassert type(count('a')) is dict\nassert point() == (1, 2)\n"
    )
    assert check(program, tests).passed


def test_objects_stay_in_the_program_and_are_used_through_references():
    """MBPP/367's setup builds a tree of the program's Node class and hands it back to it."""
    program = (
        "class Node:\n    def __init__(self, v):\n        self.v, self.left = v, None\n"
        "    def depth(self):\n        return 1 + (self.left.depth() if self.left else 0)\n"
        "def depth(node):\n    return node.depth()\n"
    )
    tests = (
        "root = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(3)\n"
        "assert depth(root) == 3 and root.depth() == 3 and root.left.v == 2\n"
        "assert root != Node(1) and root == root\n"
        "try:\n    bool(root)\nexcept TypeError:\n    pass\nelse:\n    raise AssertionError\n"
    )
    assert check(program, tests).passed


def test_exceptions_cross_by_builtin_type():
    program = (
        "class Custom(Exception):\n    pass\ndef bad(kind):\n"
        "    raise {'value': ValueError('v'), 'custom': Custom('c')}[kind]\n"
    )
    tests = (
        "try:\n    bad('value')\nexcept ValueError as e:\n    assert str(e) == 'v'\n"
        "try:\n    bad('custom')\nexcept Exception as e:\n    assert 'Custom: c' in str(e)\n"
    )
    assert check(program, tests).passed


def test_builtin_names_come_from_the_program_only_when_they_are_all_it_offers():
    """MBPP/126 tests a function named `sum`; next to another function a `sum` is ignored."""
    own_sum = "def sum(a, b):\n    return a * b\n"
    assert check(own_sum, "assert sum(2, 3) == 6\n").passed
    assert check(GOOD + own_sum, "assert sum([add(1, 1), 1]) == 3\n").passed


def test_stdlib_modules_of_the_program_are_imported_by_the_judge():
    program = "import math, collections.abc\ndef root(x):\n    return math.sqrt(x)\n"
    assert check(program, "assert math.isclose(root(2.0), 2 ** 0.5)\n").passed


def test_writing_inside_its_own_directory_is_allowed():
    program = GOOD + ("open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'\n")
    assert check(program).passed


def test_the_jail_runs_unprivileged_alone_and_offline():
    program = GOOD + (
        "import os, socket\nstatus = open('/proc/self/status').read()\n"
        "print(os.getuid(), os.getcwd())\nprint(sorted(os.listdir('/')))\n"
        "print('|'.join(line for line in status.splitlines()\n"
        "               if line.startswith(('CapEff', 'CapBnd', 'NoNewPrivs'))))\n"
        "print(socket.if_nameindex())\n"
    )
    outcome = sandbox.run([("solution", program), ("tests", TESTS)], FAST, audit_hook=False)
    assert outcome.passed, outcome.stderr
    ids, root, caps, links = outcome.stdout.splitlines()
    uid, cwd = ids.split()
    assert int(uid) != 0 and cwd == sandbox.work_dir()
    python_trees = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    bound_tops = {Path(tree).parts[1] for tree in python_trees}  # wherever the venv was cloned
    assert set(eval(root)) <= {
        "bin",
        "dev",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "sbin",
        "spotbench",
        "tmp",
        "usr",
        *bound_tops,
    }
    assert caps.split("|") == ["CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"]
    assert links == "[(1, 'lo')]"


def test_run_many_keeps_order_and_bounds_parallelism():
    programs = [
        [("solution", f"import time\ntime.sleep(0.4)\nX = {i}\n"), ("tests", "assert X != 2\n")] for i in range(4)
    ]
    start = time.monotonic()
    outcomes = sandbox.run_many(programs, FAST, workers=2)
    assert [o.passed for o in outcomes] == [True, True, False, True]
    assert time.monotonic() - start >= 0.8  # two waves of two


def test_the_command_names_every_part_of_the_boundary():
    command = sandbox.jail_command("program", sandbox.UID_BASE, FAST)
    for flag in (
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--tmpfs",
    ):
        assert flag in command
    if os.geteuid() == 0:
        assert f"--reuid={sandbox.UID_BASE}" in command and "--bounding-set=-all" in command


def test_without_bubblewrap_nothing_runs_unjailed(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    sandbox.tools.cache_clear()
    try:
        with pytest.raises(UserError, match="bubblewrap"):
            check(GOOD)
    finally:
        sandbox.tools.cache_clear()


NON_ROOT_SCORER = """
import sys
sys.path.insert(0, {tree!r})
from tasks import sandbox
program = "import os\\nprint(os.getuid())\\ndef add(a, b):\\n    return a + b\\n"
outcome = sandbox.run([("solution", program), ("tests", {tests!r})], audit_hook=False)
print(outcome.passed, outcome.stdout.strip())
"""


def test_a_non_root_harness_jails_through_a_user_namespace():
    """The other branch of `jail_command`: a harness running as nobody, with the system Python
    (the venv's may sit where nobody cannot read) and a copy of the modules it needs."""
    python = shutil.which("python3", path="/usr/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root (to become nobody) and /usr/bin/python3")
    root, tree = Path(sandbox.__file__).resolve().parents[1], Path(tempfile.mkdtemp())
    try:
        tree.chmod(0o755)
        for name in (
            "tasks/__init__.py",
            "tasks/sandbox.py",
            "tasks/sandbox_child.py",
            "tasks/sandbox_jail.py",
            "harness/__init__.py",
            "harness/errors.py",
        ):
            (tree / name).parent.mkdir(exist_ok=True)
            shutil.copy(root / name, tree / name)
        code = NON_ROOT_SCORER.format(tree=str(tree), tests=TESTS)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(tree)
    assert done.stdout.split() == ["True", "65534"], done.stderr
