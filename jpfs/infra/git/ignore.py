"""What git ignores in a work tree: untracked files its ignore rules match.

Asked of git itself (``.gitignore`` files, ``info/exclude``, ``core.excludesFile``), never
re-implemented. Outside a git work tree nothing is ignored. Names that are not valid
UTF-8 come back as ``os.fsdecode`` spells them, as ``os.scandir`` does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from jpfs.infra.git import runner


@dataclass(frozen=True)
class Ignored:
    """The ignored paths of a work tree at one moment (relative, ``/``-separated)."""

    files: frozenset[str]
    dirs: tuple[str, ...]  # ignored as a whole: everything below is ignored

    def __contains__(self, rel: object) -> bool:
        if not isinstance(rel, str):
            return False
        return rel in self.files or any(rel == d or rel.startswith(d + "/") for d in self.dirs)


def ignored(root: Path) -> Ignored:
    """Every ignored path under ``root``, ignored directories whole (one ``git ls-files``)."""
    proc = runner.start(
        root, ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"]
    )
    out, _err = proc.communicate()
    if proc.returncode != 0:  # not a git work tree
        return Ignored(frozenset(), ())
    names = [os.fsdecode(item) for item in out.split(b"\0") if item]
    files = frozenset(n for n in names if not n.endswith("/"))
    return Ignored(files, tuple(n.rstrip("/") for n in names if n.endswith("/")))


def is_ignored(root: Path, rel: str) -> bool:
    """Whether git ignores ``rel`` (a tracked file never is)."""
    proc = runner.start(root, ["check-ignore", "-q", "--", rel])
    proc.communicate()
    return proc.returncode == 0
