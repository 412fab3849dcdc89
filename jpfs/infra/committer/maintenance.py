"""Background repository maintenance, never blocking a commit.

Every ``maintenance_every`` commits the committer runs ``git gc --auto`` and ``git
commit-graph write --reachable --split``; every 25 packfiles it writes, a geometric roll-up
keeps their number logarithmic, far below the 50 at which any ``git gc --auto`` would
repack everything. Each run then sweeps debris of killed processes (temp files, dead lock
markers, registrations that outlived their locks).

The roll-up is ``git repack -d --geometric=2`` without its last step, ``git
prune-packed``: that one also removes every empty ``objects/xx/`` fan-out directory,
and a user's ``git add`` creating a loose object there at that moment fails ("unable to
create temporary file"). So the packs to roll up are chosen as git chooses them (by size
here), ``git pack-objects --stdin-packs`` writes their union, and only then are they
removed; loose objects and their directories are never touched. A repository with a
multi-pack-index is left to git's own ``repack`` (which rewrites that index).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from jpfs.errors import GitError
from jpfs.infra.committer.lockfile import LockFile, lock_registrations, sweep_owner_file
from jpfs.infra.committer.objects import KEEP_MARK
from jpfs.infra.git import runner as git

log = logging.getLogger(__name__)

_MAINTENANCE: tuple[tuple[str, ...], ...] = (
    ("-c", "gc.autoDetach=false", "gc", "--auto", "--quiet"),
    ("commit-graph", "write", "--reachable", "--split", "--no-progress"),
)
# With a multi-pack-index, git's own geometric repack (which keeps that index true).
_REPACK: tuple[tuple[str, ...], ...] = (
    ("repack", "-d", "-q", "--geometric=2", "--no-write-bitmap-index", "--write-midx"),
)
# git's order (unlink_pack_path): a kill midway leaves an .idx without its .pack, which
# git skips as it finds packs.
_PACK_FILES = (".pack", ".idx", ".rev", ".bitmap", ".mtimes")


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
        if (self._pack_dir / "multi-pack-index").exists():
            self._start(_REPACK)
        else:
            self._start((), roll_up=True)

    def wait(self) -> None:
        """Wait for a running maintenance to end."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def _start(self, commands: Sequence[Sequence[str]] = (), roll_up: bool = False) -> None:
        if self._thread is not None and self._thread.is_alive():
            return  # the next trigger runs it again
        thread = threading.Thread(
            target=self._run,
            args=(commands or (() if roll_up else _MAINTENANCE), roll_up),
            name="jpfs-git-maintenance",
            daemon=True,
        )
        self._thread = thread
        thread.start()

    @property
    def _pack_dir(self) -> Path:
        return self._commondir / "objects" / "pack"

    def _run(self, commands: Sequence[Sequence[str]], roll_up: bool = False) -> None:
        if roll_up:
            try:
                self.roll_up()
            except (OSError, GitError) as exc:
                log.debug("pack roll-up failed: %s", exc)
        for args in commands:
            try:
                git.run_bytes(self._root, args, check=False, timeout=600)
            except GitError as exc:
                log.debug("maintenance command git %s failed: %s", " ".join(args), exc)
        self.sweep_debris()

    def roll_up(self) -> None:
        """Replace the small packfiles by one, chosen as ``git repack --geometric=2 -d``
        chooses (by size, where git counts objects), leaving loose objects alone."""
        names = rolled_up(packs_by_size(self._pack_dir))
        if len(names) < 2:
            return
        git.run_bytes(
            self._root,
            ["pack-objects", "-q", "--stdin-packs", str(self._pack_dir / "pack")],
            input="".join(f"{name}.pack\n" for name in names).encode(),
            timeout=600,
        )
        # The new pack holds every object of these (all of them, reachable or not), so
        # removing them loses nothing; one that got a .keep meanwhile stays.
        for name in names:
            if (self._pack_dir / f"{name}.keep").exists():
                continue
            for ext in _PACK_FILES:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._pack_dir / f"{name}{ext}")

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


def packs_by_size(pack_dir: Path) -> list[tuple[int, str]]:
    """``(size, "pack-<id>")`` of every complete pack that may be rolled up, smallest
    first: not kept (ours before their ref moves, or the user's), not a promisor pack."""
    out: list[tuple[int, str]] = []
    with contextlib.suppress(OSError):
        names = {entry.name for entry in os.scandir(pack_dir)}
        for name in names:
            stem = name.removesuffix(".pack")
            if stem == name or not stem.startswith("pack-"):
                continue
            if {f"{stem}.idx"} - names or {f"{stem}.keep", f"{stem}.promisor"} & names:
                continue
            with contextlib.suppress(FileNotFoundError):
                out.append((os.stat(pack_dir / name).st_size, stem))
    return sorted(out)


def rolled_up(packs: list[tuple[int, str]], factor: int = 2) -> list[str]:
    """The packs git's ``--geometric=factor`` would roll into one: all below the longest
    run at the top where each pack is at least ``factor`` times the one before, plus any
    pack of that run smaller than ``factor`` times what is rolled up so far."""
    sizes = [size for size, _ in packs]
    split = 0
    for i in range(len(sizes) - 1, 0, -1):
        if sizes[i] < factor * sizes[i - 1]:
            split = i
            break
    total = sum(sizes[:split])
    while split < len(sizes) and sizes[split] < factor * total:
        total += sizes[split]
        split += 1
    return [name for _, name in packs[:split]]
