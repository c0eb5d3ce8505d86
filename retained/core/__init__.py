"""The storage core: the record format, the log's lines, the log and its lock, the chain walk, the worker pool, tail recovery, the store's files, anchors.

Knows nothing of SQLite, vectors or the edges; everything else is derived
from what this package writes. Import the modules themselves
(``retained.core.log``...): this file loads nothing, so the brief's reader
loads only ``files``, ``lines`` and ``anchors`` of it.
"""
