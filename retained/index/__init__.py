"""The derived SQLite index: schema and read model, catch-up and rebuild, search and ranking, vectors, verify, stats.

Every SQL statement over the index's tables lives in this package. The
index is rebuilt from the log alone and never writes the log (L5). This
file loads nothing: the brief imports ``retained.index.schema`` alone.
"""
