"""Distributed runs on Ray: actors, sharding, retries, resume and gathering."""
