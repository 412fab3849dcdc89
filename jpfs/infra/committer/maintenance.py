"""Background repository maintenance, never blocking a commit.

Every ``maintenance_every`` commits the committer runs ``git gc --auto`` and ``git
commit-graph write --reachable --split``; every 25 packfiles it writes, a ``git repack -d
--geometric=2`` keeps their number logarithmic, far below the 50 at which any ``git gc
--auto`` would repack everything. Each run then sweeps debris of killed processes (temp
files, dead lock markers, registrations that outlived their locks).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from jpfs.infra.committer.lockfile import LockFile, lock_registrations, sweep_owner_file
from jpfs.infra.committer.objects import KEEP_MARK

log = logging.getLogger(__name__)

_MAINTENANCE: tuple[tuple[str, ...], ...] = (
    ("git", "-c", "gc.autoDetach=false", "gc", "--auto", "--quiet"),
    ("git", "commit-graph", "write", "--reachable", "--split", "--no-progress"),
)
# Rolls our small packfiles up so their number stays logarithmic, far below the 50 at
# which any `git gc --auto` (run by every `git commit`) would repack everything.
_REPACK: tuple[tuple[str, ...], ...] = (
    ("git", "repack", "-d", "-q", "--geometric=2", "--no-write-bitmap-index"),
)


class Maintenance:
    """Runs git's housekeeping for one repository on a background thread, one at a time."""

    def __init__(
        self, root: Path, gitdir: Path, commondir: Path, private: Path, common_private: Path
    ) -> None:
        self._root = root
        self._gitdir = gitdir
        self._commondir = commondir
        self._private = private
        self._common_private = common_private
        self._owners = common_private / "locks"
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run ``git gc --auto`` and write the commit-graph."""
        self._start()

    def repack(self) -> None:
        """Roll small packfiles up (geometric repack)."""
        self._start(_REPACK)

    def wait(self) -> None:
        """Wait for a running maintenance to end."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def _start(self, commands: Sequence[Sequence[str]] = ()) -> None:
        if self._thread is not None and self._thread.is_alive():
            return  # the next trigger runs it again
        thread = threading.Thread(
            target=self._run,
            args=(commands or _MAINTENANCE,),
            name="jpfs-git-maintenance",
            daemon=True,
        )
        self._thread = thread
        thread.start()

    def _run(self, commands: Sequence[Sequence[str]]) -> None:
        for argv in commands:
            try:
                subprocess.run(
                    argv,
                    cwd=self._root,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                    timeout=600,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                log.debug("maintenance command %s failed: %s", argv, exc)
        self.sweep_debris()

    def sweep_debris(self) -> None:
        """Remove temp files and lock-owner files left by killed processes."""
        cutoff = time.time() - 3600
        for directory, prefixes in (
            (self._private, ("tmp-",)),
            (self._common_private, ("tmp-", "tmp_pack_jpfs_", "tmp_idx_jpfs_")),
            (self._commondir / "objects", ("tmp_object_git2_", "tmp_obj_jpfs_")),
            (self._commondir / "objects" / "pack", ("tmp_pack_jpfs_", "tmp_idx_jpfs_")),
        ):
            with contextlib.suppress(OSError):
                for entry in os.scandir(directory):
                    if entry.name.startswith(prefixes) and entry.stat().st_mtime < cutoff:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
        # A .keep of ours outlives its commit only if the process was killed mid-commit;
        # an hour later its objects are referenced or garbage, so gc may have them.
        with contextlib.suppress(OSError):
            for entry in os.scandir(self._commondir / "objects" / "pack"):
                if entry.name.endswith(".keep") and entry.stat().st_mtime < cutoff:
                    with contextlib.suppress(OSError), open(entry.path, "rb") as fh:
                        ours = fh.read(64).startswith(KEEP_MARK)
                    if ours:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
        # A commit that finds nothing to change takes no index lock, so one that a killed
        # jpfs process held would stay, and block `git` in the work tree, until the next
        # commit with changes: broken here, only if provably ours and its owner dead.
        with contextlib.suppress(OSError):
            LockFile(self._gitdir / "index", self._owners).break_if_stale()
        with contextlib.suppress(OSError):
            live = lock_registrations(self._gitdir, self._commondir)
            for entry in os.scandir(self._owners):
                sweep_owner_file(Path(entry.path), live)
