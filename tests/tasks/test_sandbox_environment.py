"""The jail scores wherever Python is installed and whatever else runs on the machine: a venv under
/tmp, another scorer's fork-heavy program, a loaded CPU, a program that removes its own working
directory. A jail that cannot score is refused before anything is scored (`check_jail`), and a
timeout is reported as a timeout."""

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
from spotbench.cli import main
from tasks import sandbox
from tasks.sandbox import Limits

ROOT = Path(sandbox.__file__).resolve().parents[1]
TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"


LIMITS = Limits(cpu_s=3)


def check(solution: str, limits: Limits = LIMITS, tests: str = TESTS) -> sandbox.Outcome:
    return sandbox.run([("solution", solution), ("tests", tests)], limits)


# ---- a Python installed under /tmp ----

UNDER_TMP_SCORER = """
import sys
sys.path.insert(0, {root!r})
from tasks import sandbox
if {old_order}:  # the jail's tmpfs mounted after the binds, as it once was: it hides them
    make = sandbox.jail_command
    def jail_command(*args):
        command = make(*args)
        tmpfs, rest = command[1:7], command[7:]
        at = rest.index("--proc")
        return [command[0], *rest[:at], *tmpfs, *rest[at:]]
    sandbox.jail_command = jail_command
for solution in ({good!r}, {wrong!r}):
    outcome = sandbox._in_slot([("solution", solution), ("tests", {tests!r})], sandbox.Limits(), True)
    print(outcome.status, repr(outcome.stderr))
"""


