"""The MCP edge: the server (stdio and streamable HTTP), its six tools and the brief prompt, the stdio front.

Thin over ``retained.store.Store``. The only part of retained that imports
the ``mcp`` package, and only when a server is built.
"""
