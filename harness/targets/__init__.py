"""Target diffusion LMs: architectures, family presets, checkpoint loading and the tiny zoo."""
