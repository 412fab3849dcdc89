"""Spending per conversation and per subtree, kept up to date at the cost of what changed.

A budget is checked before every model call, over the subtree of each conversation
that holds one; summing a subtree's files on every check would cost its size (214 ms
for a budget over 10,000 conversations, bench/RESULTS.md). :class:`Book` keeps instead:

- each conversation's own spending, read from its files (:mod:`jpfs.core.usage`); a
  conversation read again reads only its new event files, as they are never rewritten;
- every subtree's sum, changed by the difference whenever a conversation's own
  spending changes (the conversation and its ancestors: a few additions);
- the record's tip it has caught up with. Every call's usage is committed with it (an
  event, or ``usage.toml`` with its onboarding step), so when the tip moves the paths
  the commits in between touched (:class:`jpfs.infra.git.treediff.Changes`) name exactly
  the conversations to read again, whoever made them: this process, another one, a
  peer whose record was merged.

The first look reads the whole record once; with ``cache`` (``.jpfs/local/usage.bin``)
the per-conversation sums are kept between processes with the tip they hold for, so a
new process reads only what changed since. The cache is machine-local, never the
truth: a missing, stale or unreadable one is rebuilt from the files.

:meth:`Book.of` (one conversation, for listings) reads only that conversation.
"""

from __future__ import annotations

import marshal
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass, field
from pathlib import Path

from jpfs.core import ids, prices, tree
from jpfs.core.conversation import Conversation
from jpfs.core.usage import LEDGER, Spend, event_call, inherited, ledger_calls
from jpfs.errors import FormatError
from jpfs.infra import textfile
from jpfs.infra.git.treediff import Changes

VERSION = 1
SAVE_EVERY = 2.0  # seconds: the cache is written at most this often by a busy process


@dataclass
class _Seen:
    """What a :class:`Book` has read of one conversation."""

    handle: Conversation
    skip: int  # events copied from a fork's source
    seq: int = 0  # the last event counted
    events: Spend = field(default_factory=Spend)
    ledger_stamp: tuple[int, int, int] | None = None
    ledger: Spend = field(default_factory=Spend)


