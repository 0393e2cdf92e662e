"""MATH final-answer equivalence: the last `\\boxed{}` of the completion against the gold answer,
equal after normalization or judged equivalent by math-verify (in killable worker processes)."""

import datasets
import evaluate

from tasks.answers import last_boxed
from tasks.mathcheck import equivalent_many


class MathEquivalence(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation="Hendrycks et al., Measuring Mathematical Problem Solving With the MATH Dataset, 2021",
            inputs_description="predictions: completions; references: gold answers (LaTeX)",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
        )

    def _compute(self, predictions, references, timeout_s=10.0, workers=None, fast_path=True):
        extracted = [last_boxed(p) for p in predictions]
        correct = equivalent_many(list(zip(references, extracted)), timeout_s, workers, fast_path)
        return {
            "accuracy": sum(correct) / max(len(correct), 1),
            "correct": correct,
            "extracted": extracted,
        }
