import torch

# Tiny models gain nothing from intra-op threads, and on a busy machine OpenMP spin-waits make them
# up to 100x slower; one thread keeps the suite's runtime steady. Tests that need more set it.
torch.set_num_threads(1)
