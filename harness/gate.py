"""The regression gate: compare a run's summary with a baseline's, arm by arm.

An arm is (model, proposer, task, temperature, rule, budget, batch size). It fails when

- `exact_rate` < 100%: the lossless claim is the product, so one divergent sample fails the gate
  (exactness does not need a baseline; checked on every arm of the run, over its token-checked rows:
  AR rejection sampling at T>0 is lossless in distribution, proved by a statistical test, not per row);
- `mean_accept_len` < `accept_fraction` x the baseline's: the proposer got worse;
- `speedup_nfe` or `speedup_wall_robust` is outside a relative noise band around the baseline's. The
  band is two-sided on purpose: an unexplained jump is as suspicious as a drop (a change in pass
  accounting, a stale baseline) and is resolved by refreshing the baseline. Pass counts are
  deterministic, so their band is narrow; wall time is noisy, so its band is wide, and the wall
  figure compared leaves out the rows another process slowed (`harness.runs.summary.wall_disturbed`:
  one such row can move a ratio of sums further than the band; the check's `allowed` says how many
  rows of the run were left out);
- `accuracy` < the Wilson lower bound of the baseline's accuracy (its k correct of n at `z`): a
  drop the baseline's own sampling noise cannot explain;
- the arm is missing from the run, or the run did not complete.

Arms of the run without a baseline arm are only checked for exactness.

Before any check, both sides must be trustworthy and comparable: a run directory is verified
(`harness.runs.verify`: a damaged one is refused, naming the damage), a summary.parquet inside a run
directory is read as that run (so its status counts), a bare one must carry the run metadata
`harness.runs.run_dir` writes into it, and the two runs' settings that change results (`harness.runs.configs`:
limit, split, seeds, lengths, precision, checkpoint and data bytes) must agree, unless the caller
allows the difference (then it is a warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import UserError


@dataclass(frozen=True)
class Thresholds:
    accept_fraction: float = 0.95
    nfe_band: float = 0.05
    wall_band: float | None = 0.5
    """None: no wall check (a run or baseline whose rows are replayed: `replayed_wall_band`)."""
    z: float = 1.96


@dataclass(frozen=True)
class Check:
    arm: str
    metric: str
    value: float | None
    baseline: float | None
    allowed: str
    ok: bool


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (sound at 0% and 100%, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Summary:
    """One side of a gate: its summary rows, the run's status and the record (config, inputs) it was run with."""

    rows: list[dict[str, Any]]
    status: str | None
    record: dict[str, Any]
    source: str


def load_summary(path: str | Path) -> Summary:
    """A run directory's summary (verified first), or a bare summary.parquet with its metadata."""
    import json

    from harness.runs.damage import damage_message
    from harness.runs.files import read_parquet
    from harness.runs.run_dir import RunDir
    from harness.runs.schema import SCHEMA_VERSION, SUMMARY_METADATA

    path = Path(path)
    if path.is_file() and (path.parent / "manifest.json").is_file():
        path = path.parent  # a run's own summary: the run's status and checks apply
    if path.is_file():
        try:
            table = read_parquet(path)
        except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a file that is not Parquet
            raise UserError(f"cannot read summary {path}: {str(error).splitlines()[0]}") from None
        raw = (table.schema.metadata or {}).get(SUMMARY_METADATA)
        if raw is None:
            raise UserError(
                f"{path} carries no spotbench run metadata (its config and status): it was written "
                f"before schema version {SCHEMA_VERSION} or by another tool; gate against its run "
                "directory"
            )
        record = json.loads(raw)
        if record.get("schema_version") != SCHEMA_VERSION:  # its columns are not this version's
            raise UserError(
                f"{path} is a summary of schema version {record.get('schema_version')}; this spotbench "
                f"reads version {SCHEMA_VERSION}: run its suite again with this version and gate against that"
            )
        return Summary(table.to_pylist(), record.get("status"), record, str(path))
    if not (path / "manifest.json").exists():
        raise UserError(f"{path} is neither a run directory nor a summary.parquet file")
    run = RunDir.existing(path)
    manifest = run.manifest()
    damage = run.verify().damage
    if damage:
        raise UserError(damage_message(run.path, damage))
    return Summary(run.read_summary().to_pylist(), manifest.get("status"), manifest, str(path))


def check_digest(path: str | Path, expected: str) -> None:
    """UserError unless `path` is a complete run directory whose digest (`harness.runs.files.run_digest`) is
    `expected`: the baseline a release recorded, not an edited or another one under its name."""
    from harness.runs.files import MANIFEST_FILE, run_digest
    from harness.runs.run_dir import RunDir

    want = expected.strip().lower().removeprefix("sha256:")
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        raise UserError(
            f"--baseline-digest {expected!r} is not a digest (64 hex digits, as spotbench run and verify print it)"
        )
    path = Path(path)
    if path.is_file() and (path.parent / MANIFEST_FILE).is_file():
        path = path.parent
    if not (path / MANIFEST_FILE).is_file():
        raise UserError(
            f"--baseline-digest pins a run directory, and {path} is not one; give the baseline's run directory"
        )
    status = RunDir.existing(path).manifest().get("status")
    if status != "complete":
        raise UserError(f"baseline {path} is not a complete run (status {status}); a digest pins a finished run")
    found = run_digest(path)
    if found != want:
        raise UserError(
            f"baseline {path} has digest {found}, not {want} (the one recorded for it): its manifest, "
            "index, sample files or summary changed since; use the recorded baseline"
        )


