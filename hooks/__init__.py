"""The session-start hook, shipped inside the package as ``retained.hooks``.

``session-start.sh`` prints the memory brief for a host to add to a new
session; ``retained hook install --claude`` points Claude Code at this copy
(see retained.cli.hook_install). It holds no Python code: the hook is POSIX sh.
"""
