"""The part of the build that pyproject.toml cannot say: the checkout's `zoo/` and `suites/` folders
ship inside the wheel as `harness/data/zoo` and `harness/data/suites` (package data mapped from
folders outside any package), where `harness.bundled` finds them once installed.

The wheel leaves out what no command needs at run time and would push it past 60 MB installed:
training states, SPOT distillation teachers and experiment recipes, the block-length-16 conversion
of SmolLM2 and its Psi-Spec drafter (the checkout keeps all of them; zoo/README.md).
"""

from setuptools import find_namespace_packages, setup

BUNDLED = {"harness.data.zoo": "zoo", "harness.data.suites": "suites"}

setup(
    packages=find_namespace_packages(include=["spotbench*", "harness*", "proposers*", "tasks*", "cluster*"])
    + list(BUNDLED),
    package_dir=BUNDLED,
    include_package_data=False,  # exactly the globs below (no "package would be ignored" warnings)
    package_data={
        "tasks": ["metrics/*/*.py", "lm_eval/*.yaml"],
        "harness.data.zoo": [
            "README.md",
            "tokenizer/*",
            "recipes/*.yaml",
            "models/*/model/*",
            "proposers/*.yaml",
            "proposers/*/*",
            "proposers/spot-sets-calibrated/*/*",
            "drafters/*.yaml",
            "drafters/*/*",
        ],
        "harness.data.suites": ["*.yaml", "*/*.yaml"],
    },
    exclude_package_data={
        "harness.data.zoo": [
            "models/sdar-smollm2-b16/model/*",
            "recipes/sdar-smollm2-b16.yaml",
            "proposers/spot-sdar-smollm2-b16/*",
            "proposers/spiffy-sdar-smollm2-b16/*",
            "proposers/spot-sets-calibrated/sdar-smollm2-b16/*",
            "drafters/psi-smollm2/*",
            "drafters/psi-smollm2.yaml",
            "proposers/teachers/*/*",
            "proposers/experiments/*",
            "**/train_state.pt*",
            "**/*.tmp",
        ],
    },
)
