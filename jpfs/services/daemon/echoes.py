"""The watcher's echoes of a merge: its events for the files a sync's merge wrote.

When the sync takes a peer's record in, git writes its files into the record worktree,
and the reconciler looks at once at those that call for work
(:meth:`Reconciler.take_merged`). The watcher then reports the same writes a debounce
later: each file, and each directory the merge created (whose files the reconciler
would look for, in case they predate the watch). Looked at again, every conversation
cost a lock, a read of its files and a comparison with the record: 30-190 ms for the
32 conversations a burst of new work brings, on the reconciler's thread while the runs
it had queued were starting, and the same for every peer's results merged at every
wave (bench/RESULTS.md, "Echoes").

An event is an echo when its file still holds, byte for byte, what the merge wrote (its
blob id is computed again at the event, as the reconciler itself would): nothing in it
is anyone's edit, since it is the record's. A directory's event is an echo when every
file under it is. Anything else (a save made after the merge, a file the merge did not
write, one that cannot be read) is not, and goes the usual way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from jpfs.infra.git.refs import Changed
from jpfs.services.daemon.edits import file_id
from jpfs.services.daemon.watcher import CLOSED, DELETED, MOVED_FROM

# Files remembered at most; the oldest half is forgotten beyond (an echo not recognised
# only costs a look).
KEEP = 8192


class Echoes:
    """What merges wrote, by root-relative path: (blob id, mode). One thread's (the
    reconciler's)."""

    def __init__(self, root: Path, keep: int = KEEP) -> None:
        self.root, self.keep = root, keep
        self._written: dict[str, tuple[str, int]] = {}
        self._dirs: set[str] = set()  # the directories of those files (a hint)

    def expect(self, changed: Iterable[Changed]) -> None:
        """A merge wrote (or deleted) these files."""
        for entry in changed:
            self._written.pop(entry.path, None)  # the newest write last in the order
            if not entry.deleted:
                self._written[entry.path] = (entry.blob, entry.mode)
                parts = entry.path.split("/")[:-1]
                self._dirs.update("/".join(parts[: n + 1]) for n in range(len(parts)))
        if len(self._written) > self.keep:
            for path in list(self._written)[: len(self._written) - self.keep // 2]:
                del self._written[path]
            self._dirs = {
                "/".join(p.split("/")[: n + 1]) for p in self._written for n in range(p.count("/"))
            }

    def heard(self, path: str, kind: str, is_dir: bool) -> bool:
        """Whether an event (:mod:`.watcher`'s ``kind``) at ``path`` is an echo of a
        merge's writes: then there is nothing to look at. A file that differs from what
        the merge wrote is forgotten: someone changed it since."""
        if kind in (DELETED, MOVED_FROM):
            return False
        if is_dir:
            return self._dir_echoes(path)
        written = self._written.get(path)
        if written is None:
            return False
        if file_id(self.root / path) == written:
            return True
        del self._written[path]
        return False

    def _dir_echoes(self, path: str) -> bool:
        if path not in self._dirs:
            return False  # most directories' events are not a merge's
        found = False
        for top, dirs, files in os.walk(self.root / path):
            dirs[:] = [d for d in dirs if d != ".git"]
            for name in files:
                rel = Path(top, name).relative_to(self.root).as_posix()
                if not self.heard(rel, CLOSED, False):
                    return False
                found = True
        return found
