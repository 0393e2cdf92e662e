"""GSM8K answer match: strict (`#### n`, the GSM8K answer format) and flexible (the last number).

The filters are lm-evaluation-harness's `strict-match` and `flexible-extract`; numbers compare as
decimals after removing `$`, `,` and a trailing period.
"""

import datasets
import evaluate

from tasks.answers import flexible_number, numbers_equal, strict_number


class Gsm8kMatch(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation="Cobbe et al., Training Verifiers to Solve Math Word Problems, 2021",
            inputs_description="predictions: completions; references: gold numbers as text",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
        )

    def _compute(self, predictions, references):
        strict = [strict_number(p) for p in predictions]
        flexible = [flexible_number(p) for p in predictions]
        strict_ok = [numbers_equal(s, r) for s, r in zip(strict, references)]
        flexible_ok = [numbers_equal(f, r) for f, r in zip(flexible, references)]
        count = max(len(references), 1)
        return {
            "strict_match": sum(strict_ok) / count,
            "flexible_match": sum(flexible_ok) / count,
            "strict": strict_ok,
            "flexible": flexible_ok,
            "extracted_strict": strict,
            "extracted_flexible": flexible,
        }
