"""Draft proposers: the Proposer protocol and its implementations."""
