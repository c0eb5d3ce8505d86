"""The version of retained, written once (pyproject.toml reads it for the package metadata).

A module of its own, importing nothing, so that the Store can read it
without importing the package back (no import cycle).
"""

__version__ = "0.1.0"
