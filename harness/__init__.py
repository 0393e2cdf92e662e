"""The library core: targets, the decoding core, the arm pipeline, lossless checks, results, gate and report."""
