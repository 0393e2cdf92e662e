"""Final-answer equivalence for MATH: string normalization, then math-verify in worker processes.

math-verify bounds its parsing and verification with `signal.alarm`, which only works in a main
thread, and sympy can still hang in C code. So each check runs in the main thread of a worker process
(`python -m tasks.mathcheck`, one JSON line in, one out) and the harness kills a worker that misses a
hard wall-clock deadline, scores that pair wrong and starts a fresh worker. Only LaTeX extraction is
enabled: math-verify's plain-expression parser goes through sympy's `parse_expr` (an `eval`), which
must not see model-written text.
"""

from __future__ import annotations

import json
import re
import selectors
import subprocess
import sys
import time

from tasks.sandbox import default_workers

_SPACES = re.compile(r"\s+|\\[,;:! ]|\\left|\\right")


def normalize(answer: str) -> str:
    """A cheap canonical form: catches most identical answers without starting sympy."""
    text = _SPACES.sub("", answer).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = text.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\$", "")
    return text.removeprefix("\\text{").removesuffix("}") if text.startswith("\\text{") else text


def equivalent_many(
    pairs: list[tuple[str, str | None]], timeout_s: float = 10.0, workers: int | None = None, fast_path: bool = True
) -> list[bool]:
    """For each (gold, predicted) pair: is the prediction the same answer? None predicts nothing.
    `fast_path=False` sends every pair to math-verify (the self-check uses it to exercise it)."""
    results = [fast_path and pred is not None and normalize(gold) == normalize(pred) for gold, pred in pairs]
    pending = [i for i, (ok, (_, pred)) in enumerate(zip(results, pairs)) if not ok and pred]
    if not pending:
        return results
    pool = [_Worker() for _ in range(min(workers or default_workers(), len(pending)))]
    busy: dict[int, tuple[_Worker, int, float]] = {}  # fd -> (worker, pair index, deadline)
    try:
        with selectors.DefaultSelector() as selector:
            while pending or busy:
                for worker in [w for w in pool if w.fd not in busy]:
                    if not pending:
                        break
                    index = pending.pop()
                    worker.send(pairs[index])
                    busy[worker.fd] = (worker, index, time.monotonic() + timeout_s)
                    selector.register(worker.fd, selectors.EVENT_READ)
                deadline = min(d for _, _, d in busy.values())
                wait = max(0.0, deadline - time.monotonic())
                ready = {key.fd for key, _ in selector.select(wait)}
                for fd, (worker, index, due) in list(busy.items()):
                    if fd in ready or time.monotonic() > due:
                        selector.unregister(fd)
                        del busy[fd]
                        answer = worker.receive() if fd in ready else None
                        results[index] = bool(answer)
                        if answer is None:  # timed out or died: replace it
                            worker.close()
                            pool[pool.index(worker)] = _Worker()
    finally:
        for worker in pool:
            worker.close()
    return results


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tasks.mathcheck"],
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # PIPEs
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.fd = self.stdout.fileno()

    def send(self, pair: tuple[str, str | None]) -> None:
        self.stdin.write(json.dumps(pair) + "\n")
        self.stdin.flush()

    def receive(self) -> bool | None:
        line = self.stdout.readline()
        return json.loads(line) if line else None

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.stdin.close()
        self.stdout.close()


def _verify(gold: str, predicted: str) -> bool:
    from math_verify import LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig()]
    parsed_gold = parse(f"\\boxed{{{gold}}}", extraction_config=config, parsing_timeout=5)
    parsed_pred = parse(f"\\boxed{{{predicted}}}", extraction_config=config, parsing_timeout=5)
    return bool(parsed_gold and parsed_pred and verify(parsed_gold, parsed_pred, timeout_seconds=5))


def _serve() -> None:
    """Worker loop: one JSON [gold, predicted] per line in, one JSON bool per line out."""
    for line in sys.stdin:
        gold, predicted = json.loads(line)
        try:
            answer = _verify(gold, predicted)
        except Exception:  # noqa: BLE001 - any parser failure means "not shown equivalent"
            answer = False
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