@pytest.fixture(scope="module")
def tmp_venv():
    """A venv under /tmp itself (not $TMPDIR), on the project's Python, seeing its packages."""
    where = Path(tempfile.mkdtemp(dir="/tmp", prefix="spotbench-venv-"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")], check=True)
    yield where / "venv" / "bin" / "python"
    shutil.rmtree(where)


@pytest.mark.parametrize("old_order", [False, True])
def test_a_python_installed_under_tmp_scores_in_the_jail(tmp_venv, old_order):
    code = UNDER_TMP_SCORER.format(root=str(ROOT), old_order=old_order, good=GOOD, wrong=WRONG, tests=TESTS)
    done = subprocess.run([str(tmp_venv), "-I", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (right, right_err), (wrong, wrong_err) = (line.split(" ", 1) for line in done.stdout.splitlines())
    if old_order:  # negative control: the test does put the interpreter where /tmp hid it
        assert (right, wrong) == ("failed", "failed") and "failed to execute" in right_err
    else:
        assert (right, wrong) == ("passed", "failed") and "AssertionError" in wrong_err


def test_the_work_dir_never_is_a_bound_path(monkeypatch):
    for function in (sandbox.python_trees, sandbox.work_dir):
        monkeypatch.setattr(sandbox, function.__name__, function.__wrapped__)
    monkeypatch.setattr(sandbox, "python_trees", lambda: ("/opt/py", f"{sandbox.WORKDIR}/venv"))
    assert sandbox.work_dir() == "/tmp/work-1"
    monkeypatch.setattr(sandbox, "python_trees", lambda: ("/tmp/workshop", "/tmp/work-1/v"))
    assert sandbox.work_dir() == "/tmp/work"  # /tmp/workshop is not under /tmp/work
    monkeypatch.setattr(sandbox, "python_trees", lambda: ("/tmp/work", "/tmp/work-1/v"))
    assert sandbox.work_dir() == "/tmp/work-2"


def test_a_python_tree_that_would_hide_the_jails_tmp_is_refused(monkeypatch):
    monkeypatch.setattr(sandbox, "python_trees", sandbox.python_trees.__wrapped__)
    monkeypatch.setattr(sys, "prefix", "/")
    with pytest.raises(UserError, match="would hide the jail's /tmp"):
        sandbox.python_trees()


# ---- each jail its own uid: another scorer's fork bomb cannot starve a correct program ----

THREAD_BOMB = (
    "import threading, time\n" + GOOD + "threading.stack_size(1 << 16)\n"
    "while True:\n    try:\n"
    "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    "    except (RuntimeError, MemoryError):  # out of tasks, or of address space\n"
    "        time.sleep(0.01)\n"
)
THREADED_GOOD = (
    "import threading\ndef add(a, b):\n    out = []\n"
    "    threads = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]\n"
    "    for t in threads:\n        t.start()\n    for t in threads:\n        t.join()\n"
    "    return a + b\n"
)
SCORER = """
import sys
sys.path.insert(0, {root!r})
from tasks import sandbox
sandbox.check_jail()
if {shared_uid}:  # negative control: every scorer process on the same uid pair, as it once was
    sandbox.slot_uid = lambda slot: sandbox.UID_BASE + 2 * sandbox.UID_LEASES
print(sandbox.slot_uid(0), flush=True)
outcome = sandbox.run([("solution", {solution!r}), ("tests", {tests!r})],
                      sandbox.Limits(cpu_s=5, wall_s=30), audit_hook=False)
print(outcome.status, repr(outcome.stderr[-300:]), flush=True)
"""


def tasks_of(uid: int) -> int:
    """Threads on the host whose real uid is `uid` (what RLIMIT_NPROC counts)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/task/*/status"):
        try:
            uids = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        count += int(uids.split()[1]) == uid
    return count


def scorer(solution: str, shared_uid: bool) -> subprocess.Popen:
    code = SCORER.format(root=str(ROOT), shared_uid=shared_uid, solution=solution, tests=TESTS)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="jails get uids of their own under a root harness")
@pytest.mark.parametrize("shared_uid", [False, True])
def test_a_fork_bomb_in_one_scorer_does_not_fail_a_correct_program_in_another(shared_uid):
    bomber = scorer(THREAD_BOMB, shared_uid)
    try:
        bomb_uid = int(bomber.stdout.readline())
        deadline = time.monotonic() + 30
        while tasks_of(bomb_uid) < Limits().processes:  # the bomb holds its uid's every task
            if bomber.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the bomb never went off: {bomber.stdout.read()}")
            time.sleep(0.1)
        honest = scorer(THREADED_GOOD, shared_uid)
        out, _ = honest.communicate(timeout=60)
    finally:
        bomber.kill()  # its jails die with it
        bomber.wait()
    uid, verdict = out.splitlines()
    status, stderr = verdict.split(" ", 1)
    if shared_uid:
        assert int(uid) == bomb_uid and status == "failed" and "can't start new thread" in stderr
    else:
        assert int(uid) != bomb_uid and status == "passed", stderr


def test_scorer_processes_lease_different_uids():
    if os.geteuid() != 0:
        pytest.skip("uids are leased under a root harness only")
    code = (
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom tasks import sandbox\n"
        "print(sandbox.slot_uid(0), sandbox.slot_uid(1), flush=True)\nsys.stdin.read()\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        uids = [int(u) for p in procs for u in p.stdout.readline().split()]
    finally:
        for p in procs:
            p.communicate("")
    assert len(set(uids)) == 4 and all(u % 2 == 0 and u >= sandbox.UID_BASE for u in uids)
    assert sandbox.slot_uid(0) == sandbox.slot_uid(0)  # a slot keeps its lease


# ---- a correct program is judged by its answers, not by the machine ----


def test_a_correct_program_may_remove_its_own_working_directory():
    program = "import os, shutil\nWHERE = os.getcwd()\nshutil.rmtree(WHERE)\nGONE = not os.path.exists(WHERE)\n" + GOOD
    outcome = check(program, tests=TESTS + "assert GONE and WHERE.startswith('/tmp/')\n")
    assert outcome.status == "passed", outcome.stderr
    # control: removing what the jail does not own still fails the program
    assert check("import shutil\nshutil.rmtree('/spotbench')\n" + GOOD).status == "failed"


def burn(seconds: float) -> str:
    return f"import time\nstart = time.process_time()\nwhile time.process_time() - start < {seconds}:\n    pass\n"


@pytest.mark.slow
def test_a_loaded_machine_does_not_time_out_a_correct_program():
    """The program needs 1 s of CPU and gets a quarter of one core: about 4 s of wall clock. CPU
    time decides (limit 2 s); a 2 s wall clock, as used to decide, would have failed it."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    spin = "while True:\n    pass\n"
    os.sched_setaffinity(0, {cpu})  # this thread, the jails it starts and the spinners share it
    # Each spinner leads a session of its own, as the jail does: with the scheduler's autogroups on,
    # CPU is shared between sessions first, and three spinners in this one would leave the jail half.
    spinners = [subprocess.Popen([sys.executable, "-c", spin], start_new_session=True) for _ in range(3)]
    try:
        loaded = check(burn(1.0) + GOOD, Limits(cpu_s=2))
        wall_decides = check(burn(1.0) + GOOD, Limits(cpu_s=2, wall_s=2.0))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        os.sched_setaffinity(0, before)
    assert loaded.status == "passed" and loaded.wall_s > 2.0, (loaded.status, loaded.wall_s)
    assert wall_decides.status == "timeout"  # control: the load is real


def test_a_timeout_is_a_timeout_not_a_failed_test():
    spinning = check("def add(a, b):\n    while True:\n        pass\n", Limits(cpu_s=1))
    assert spinning.status == "timeout" and not spinning.passed and spinning.wall_s < 5
    waiting = check("import time\ndef add(a, b):\n    time.sleep(60)\n", Limits(cpu_s=1, wall_s=2))
    assert waiting.status == "timeout" and waiting.wall_s < 5
    assert check(WRONG).status == "failed"  # control


# ---- a jail that cannot score is refused before it scores ----


@pytest.fixture
def unchecked(monkeypatch):
    """As in a fresh process: the jail not yet proven."""
    monkeypatch.setattr(sandbox, "_jail_works", False)


@pytest.fixture
def broken_bwrap(tmp_path, monkeypatch, unchecked):
    """A bwrap that cannot make namespaces, as in a locked-down container."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    sandbox.tools.cache_clear()
    yield
    sandbox.tools.cache_clear()


def test_check_jail_passes_a_working_jail(unchecked):
    sandbox.check_jail()
    assert sandbox._jail_works


def test_a_jail_that_cannot_start_the_interpreter_is_refused(unchecked, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with pytest.raises(UserError) as error:
        check(GOOD)
    message = str(error.value)
    assert "known-correct program came out failed" in message and "\n" not in message
    assert "failed to execute /nonexistent/python" in message  # the jail's own words
    assert not sandbox._jail_works


def test_a_jail_that_passes_everything_is_refused(unchecked, monkeypatch):
    monkeypatch.setattr(sandbox, "_status", lambda *args: "passed")
    with pytest.raises(UserError, match="known-wrong program came out passed"):
        check(GOOD)


def test_tasks_check_exits_2_naming_the_jails_error(broken_bwrap, capsys):
    assert main(["tasks", "check", "humaneval", "--limit", "2"]) == 2
    error = capsys.readouterr().err.strip()
    assert "No permissions to create new namespace" in error and "\n" not in error


def test_a_run_of_a_code_task_is_refused_before_ray_starts(broken_bwrap, capsys, monkeypatch, tmp_path):
    import cluster.runner

    def no_ray(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(cluster.runner, "run_suite", no_ray)
    argv = [
        "run",
        "--models",
        "tiny-random:llada",
        "--proposers",
        "confidence",
        "--budgets",
        "2",
        "--limit",
        "1",
        "--output",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    assert main([*argv, "--tasks", "humaneval"]) == 2
    error = capsys.readouterr().err.strip()
    assert "code sandbox does not work" in error and "\n" not in error
    with pytest.raises(AssertionError, match="the run started"):  # control: arith runs no code
        main([*argv, "--tasks", "arith"])
