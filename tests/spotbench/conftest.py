"""After a run that included tests/spotbench/test_malformed_inputs.py: how many of its malformed
inputs got a clear error (one line, exit 2, nothing written), as 'X/Y'."""

from __future__ import annotations

CASE_TEST = "test_malformed_inputs.py::test_malformed_input_is_one_clear_line["


def pytest_terminal_summary(terminalreporter) -> None:
    def cases(outcome: str) -> set[str]:
        return {r.nodeid for r in terminalreporter.stats.get(outcome, []) if CASE_TEST in getattr(r, "nodeid", "")}

    ran = cases("passed") | cases("failed") | cases("error")
    if ran:
        clear = cases("passed") - cases("failed") - cases("error")  # a teardown error fails a passed call
        terminalreporter.write_line(f"malformed inputs with clear errors {len(clear)}/{len(ran)}")
