"""SPOT: a learned proposer of the order in which a diffusion target commits positions.

It follows "Speculating Positions Order Trajectory" (SPOT, a 2026 preprint; DESIGN.md section 1). The
target's stale view (its previous pass over the block) already holds the right token at most
positions; what is hard to guess is the *order*. A small network reads only features of the stale
view and of the tree node, predicts the next committed position and which stale candidate the target
commits there, and the proposer grows a tree of future block states best-first by the probability
that the verifier walks each path. Registry names `spot` (the zoo checkpoint) and `spot:PATH`.

- `features`: what the network reads of the stale view and of a tree node (nothing absolute);
- `network`: `SpotNet`, ensembles, checkpoint folders;
- `kernels`: the encoder's inference path (fused kernels, masked-only last layer);
- `tree`: `SpotProposer` and its batched best-first tree search;
- `recipe`, `collection`, `training`: the training recipe, the plain trajectories it learns from
  (collected here or through the caller's map function) and the training run (`spotbench
  train-proposer`);
- `loop`: the resumable training loop SPOT and SPOT-Sets share;
- `family`: the registry entry: the folder, the network cache, the rule check, the files hashed into runs.
"""
