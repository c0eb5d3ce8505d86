"""The version of retained, written once.

``retained.__version__`` re-exports it; pyproject.toml reads it for the
package metadata; the Store's default client, the CLI's client and the MCP
server's ``serverInfo`` stamp it. A module of its own, importing nothing, so
that the Store can read it without importing the package back (no import
cycle).
"""

__version__ = "0.1.0"
