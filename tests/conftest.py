import shutil

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
    The run exits non-zero, so CI fails there."""
    if session.config.option.collectonly:
        return
    missing = [
        package
        for package, (commands, tests) in SYSTEM_PACKAGES.items()
        if not any(map(shutil.which, commands)) and any(item.nodeid.startswith(tests) for item in session.items)
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
