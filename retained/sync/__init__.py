"""One memory across machines: each store publishes its log to object storage, pulls the others', and checks them.

The model (docs/sync.md): one writer per store. A store's log goes up as
sealed segments, created once and never overwritten (``If-None-Match: *``),
named by store id and seq range; its published head moves forward by
compare-and-swap (``If-Match``). Other stores' segments come down into mirrors
beside the store (``mirrors/<store id>/``), verified by the same chain checker
as ``verify``, and are searched with their origin; nothing is ever written
into another store's log. Forks, rollbacks and rewritten segments are
findings, never overwritten. Modules: ``layout``, ``remote``, ``state``,
``publish``, ``mirror`` (pull and verify), ``restore``, ``erasure``,
``sealed``, ``union`` (search over the mirrors), ``runner`` (the command).
"""
