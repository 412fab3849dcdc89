"""The files of a work tree that git does not track, found without walking all of it.

``git ls-files --others`` reads every directory of the tree and checks every name
against the index: 270 ms of CPU at 130,000 files, beside a ``git grep`` that keeps both
cores of a small machine busy (bench/RESULTS.md). This module remembers, for each
directory, its stat stamp (inode, mtime, ctime) and which of its files git did not
track when it was last listed. Creating, removing or renaming an entry moves the stamp,
so a directory whose stamp held has the same names: a call costs one ``lstat`` per
directory, and asks git (``git ls-files -o -- PATHS``) only about the few files that
may not be tracked: those of directories that moved, and those not tracked last time.
When none moved and none was left untracked, git is not run at all.

Rules, each for a way the answer could otherwise go wrong:

* Files git ignores are remembered with the untracked ones and classified again on
  every call (``--exclude-standard``): ignore rules can change without any stamp moving.
* What git tracks can change without a directory moving: git run by hand can drop a
  path from the index and leave its file. What the cache knows of untracked files holds
  while every index write since it was built was the committer's
  (:mod:`jpfs.infra.indexepoch`), who only drops paths whose files are gone; otherwise
  git lists the tree's untracked files once, and the stamps, which say nothing of the
  index, are kept.
* A stamp is trusted only once settled (:mod:`jpfs.infra.fsclock`): a directory changed
  within a clock tick of its listing is listed again next time.
* Entries named ``.git`` are skipped, as git does; a directory holding one is another
  repository, which git reports as ``dir/`` and so does this.

It is never the source of truth: a missing, stale or unreadable cache is rebuilt from
the files (what a plain ``git ls-files --others`` costs, plus a walk), and it is
machine-local (``.jpfs/local/untracked.bin``).
"""

from __future__ import annotations

import marshal
import os
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jpfs.errors import GitError
from jpfs.infra import fsclock, indexepoch, textfile
from jpfs.infra.git import dirs, runner

FILE = "untracked.bin"
CLOCK = "untracked.clock"  # touched at each call: the file system's time
VERSION = 1
# Paths named to one ``git ls-files`` (each adds to its pathspec matching); past
# MAX_NAMED in all, one run over the whole tree is cheaper.
BATCH = 400
MAX_NAMED = 2000
TIMEOUT = 120.0
_UNSETTLED = (-1, -1, -1)  # matches no directory: listed again next time

Stamp = tuple[int, int, int]


def untracked(root: Path, tops: Sequence[str] = ("",), *, cache_dir: Path | None) -> list[str]:
    """What ``git ls-files --others --exclude-standard`` prints for ``tops`` (directories
    relative to ``root``, "" for all of it), through ``cache_dir``'s cache."""
    return Scan(root, cache_dir).run(tops)


