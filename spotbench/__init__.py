"""The spotbench command line: the top floor, and the only importer of `cluster`.

Its commands parse flags, validate them (before Ray or any model starts) and call the library
(`harness`, `proposers`, `tasks`) or the distributed driver (`cluster`).
"""
