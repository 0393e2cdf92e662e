import os
import shutil
import sys

import pytest
import torch

# Tiny models gain nothing from intra-op threads, and on a busy machine OpenMP spin-waits make them
# up to 100x slower; one thread keeps the suite's runtime steady. Tests that need more set it.
torch.set_num_threads(1)


# The Debian packages that some tests need (each found as any of its commands), with the node ids (or
# their prefixes) of those tests: bubblewrap, the code sandbox's jail, for the tests of tasks/;
# Chromium for the report test, which renders the report headless.
SYSTEM_PACKAGES = {
    "bubblewrap": (("bwrap",), ("tests/tasks/",)),
    "chromium": (("chromium", "chromium-browser"), ("tests/harness/reports/test_html.py::test_headless_chromium",)),
}
INSTALL = "apt-get install -y chromium bubblewrap libseccomp2"  # as .ci/run installs them


def pytest_collection_finish(session: pytest.Session) -> None:
    """Stop the run before any test runs, with one line naming the install command, where a system
    package that a selected test needs is missing: every test that needs it would fail the same way.
    The run exits non-zero, so CI fails there. Under `pytest -n` the controlling process checks
    (below): a worker that stopped would be reported as crashed, test by test."""
    if session.config.option.collectonly or hasattr(session.config, "workerinput"):
        return
    stop_where_packages_are_missing([item.nodeid for item in session.items])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    stop_where_packages_are_missing(ids)


def stop_where_packages_are_missing(node_ids: list[str]) -> None:
    missing = [
        package
        for package, (commands, tests) in SYSTEM_PACKAGES.items()
        if not any(map(shutil.which, commands)) and any(node_id.startswith(tests) for node_id in node_ids)
    ]
    if missing:
        names = " and ".join(missing)
        pytest.exit(f"the selected tests need {names}, not installed here: {INSTALL}", pytest.ExitCode.INTERRUPTED)


@pytest.fixture(scope="session", autouse=True)
def private_hash_cache(tmp_path_factory: pytest.TempPathFactory):
    """Input hashes remembered between starts (`harness.hash_cache`) go to a folder of this test run,
    not the user's cache; commands the tests start in subprocesses inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPOTBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("hash-cache")))
        yield


CASE_TEST = "::test_malformed_input_is_one_clear_line["
"""The parametrised test of each tests/spotbench/test_malformed_*.py file, one case a node."""


def pytest_terminal_summary(terminalreporter) -> None:
    """After a run that included the test_malformed_*.py files: how many of their malformed inputs
    got a clear error (one line, exit 2, nothing written; `clear_error` in tests/spotbench/conftest.py),
    as 'X/Y'. Here, not beside the fixture, so that `pytest -n` (whose controlling process loads only
    this conftest) prints it too."""

    def cases(outcome: str) -> set[str]:
        return {r.nodeid for r in terminalreporter.stats.get(outcome, []) if CASE_TEST in getattr(r, "nodeid", "")}

    ran = cases("passed") | cases("failed") | cases("error")
    if ran:
        clear = cases("passed") - cases("failed") - cases("error")  # a teardown error fails a passed call
        terminalreporter.write_line(f"malformed inputs with clear errors {len(clear)}/{len(ran)}")


EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process with pytest's exit status once pytest has reported, without the
    interpreter's teardown. Why: the suite starts and stops Ray in this process many times (every
    in-process `spotbench run`), and a CI run whose 1635 tests had all passed once died of SIGSEGV
    after the summary, in that teardown, where no test looks; its exit status (139) failed CI. Every
    result is decided and printed by now; .ci/run sets PYTHONFAULTHANDLER, so a crash while tests
    run still prints every thread's stack and fails the run."""
    if EXIT_STATUS in config.stash:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(config.stash[EXIT_STATUS])
