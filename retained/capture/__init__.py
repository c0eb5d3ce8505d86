"""Capture: a host's hook events become records, and a ledger accounts for every event (docs/capture.md).

Library code: no printing, no environment. ``retained capture`` (cli) is the edge.
"""
