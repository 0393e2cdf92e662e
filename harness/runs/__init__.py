"""The run store: a run directory's files, written, checked and summarized (DESIGN.md section 5).

`schema` (the row, its key and file names) is below everything else here; `files` (checksummed
Parquet, sha256, the run's digest), `damage`, `index` and `verify` (integrity) build on it;
`summary` (per-arm figures), `configs` (which config changes a run accepts), `run_dir` (`RunDir`,
which writes and reads a run) and `lm_eval` (results.json) sit on top. Nothing is re-exported:
import a name from the module it lives in.
"""
