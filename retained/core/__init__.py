"""The storage core: the record format, the log and its lock, the chain walk, tail recovery, the store's files, anchors.

Knows nothing of SQLite, vectors or the edges; everything else is derived
from what this package writes. Import the modules themselves
(``retained.core.log``...): this file loads nothing, so the brief pays for
only what it uses.
"""
