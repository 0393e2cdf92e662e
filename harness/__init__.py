"""spotbench harness: targets, decoding core, lossless checks, results and the CLI."""
