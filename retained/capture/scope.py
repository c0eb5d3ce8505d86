"""The project's identity: the scope captured turns are written under, and why.

`identity` finds it; `project` and `read_scope` are what a command captures
under and reads. Standard library only, and no ``typing``: the session-start
brief imports it. No ``git`` process is started (``.git`` is read directly),
so the hook stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SCOPE_FILE = ".retained-scope"
SCOPE_CHARS_MAX = 200  # the MCP tools' scope argument takes at most this many characters
_PARENTS_MAX = 64  # a bound on the walk up the directory tree


class Identity:
    """A project's scope and how it was found (``source``: explicit, file, git or directory).

    A plain class (no dataclass, no typing): the session-start brief imports this module.
    """

    __slots__ = ("git_common_dir", "scope", "source", "why")

    def __init__(self, scope: str, source: str, why: str, git_common_dir: str | None = None) -> None:
        self.scope = scope
        self.source = source
        self.why = why
        self.git_common_dir = git_common_dir

    def to_dict(self) -> dict[str, str | None]:
        return {"scope": self.scope, "source": self.source, "why": self.why, "git_common_dir": self.git_common_dir}


def _read_first_line(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline(SCOPE_CHARS_MAX * 4 + 1)
    except (OSError, UnicodeDecodeError):
        return None
    line = line.strip()
    return line[:SCOPE_CHARS_MAX] or None


def git_common_dir(start: Path) -> tuple[Path, Path] | None:
    """``(worktree top, common git directory)`` for a directory inside a git repository, else None.

    No ``git`` process: ``.git`` (a directory, or a file naming the worktree's git
    directory, whose ``commondir`` names the common one) is read directly.
    """
    here = start
    for _ in range(_PARENTS_MAX):
        dot = here / ".git"
        if dot.is_dir():
            return here, _common(dot)
        if dot.is_file():
            gitdir = _gitdir_of(dot)
            if gitdir is not None:
                return here, _common(gitdir)
        if (here / "HEAD").is_file() and (here / "objects").is_dir() and (here / "refs").is_dir():
            return here, here  # a bare repository (or inside a git directory)
        if here.parent == here:
            return None
        here = here.parent
    return None


def _gitdir_of(dot_git_file: Path) -> Path | None:
    line = _read_first_line(dot_git_file) if dot_git_file.stat().st_size < 4096 else None
    if not line or not line.startswith("gitdir:"):
        return None
    target = Path(line[len("gitdir:"):].strip())
    return (dot_git_file.parent / target).resolve() if not target.is_absolute() else target


def _common(gitdir: Path) -> Path:
    pointer = gitdir / "commondir"
    if pointer.is_file():
        line = _read_first_line(pointer)
        if line:
            target = Path(line)
            return (gitdir / target).resolve() if not target.is_absolute() else target.resolve()
    return gitdir.resolve()


def identity(cwd: str | os.PathLike[str], explicit: str | None = None) -> Identity:
    """The project identity of ``cwd``: the first that applies of the four in docs/capture.md#the-scope-the-project.

    ``explicit`` is ``--scope`` or ``RETAINED_SCOPE`` (read by the edge). A
    bare repository is named by its common directory itself.
    """
    if explicit:
        return Identity(explicit[:SCOPE_CHARS_MAX], "explicit", "given with --scope or RETAINED_SCOPE")
    start = Path(cwd).expanduser()
    try:
        start = start.resolve()
    except OSError:
        pass
    repo = git_common_dir(start)
    top = repo[0] if repo is not None else None
    here = start
    for _ in range(_PARENTS_MAX):
        named = here / SCOPE_FILE
        if named.is_file():
            value = _read_first_line(named)
            if value:
                return Identity(value, "file", f"{named} names it")
        if here == top or here.parent == here:
            break
        here = here.parent
    if repo is not None:
        worktree, common = repo
        name = common.parent if common.name == ".git" else common
        shared = "" if worktree == name else f" ({worktree} is a worktree of it)"
        found = Identity(str(name), "git", f"{start} is inside the git repository whose common directory is {common}{shared}",
                         git_common_dir=str(common))
    else:
        found = Identity(str(start), "directory", f"{start} is not inside a git repository: the directory is the project")
    if len(found.scope) > SCOPE_CHARS_MAX:
        found.scope = "…" + found.scope[-(SCOPE_CHARS_MAX - 1):]
    return found


OFF_WORDS = ("0", "off", "false", "no")  # RETAINED_CAPTURE values that turn capture, and the project's reads, off


def project(environ: Mapping[str, str], cwd: str | os.PathLike[str]) -> Identity | None:
    """The project a command run in ``cwd`` reads and captures under, or None when ``RETAINED_CAPTURE`` is off.

    The one switch for both: with capture off nothing is filed under the
    project, so the brief and ``retained search`` read every scope, as before
    issue 26. ``RETAINED_SCOPE`` names the project explicitly.
    """
    if environ.get("RETAINED_CAPTURE", "").strip().lower() in OFF_WORDS:
        return None
    return identity(cwd, environ.get("RETAINED_SCOPE") or None)


def read_scope(given: str | None, project_scope: str | None, every: bool = False) -> tuple[str | None, bool]:
    """``(scope, and_unscoped)`` that ``retained search`` and ``retained brief`` read: ``given`` (``--scope``), else
    every scope (``every``: ``--all-scopes``, or no ``project_scope``: capture off), else the project's together
    with the records that have no scope (``index.schema.Filter``)."""
    if given is not None:
        return given, False
    if every or project_scope is None:
        return None, False
    return project_scope, True