class Book:
    """Spending of one record; thread-safe (the runs of a daemon share one)."""

    def __init__(
        self, conv_root: Path, table: Mapping[str, prices.Price], cache: Path | None = None
    ) -> None:
        self.conv_root = conv_root
        self.table = table
        self._cache = cache
        self._lock = threading.RLock()
        self._seen: dict[str, _Seen] = {}
        self._changes = Changes(conv_root)
        self._own: dict[str, Spend] = {}  # conversation -> its own calls
        self._sub: dict[str, Spend] = {}  # conversation -> it and its descendants
        self._roots: set[str] = set()  # subtrees read whole: their sums are complete
        self._tip: str | None = None  # what _own holds for
        self._loaded = False  # the cache was looked at
        self._saved = 0.0
        self._dirty = False

    # -- one conversation -------------------------------------------------------------

    def of(self, conv_id: str) -> Spend:
        """What ``conv_id`` itself spent (its own calls, not its descendants'), read now."""
        with self._lock:
            return self._read(conv_id)

    def _read(self, conv_id: str) -> Spend:
        seen = self._seen.get(conv_id)
        if seen is None:
            seen = self._start(conv_id)
        names = seen.handle.event_names()
        if (names and names[-1][0] < seen.seq) or (not names and seen.seq):
            seen = self._start(conv_id)  # removed and made again, or renumbered
        for seq, role, name in names:
            if seq <= seen.seq:
                continue
            if role == "assistant" and seq > seen.skip:
                call = event_call(seen.handle, seq, name, self.table)
                if call is None and seq == names[-1][0]:
                    break  # the newest, maybe half-written: read again next time
                if call is not None:
                    seen.events = seen.events + call.spend
            seen.seq = seq
        stamp = _stamp(seen.handle.path / LEDGER)
        if stamp != seen.ledger_stamp:
            total = Spend()
            for call in ledger_calls(seen.handle, self.table):
                total = total + call.spend
            seen.ledger, seen.ledger_stamp = total, stamp
        return seen.events + seen.ledger

    def _start(self, conv_id: str) -> _Seen:
        handle = Conversation(self.conv_root, conv_id)
        try:
            skip = inherited(handle.meta())
        except FormatError:
            skip = 0
        seen = _Seen(handle, skip)
        self._seen[conv_id] = seen
        return seen

    # -- subtrees ---------------------------------------------------------------------

    def subtree(self, conv_id: str) -> Spend:
        """What ``conv_id`` and all its descendants spent, as of the record's tip."""
        with self._lock:
            self._catch_up()
            if not self._covers(conv_id):
                for member in [conv_id, *tree.walk(self.conv_root, conv_id)]:
                    self._change(member, self._read(member))
                self._roots.add(conv_id)
                self._dirty = True
            self._save()
            return self._sub.get(conv_id, Spend())

    def _covers(self, conv_id: str) -> bool:
        """Whether every conversation of ``conv_id``'s subtree is kept (it or an ancestor
        was read whole)."""
        return conv_id in self._roots or any(a in self._roots for a in ids.ancestors(conv_id))

    def _catch_up(self) -> None:
        """Bring what is kept to the record's tip: read again the conversations the
        commits since the last look touched (all of them when that cannot be told)."""
        tip = self._changes.tip()  # before reading: what lands meanwhile is read next time
        if not self._loaded:
            self._loaded = True
            held = self._load_cache()
            if held is not None:
                self._tip, self._own, self._sub, self._roots = held
        if tip == self._tip:
            return
        paths = self._changes.paths(self._tip, tip) if self._tip and tip else None
        if paths is None:
            self._own, self._sub, self._roots = {}, {}, set()
            self._seen.clear()
        else:
            for conv_id in _conversations(paths):
                if not self._covers(conv_id):
                    continue
                gone = not (self.conv_root / conv_id).is_dir()
                self._change(conv_id, Spend() if gone else self._read(conv_id))
                if gone:
                    self._seen.pop(conv_id, None)
        self._tip, self._dirty = tip, True

    def _change(self, conv_id: str, spent: Spend) -> None:
        """Set ``conv_id``'s own spending, and move every sum that holds it by the change."""
        old = self._own.get(conv_id, Spend())
        if spent == old:
            return
        delta = spent.since(old)
        if spent.calls:
            self._own[conv_id] = spent
        else:
            self._own.pop(conv_id, None)
        for holder in [conv_id, *ids.ancestors(conv_id)]:
            total = self._sub.get(holder, Spend()) + delta
            if total.calls:
                self._sub[holder] = total
            else:
                self._sub.pop(holder, None)
        self._dirty = True

    # -- the cache between processes ----------------------------------------------------

    def _load_cache(
        self,
    ) -> tuple[str, dict[str, Spend], dict[str, Spend], set[str]] | None:
        if self._cache is None:
            return None
        try:
            # marshal: plain data only (no code runs on load), written by this Python.
            data = marshal.loads(self._cache.read_bytes())
            if data.get("version") != (VERSION, sys.version_info[:2]):
                return None
            own = {str(cid): Spend(*fields) for cid, fields in data["own"].items()}
            sub = {str(cid): Spend(*fields) for cid, fields in data["sub"].items()}
            return str(data["tip"]), own, sub, {str(r) for r in data["roots"]}
        except (OSError, ValueError, EOFError, TypeError, KeyError, AttributeError):
            return None

    def _save(self) -> None:
        now = time.monotonic()
        if self._cache is None or not self._dirty or now - self._saved < SAVE_EVERY:
            return
        if self._tip is None:
            return  # no commit to say what the sums hold for
        data = {
            "version": (VERSION, sys.version_info[:2]),
            "tip": self._tip,
            "own": {cid: astuple(spent) for cid, spent in self._own.items()},
            "sub": {cid: astuple(spent) for cid, spent in self._sub.items()},
            "roots": sorted(self._roots),
        }
        try:
            textfile.write_atomic(self._cache, marshal.dumps(data))
        except OSError:
            return  # a cache: the next process reads the record instead
        self._saved, self._dirty = now, False


def _conversations(paths: Iterable[str]) -> set[str]:
    """The conversations that hold ``paths`` (record-relative): each path's directories
    up to the first reserved name (``events``, ``inbox``, ``files``) or its file name."""
    out: set[str] = set()
    for path in paths:
        parts = path.split("/")[:-1]
        for i, part in enumerate(parts):
            if part in ids.RESERVED:
                parts = parts[:i]
                break
        if parts:
            out.add("/".join(parts))
    return out


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)
