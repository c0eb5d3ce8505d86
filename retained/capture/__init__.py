"""Capture: a host's hook events become records, and a ledger accounts for every event.

- ``events``: a host's event (Claude Code's hook JSON, Codex CLI's ``notify``,
  the generic shape) parsed into the turns worth keeping, each with its id;
- ``scope``: the project's identity (the git common directory, else the directory);
- ``ledger``: one line per event and what became of it; the counts;
- ``spool``: events that could not be written now, kept (0600) for a retry;
- ``run``: one event through the guard and the one append pipeline;
- ``transcript``: Claude Code's transcripts read back as the same events.

Library code: no printing, no environment. ``retained capture`` (cli) is the edge.
"""
