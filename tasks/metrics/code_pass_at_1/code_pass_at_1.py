"""pass@1 by execution: each program runs with its tests in the project's sandbox.

A stand-in for the hub's `code_eval` (unreachable offline, and it runs code in-process threads): a
prediction is the program (solution code), a reference is the test code; the program runs in one
bubblewrap jail and the tests in a separate judge jail that receives the program's values as plain
data, so a pass is only the judge's own verdict (see `tasks.sandbox`).
"""

import math

import datasets
import evaluate

from tasks.sandbox import Limits, run_many


class CodePassAt1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation="Chen et al., Evaluating Large Language Models Trained on Code, 2021",
            inputs_description="predictions: programs; references: test code run after them",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
        )

    def _compute(self, predictions, references, timeout_s=10.0, workers=None):
        programs = [[("solution", p), ("tests", r)] for p, r in zip(predictions, references)]
        outcomes = run_many(programs, Limits(cpu_s=math.ceil(timeout_s)), workers)
        return {
            "pass@1": sum(o.passed for o in outcomes) / max(len(outcomes), 1),
            "passed": [o.passed for o in outcomes],
            "status": [o.status for o in outcomes],
            "stderr": [o.stderr[-500:] for o in outcomes],
        }
