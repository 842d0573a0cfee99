"""memwarden's benchmarks: the store against raw SQLite doing the same work.

Run them with ``python -m benchmarks [names...]`` (``make bench``); see docs/BENCHMARKS.md.
"""
