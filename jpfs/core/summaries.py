"""What listings show of each conversation, remembered between calls.

``jpfs conversation ls`` over 10,000 conversations would otherwise parse every
``conversation.toml``, every result and last event, and derive every state: seconds,
growing with the record. Each conversation's :class:`~jpfs.core.tree.Info` is kept in
``.jpfs/local/summaries.bin`` under a signature of the files it was derived from
(size, mtime, ctime and inode of ``conversation.toml``, ``task.md``, ``questions.md``,
``answers.md``, ``result.md`` and the ``events/`` directory, whose mtime moves when an
event file is added). A listing then stats those files and re-reads only the
conversations whose signature moved: its cost grows with what changed.

An event file edited in place (events are written once; only a human would) is not
seen until something else in the conversation changes; the daemon's own signature
(:mod:`jpfs.services.daemon.seen`) also covers the last event, at one listdir more.

It is never the source of truth: a missing, stale or unreadable cache is rebuilt from
the files, and it is machine-local (``.jpfs/local``), never committed or cloned.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jpfs.infra import textfile

FILE = "summaries.bin"
VERSION = 2
_NAMES = ("conversation.toml", "task.md", "questions.md", "answers.md", "result.md", "events")
WATCHED = frozenset(_NAMES)

Signature = list[list[int] | None]


def signature(entries: Mapping[str, os.DirEntry[str]]) -> Signature:
    """The signature of a conversation directory, from its entries (a scandir)."""
    out: Signature = []
    for name in _NAMES:
        entry = entries.get(name)
        if entry is None:
            out.append(None)
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            out.append(None)
            continue
        # ctime too: the kernel sets it on every change and nobody can set it back.
        out.append([st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino])
    return out


class Summaries:
    """A cache of per-conversation summaries; :meth:`save` writes it back if it changed."""

    def __init__(self, local_dir: Path | None, name: str = FILE) -> None:
        self.path = local_dir / name if local_dir is not None else None
        self.entries: dict[str, list[Any]] = {}
        self.dirty = False
        if self.path is None:
            return
        try:
            # marshal: plain data only (no code runs on load) and 4x faster to read than
            # JSON; the file is this machine's, written by this Python (VERSION guards).
            data = marshal.loads(self.path.read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            return
        if isinstance(data, dict) and data.get("version") == (VERSION, sys.version_info[:2]):
            entries = data.get("entries")
            self.entries = entries if isinstance(entries, dict) else {}

    def get(self, conv_id: str, sig: Signature) -> dict[str, Any] | None:
        entry = self.entries.get(conv_id)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == sig:
            value = entry[1]
            return value if isinstance(value, dict) else None
        return None

    def put(self, conv_id: str, sig: Signature, value: dict[str, Any]) -> None:
        self.entries[conv_id] = [sig, value]
        self.dirty = True

    def save(self, seen: set[str] | None = None) -> None:
        """Write back (dropping entries of conversations not ``seen``, when a listing of
        the whole tree says which exist); a machine-local cache, so a failure is ignored."""
        if seen is not None and set(self.entries) - seen:
            self.entries = {k: v for k, v in self.entries.items() if k in seen}
            self.dirty = True
        if self.path is None or not self.dirty:
            return
        data = {"version": (VERSION, sys.version_info[:2]), "entries": self.entries}
        try:
            textfile.write_atomic(self.path, marshal.dumps(data))
            self.dirty = False
        except OSError:
            pass