def wall_band_for(run: Summary, baseline: Summary, asked: float | None) -> float | None:
    """The wall band to gate with: `asked` (default `Thresholds.wall_band`), or None when either side
    holds replayed rows (a passes-only run: their wall time is not measured, only a sample's). A wall
    band asked for over such a run is refused (UserError): the gate would compare a sample's wall."""
    replayed = [side.source for side in (run, baseline) if any(r["replayed_rows"] for r in side.rows)]
    if replayed and asked is not None:
        raise UserError(
            f"--wall-band gates wall time and {replayed[0]} is a passes-only run (its rows' passes are "
            "replayed, not timed): drop --wall-band, or gate a run decoded in full"
        )
    if replayed:
        return None
    return Thresholds().wall_band if asked is None else asked


def config_warning(run: Summary, baseline: Summary, allow: bool) -> str | None:
    """UserError when the runs differ in settings that change results; with `allow`, the warning."""
    from harness.runs.configs import result_differences

    differences = result_differences(run.record, baseline.record)
    if not differences:
        return None
    what = (
        f"{run.source} and the baseline {baseline.source} differ in settings that change results: "
        f"{', '.join(differences)}"
    )
    if not allow:
        raise UserError(f"{what}; gate runs made with the same settings, or pass --allow-config-diff to compare anyway")
    return f"warning: {what}; compared anyway (--allow-config-diff)"


def gate(
    run: list[dict[str, Any]], baseline: list[dict[str, Any]], status: str | None, thresholds: Thresholds = Thresholds()
) -> list[Check]:
    from harness.runs.summary import SUMMARY_KEY

    checks = []
    if status != "complete":
        checks.append(Check("(run)", "status", None, None, "complete", False))
    by_key = {tuple(r[k] for k in SUMMARY_KEY): r for r in run}
    for measured in run:
        if measured["exact_rate"] is None:  # rejection sampling at T>0: lossless in distribution (a test), not per row
            checks.append(Check(arm_name(measured), "exact_rate", None, None, "not token-checked (distribution)", True))
        else:
            checks.append(
                Check(
                    arm_name(measured), "exact_rate", measured["exact_rate"], None, "= 1", measured["exact_rate"] == 1.0
                )
            )
    t = thresholds
    for base in baseline:
        arm = arm_name(base)
        row = by_key.get(tuple(base[k] for k in SUMMARY_KEY))
        if row is None:
            checks.append(Check(arm, "present", None, None, "in the run", False))
            continue
        floor = t.accept_fraction * base["mean_accept_len"]
        checks.append(
            Check(
                arm,
                "mean_accept_len",
                row["mean_accept_len"],
                base["mean_accept_len"],
                f">= {floor:.3f}",
                row["mean_accept_len"] >= floor,
            )
        )
        for metric, band in (("speedup_nfe", t.nfe_band), ("speedup_wall_robust", t.wall_band)):
            if band is None or base[metric] is None:
                continue
            low, high = base[metric] * (1 - band), base[metric] * (1 + band)
            allowed = f"{low:.3f}..{high:.3f}"
            if metric == "speedup_wall_robust" and row["disturbed_rows"]:
                allowed += f" ({row['disturbed_rows']} of {row['n']} rows disturbed, left out)"
            value = row[metric]  # None: no undisturbed row (or no wall time) left to compare
            checks.append(Check(arm, metric, value, base[metric], allowed, value is not None and low <= value <= high))
        if base["correct"] is None or row["accuracy"] is None:  # unscored prompts (token ids): no accuracy
            checks.append(
                Check(
                    arm,
                    "accuracy",
                    row["accuracy"],
                    base["accuracy"],
                    "not scored",
                    row["accuracy"] is None and base["accuracy"] is None,
                )
            )
            continue
        lower, _ = wilson_interval(base["correct"], base["n"], t.z)
        checks.append(
            Check(arm, "accuracy", row["accuracy"], base["accuracy"], f">= {lower:.3f}", row["accuracy"] >= lower)
        )
    return checks


def arm_name(row: dict[str, Any]) -> str:
    return (
        f"{row['model']}/{row['task']} T={row['temperature']:g} {row['rule']} "
        f"{row['proposer']}@{row['budget']}/batch{row['batch_size']}"
    )


def render(checks: list[Check], all_checks: bool = False) -> str:
    shown = checks if all_checks else [c for c in checks if not c.ok]
    header = ("arm", "metric", "run", "baseline", "allowed", "")
    lines = [header] + [
        (c.arm, c.metric, _num(c.value), _num(c.baseline), c.allowed, "ok" if c.ok else "FAIL") for c in shown
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines]
    failed = sum(not c.ok for c in checks)
    verdict = f"gate: {'FAIL' if failed else 'PASS'}: {failed} of {len(checks)} checks failed"
    return "\n".join((table if shown else []) + [verdict])


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