class Scan:
    """One look at the tree through the cache, which it then writes back."""

    def __init__(self, root: Path, cache_dir: Path | None) -> None:
        self.root = root
        self.gitdir = dirs.git_dir(root)
        self.path = cache_dir / FILE if cache_dir is not None else None
        # The cache as read: every directory ("" for the root), their stamps (inode,
        # mtime, ctime) flat in the same order (the fastest to read back), and the names
        # git did not track by directory ("" for another repository's directory).
        self.keys: list[str] = []
        self.flat: list[int] = []
        self.others: dict[str, tuple[str, ...]] = {}
        # What this look found: directories listed (their new stamp) or gone (None).
        self.stamps: dict[str, Stamp | None] = {}
        self.nested: list[str] = []  # directories found to be other repositories
        self.dirty = False

    def run(self, tops: Sequence[str]) -> list[str]:
        tops = list(dict.fromkeys(t.strip("/") for t in tops))
        spec = [f":(literal){t}" if t else "." for t in tops]
        if self.path is None or self.gitdir is None:
            return _ls_files(self.root, ["--exclude-standard"], spec)
        index = indexepoch.current(self.gitdir)
        horizon = fsclock.settled_before(self.path.with_name(CLOCK))
        loaded = self._load(index)
        if loaded == "none":
            # Nothing to go by: git lists the tree (twice, for what it ignores) while
            # the walk takes every directory's stamp.
            procs = [_start(self.root, [], spec), _start(self.root, ["--exclude-standard"], spec)]
            try:
                _, seen = self._walk(tops, horizon)
                others, found = (_finish(p) for p in procs)
            finally:
                runner.stop(procs)
            self._remember(others, seen)
            self._save(index)
            return found
        if loaded == "stamps":
            # Someone else wrote the index: what git tracks may have changed anywhere,
            # so git lists the whole tree's untracked files once (while the walk runs);
            # the directories' stamps still say which need listing again.
            procs = [_start(self.root, [], ["."])]
            try:
                _, seen = self._walk(tops, horizon)
                others = _finish(procs[0])
            finally:
                runner.stop(procs)
            self.dirty = True
        else:
            named, seen = self._walk(tops, horizon)
            if len(named) > MAX_NAMED:
                others = _ls_files(self.root, [], spec)
            else:
                others = self._named([], named)
        self._remember(others, seen)
        self._save(index)
        mine = others if "" in tops else [o for o in others if _below(o, tops)]
        if len(mine) > MAX_NAMED:
            return _ls_files(self.root, ["--exclude-standard"], spec)
        return self._named(["--exclude-standard"], mine)

    # -- the walk ---------------------------------------------------------------------

    def _walk(self, tops: list[str], horizon: int) -> tuple[list[str], set[str]]:
        """``lstat`` every known directory below ``tops``, list those whose stamp moved
        and the new ones. Returns the paths that may be untracked, and the directories
        they are in."""
        named: list[str] = []
        seen: set[str] = set()
        queue: list[str] = []
        gone: list[str] = []
        everything = "" in tops
        wanted = set(tops)
        prefixes = tuple(t + "/" for t in tops)
        others = self.others
        stamps = self.stamps
        lstat = os.lstat
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            # Relative to an open root: a shorter path to resolve per call.
            it = iter(self.flat)
            for rel, ino, mtime, ctime in zip(self.keys, it, it, it, strict=True):
                if not everything and rel not in wanted and not rel.startswith(prefixes):
                    continue
                wanted.discard(rel)
                try:
                    st = lstat(rel or ".", dir_fd=fd)
                except (FileNotFoundError, NotADirectoryError):
                    gone.append(rel)
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    gone.append(rel)
                elif st.st_ino != ino or st.st_mtime_ns != mtime or st.st_ctime_ns != ctime:
                    queue.append(rel)
                elif rel in others:
                    seen.add(rel)
                    base = rel + "/" if rel else ""
                    named += [base + name for name in others[rel]]
            if gone:
                # Below a directory now gone or a link, a path resolves elsewhere, if at
                # all (lstat follows links on the way): forget all of it.
                under = tuple(g + "/" for g in gone)
                for rel in [*gone, *(k for k in self.keys if k.startswith(under))]:
                    stamps[rel] = None
                named = [n for n in named if not n.startswith(under)]
                queue = [q for q in queue if not q.startswith(under)]
                seen = {d for d in seen if not d.startswith(under)}
            queue += wanted  # tops not known yet
            known = set(self.keys) if queue else set()
            while queue:
                rel = queue.pop()
                listed = self._list(fd, rel, horizon)
                if listed is None:
                    stamps[rel] = None
                    continue
                files, children = listed
                base = rel + "/" if rel else ""
                seen.add(rel)
                named += [base + name for name in files]
                queue += [
                    base + c for c in children if base + c not in known and base + c not in stamps
                ]
        finally:
            os.close(fd)
        return named, seen

    def _list(self, fd: int, rel: str, horizon: int) -> tuple[list[str], list[str]] | None:
        """A directory's files and subdirectories, its stamp taken first (an entry made
        while it is read moves the stamp past the one kept)."""
        try:
            st = os.lstat(rel or ".", dir_fd=fd)
            if not stat.S_ISDIR(st.st_mode):
                return None
            with os.scandir(os.path.join(self.root, rel) if rel else self.root) as entries:
                files: list[str] = []
                children: list[str] = []
                for entry in entries:
                    if entry.name == ".git":
                        if rel:  # another repository: git shows "dir/" and no more
                            self.nested.append(rel)
                            files, children = [""], []
                            break
                    elif entry.is_dir(follow_symlinks=False):
                        children.append(entry.name)
                    else:
                        files.append(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        self.stamps[rel] = stamp if max(stamp[1], stamp[2]) < horizon else _UNSETTLED
        self.dirty = True
        return files, children

    def _remember(self, others: list[str], seen: set[str]) -> None:
        """Keep, for each directory whose files were looked at, those git did not track."""
        by_dir: dict[str, list[str]] = {}
        for path in others:
            if path.endswith("/"):  # another repository, kept as its own directory's
                by_dir.setdefault(path[:-1], []).append("")
            else:
                head, _, name = path.rpartition("/")
                by_dir.setdefault(head, []).append(name)
        for rel in seen | by_dir.keys():
            names = by_dir.get(rel)
            kept = tuple(names) if names else None
            if self.others.get(rel) != kept:
                self.dirty = True
                if kept is None:
                    self.others.pop(rel, None)
                else:
                    self.others[rel] = kept

    def _named(self, options: list[str], paths: list[str]) -> list[str]:
        out: list[str] = []
        for at in range(0, len(paths), BATCH):
            spec = [f":(literal){p}" for p in paths[at : at + BATCH]]
            out += _ls_files(self.root, options, spec)
        return out

    # -- the cache file ---------------------------------------------------------------

    def _load(self, index: indexepoch.View) -> str:
        """Read the cache: "all" of it holds for ``index`` (now), only its "stamps"
        (someone else wrote the index since), or "none"."""
        assert self.path is not None
        try:
            # marshal: plain data only (no code runs on load), and flat lists of str and
            # int read back 6x faster than a dict of tuples; the file is this machine's,
            # written by this Python (VERSION guards).
            data: Any = marshal.loads(self.path.read_bytes())
            keys, flat, others = data["keys"].split("\n"), data["flat"], data["others"]
            ok = (
                data["version"] == (VERSION, sys.version_info[:2])
                and isinstance(flat, list)
                and len(flat) == 3 * len(keys)
                and isinstance(others, dict)
            )
            holds = ok and indexepoch.holds(_view(data["index"]), index)
        except (OSError, ValueError, EOFError, TypeError, KeyError, AttributeError):
            return "none"
        if not ok:
            return "none"
        self.keys, self.flat = keys, flat
        if not holds:
            return "stamps"
        self.others = others
        return "all"

    def _save(self, index: indexepoch.View) -> None:
        assert self.path is not None
        if not self.dirty:
            return
        keys, flat = self._merged()
        known = set(keys)
        marker, stamp = index
        data = {
            "version": (VERSION, sys.version_info[:2]),
            "index": (tuple(marker) if marker else None, stamp),
            "keys": "\n".join(keys),
            "flat": flat,
            "others": {k: v for k, v in self.others.items() if k in known},
        }
        try:
            textfile.write_atomic(self.path, marshal.dumps(data))
        except OSError:
            pass  # a machine-local cache: the next look lists the tree again

    def _merged(self) -> tuple[list[str], list[int]]:
        """The directories and their stamps, as read, with what this look found."""
        stamps = self.stamps
        position = {rel: i for i, rel in enumerate(self.keys)}
        moved = [(position[r], s) for r, s in stamps.items() if s is not None and r in position]
        if len(moved) == len(stamps) and not self.nested:
            # Only stamps moved (a busy record's usual case): change them in place.
            flat = self.flat
            for i, new in moved:
                flat[3 * i : 3 * i + 3] = new
            return self.keys, flat
        old = dict(zip(self.keys, zip(*[iter(self.flat)] * 3, strict=True), strict=True))
        nested = tuple(n + "/" for n in self.nested)
        keys: list[str] = []
        flat = []
        for rel in dict.fromkeys([*self.keys, *stamps]):
            stamp = stamps[rel] if rel in stamps else old[rel]
            if stamp is None or (nested and rel.startswith(nested)):
                continue
            keys.append(rel)
            flat += stamp
        return keys, flat


def _below(path: str, tops: list[str]) -> bool:
    return any(path == t or path.startswith(t + "/") for t in tops)


def _view(raw: Any) -> indexepoch.View:
    marker, index = raw
    return (indexepoch.Marker(*marker) if marker else None, tuple(index) if index else None)


def _start(root: Path, options: list[str], spec: list[str]) -> subprocess.Popen[bytes]:
    args = ["-c", "core.quotePath=false", "ls-files", "-z", "-o", *options, "--", *spec]
    return runner.start(root, args)


def _finish(proc: subprocess.Popen[bytes]) -> list[str]:
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise GitError(f"git ls-files took over {TIMEOUT:.0f} s") from exc
    if proc.returncode != 0:
        raise runner.failure(["ls-files"], proc.returncode, err)
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def _ls_files(root: Path, options: list[str], spec: list[str]) -> list[str]:
    if not spec:
        return []
    proc = _start(root, options, spec)
    try:
        return _finish(proc)
    finally:
        runner.stop([proc])
