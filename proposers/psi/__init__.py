"""Psi-Spec: lossless speculative decoding of an autoregressive target with its own diffusion drafter.

It follows the Uno / Psi-Spec paper (2026; DESIGN.md section 1): the target LLM keeps its weights and
gains lightweight diffusion weights (a gated LoRA, on for draft rows, off for clean rows, sharing one
KV cache) that draft several tokens in parallel; Psi-Spec verifies them losslessly (linear chains,
or trees walked by the verifier's own samples). Registry names `psi-linear:DIR` and `psi-tree:DIR`.

- `lora`: the gated LoRA and the drafter folder;
- `proposer`: `PsiLinear` and `PsiTree`, drafting over the target's KV cache;
- `training`: the diffusion distillation of a drafter (`spotbench train-drafter`);
- `family`: the registry entries: folder and settings parsing, fit checks, the files hashed into runs.
"""
