"""retained-harness: conformance probes for MCP memory servers, over stdio, from the outside.

``python -m harness --adapter=retained`` runs every probe against a server
command and reports PASS, FAIL or SKIP with one sentence of evidence each;
``python -m harness eval`` and ``python -m harness bench`` run the retrieval
evaluation and the benchmarks.
"""

__version__ = "0.1.0"
