"""SPOT-Sets: SPOT's threshold-decoding variant, where a step commits a *set* of positions.

It follows the threshold-decoding variant of "Speculating Positions Order Trajectory" (SPOT, a 2026
preprint; DESIGN.md section 1). Under `threshold:TAU` the target commits the most confident masked
position plus every other masked position whose confidence is >= tau; the network reads SPOT's
features (proposers/spot/features.py) plus each candidate's distance to tau, and the proposer grows a
tree of set-transitions best-first. Registry names `spot-sets` (the zoo checkpoint) and
`spot-sets:PATH`.

- `network`: `SpotSetsNet`, the per-target `Calibration` (`spotbench calibrate`), checkpoint folders;
- `tree`: `SpotSetsProposer` and its best-first search over sets;
- `collection`, `training`: plain threshold trajectories and the training loop (`spotbench
  train-proposer` with a recipe that names a rule);
- `calibration`: the calibration fit and run (`spotbench calibrate`);
- `family`: the registry entry: the folder, the network cache, the fit and rule checks, the files
  hashed into runs.
"""
