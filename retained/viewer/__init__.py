"""The read-only web viewer of a store (``retained view``): timeline, search, record, health, brief.

``app`` holds the routes and the ``retained view`` entry, ``pages`` the
HTML (every value escaped), ``style.css`` the only stylesheet. Imports
Starlette and uvicorn (they come with the mcp package); importing
``retained`` never imports this package.
"""
