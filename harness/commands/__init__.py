"""CLI subcommands, one module each (see harness.cli)."""
