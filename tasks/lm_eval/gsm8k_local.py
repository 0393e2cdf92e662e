"""The data of gsm8k_local.yaml (its `custom_dataset`): the GSM8K rows spotbench's own gsm8k task
reads, found as it finds them (the files in $SPOTBENCH_DATA_DIR, else in shared/data beside the
checkout, else the hub), so the task works from any working directory. lm-eval imports this file by
its path."""

from __future__ import annotations

from typing import Any


def load(**_: Any) -> Any:
    """The train and test splits as a `datasets.DatasetDict` (lm-eval passes its metadata: unused)."""
    import datasets

    from tasks import data
    from tasks.gsm8k import SOURCES, checked_rows

    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_list(checked_rows(data.load_rows("gsm8k", SOURCES[split]), SOURCES[split]))
            for split in ("train", "test")
        }
    )
