"""What listings show of each conversation, remembered between calls.

``jpfs conversation ls`` over 10,000 conversations would otherwise parse every
``conversation.toml``, every result and last event, and derive every state: seconds,
growing with the record. :meth:`Summaries.walk` walks the tree and says, for each
conversation, whether what a listing derived from its files last time still holds; the
listing re-reads only those whose files moved, so its cost grows with what changed.
Kept in ``.jpfs/local/summaries.bin`` (``jpfs tree``'s in ``tree-summaries.bin``).

A conversation's signature is the stat identity (inode, mtime, ctime) of its directory,
of its ``events/`` directory and of its ``inbox/`` (mail arriving, mail marked read: a
tree shows the mail waiting), and the stat (plus size) of the files people edit in
place: ``conversation.toml`` (title, hidden), ``questions.md`` and ``answers.md``.
Every jpfs write is a new file renamed into place (an event, ``result.md``, a rewritten
record), which sets the mtime and ctime of the directory it lands in, so the directory
covers all of them and their creation and removal; ctime because nobody can set it back.
The same stamp of a directory also keeps its listing (its subdirectories, which of those
files it holds), so an unchanged conversation costs a ``stat`` call for its directory
and one for each of those it holds, and no scandir.

Not seen until something else in the conversation changes: an event file or
``result.md`` rewritten in place (only jpfs writes them, by rename), or ``task.md``
(a listing shows whether it exists, never what it says). The daemon's own signature
(:mod:`jpfs.services.daemon.seen`) also covers the last event.

A stamp is trusted later only if it had settled when the walk began
(:mod:`jpfs.infra.fsclock`): a directory or conversation changed more recently is
listed or read again next time, until its files have held still.

It is never the source of truth: a missing, stale or unreadable cache is rebuilt from
the files, and it is machine-local (``.jpfs/local``), never committed or cloned.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jpfs.core import ids
from jpfs.infra import fsclock, textfile

FILE = "summaries.bin"
VERSION = 4
CLOCK = "summaries.clock"  # touched at each walk: the file system's time
_MARKS = frozenset({"conversation.toml", "task.md"})
# What a summary depends on besides the directory's own entries: new events, mail, and
# files people edit in place. Their order is the signature's.
_WATCHED = ("events", "inbox", "conversation.toml", "questions.md", "answers.md")

Signature = tuple[int, ...]
# A directory as last listed: [stamp, is a conversation, which of _WATCHED it holds,
# its subdirectories (sorted), the conversation's signature, its summary].
_Node = list[Any]


class Summaries:
    """A cache of per-conversation summaries; :meth:`save` writes it back if it changed."""

    def __init__(self, local_dir: Path | None, name: str = FILE) -> None:
        self.path = local_dir / name if local_dir is not None else None
        self.nodes: dict[str, _Node] = {}
        self.dirty = False
        self._visited: set[str] | None = None
        self._horizon = 0
        # Directories the last walk left out: too deep to be a conversation (see walk).
        self.left_out: list[str] = []
        # Each directory the last walk visited -> its child directories that can be
        # conversations, sorted (jpfs.core.scope.children's names, listed once).
        self.levels: dict[str, list[str]] = {}
        if self.path is None:
            return
        try:
            # marshal: plain data only (no code runs on load) and 4x faster to read than
            # JSON; the file is this machine's, written by this Python (VERSION guards).
            data = marshal.loads(self.path.read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            return
        if isinstance(data, dict) and data.get("version") == (VERSION, sys.version_info[:2]):
            nodes = data.get("nodes")
            self.nodes = nodes if isinstance(nodes, dict) else {}

    def walk(
        self, conv_root: Path, under: str | None = None
    ) -> Iterator[tuple[str, Signature, Any]]:
        """Every conversation below ``under`` (exclusive), parent first, children sorted:
        its id, its signature now and its summary if its files have not changed since
        one was :meth:`put`, else None. Symlinked directories are never followed: they
        could lead out of the tree. A directory deeper than an id may be is not walked;
        one holding a conversation is named in :attr:`left_out`, for the listing to say
        so (:func:`jpfs.core.tree.left_out_note`).
        """
        self._horizon = self._now()
        visited: set[str] = set()
        self._visited = visited if under is None else None
        self.left_out = []
        self.levels = levels = {}
        nodes = self.nodes
        start = conv_root.joinpath(*under.split("/")) if under else conv_root
        stack: list[tuple[str, str, int]] = [(under or "", str(start), ids.depth(under or ""))]
        sep = os.sep
        while stack:
            rel, path, depth = stack.pop()
            visited.add(rel)
            try:
                st = os.lstat(path) if rel != (under or "") else os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            node = nodes.get(rel)
            if not isinstance(node, list) or len(node) != 6 or node[0] != stamp:
                node = self._list(rel, path, stamp, node)
                if node is None:
                    continue
            levels[rel] = node[3]
            base = f"{rel}/" if rel else ""
            if depth < ids.MAX_DEPTH:
                for child in reversed(node[3]):
                    stack.append((base + child, path + sep + child, depth + 1))
            else:
                # Deeper ids are refused (ids.MAX_DEPTH): such a directory is left out,
                # and said, if a conversation is in it.
                self.left_out += [
                    base + child for child in node[3] if holds_conversation(path + sep + child)
                ]
            if node[1] and rel != (under or ""):
                sig = stamp + _stats(path + sep, node[2])
                yield rel, sig, (node[5] if node[4] == sig else None)

    def _now(self) -> int:
        """Stamps older than this (ns) cannot be repeated by a later change."""
        return fsclock.settled_before(None if self.path is None else self.path.with_name(CLOCK))

    def _list(self, rel: str, path: str, stamp: Signature, old: Any) -> _Node | None:
        is_conv = False
        watched: list[str] = []
        children: list[str] = []
        try:
            with os.scandir(path) as it:
                for entry in it:
                    name = entry.name
                    if name in _MARKS:
                        is_conv = True
                    if name in _WATCHED:
                        watched.append(name)
                    if ids.is_child_dir(entry):
                        children.append(name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        children.sort()
        watched.sort(key=_WATCHED.index)
        # An earlier summary stays, checked against the signature as before: it holds
        # the directory's stamp, so it matches only if nothing in the directory moved.
        sig, value = (old[4], old[5]) if isinstance(old, list) and len(old) == 6 else (None, None)
        settled = max(stamp[1], stamp[2]) < self._horizon
        # Not settled: an entry made in the same tick would not move the stamp, so the
        # directory is listed again next time.
        node: _Node = [stamp if settled else None, is_conv, watched, children, sig, value]
        self.nodes[rel] = node
        self.dirty = True
        return node

    def put(self, conv_id: str, sig: Signature, value: Any) -> None:
        """Remember ``value`` as what ``conv_id``'s files said when :meth:`walk` gave
        ``sig`` (read after it). Not kept while those files may still change unseen."""
        node = self.nodes.get(conv_id)
        if not isinstance(node, list) or len(node) != 6:
            return
        if -1 in sig or any(t >= self._horizon for t in _times(sig)):
            node[4] = node[5] = None
        else:
            node[4], node[5] = sig, value
        self.dirty = True

    def save(self) -> None:
        """Write back (dropping directories no longer there, when the walk covered the
        whole tree); a machine-local cache, so a failure is ignored."""
        if self._visited is not None and len(self.nodes) > len(self._visited):
            visited = self._visited
            self.nodes = {k: v for k, v in self.nodes.items() if k in visited}
            self.dirty = True
        if self.path is None or not self.dirty:
            return
        data = {"version": (VERSION, sys.version_info[:2]), "nodes": self.nodes}
        try:
            textfile.write_atomic(self.path, marshal.dumps(data))
            self.dirty = False
        except OSError:
            pass


def holds_conversation(path: str) -> bool:
    """Whether the directory ``path`` or one below it (links not followed) is a
    conversation: a directory a walk leaves out is said only when it holds one."""
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    if entry.name in _MARKS:
                        return True
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return False


def _stats(prefix: str, names: list[str]) -> Signature:
    out: list[int] = []
    for name in names:
        try:
            st = os.lstat(prefix + name)
        except OSError:
            out += (-1, -1, -1, -1)
            continue
        out += (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
    return tuple(out)


def _times(sig: Signature) -> Iterator[int]:
    yield sig[1]
    yield sig[2]
    for i in range(3, len(sig), 4):
        yield sig[i]
        yield sig[i + 1]
