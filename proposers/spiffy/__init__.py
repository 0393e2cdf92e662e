"""Spiffy: auto-speculative decoding of a diffusion target with draft graphs calibrated offline.

It follows the Spiffy paper (arXiv 2509.18085): no draft model; a draft commit is named by
(position rank, token rank) on the target's own stale view, and the draft graph (the most frequent
such patterns) is calibrated offline by counting plain trajectories of one target, then pruned to the
budget at run time. The paper's code is not available: this is a reconstruction (docs/spiffy.md
lists every decision). Registry names `spiffy` (the zoo graph for sdar-a) and `spiffy:DIR`.

- `draft_graph`: patterns, the calibration (`spotbench calibrate-spiffy`) and `SpiffyProposer`;
- `family`: the registry entry: the folder, the fit checks, the files hashed into runs.
"""
