"""CLI subcommands, one module each (see spotbench.cli)."""
