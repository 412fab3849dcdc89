"""A conversation's ``events/``: how its handle lists, numbers and appends event files.

    <root>/<id>/events/0001-user.md one file per event, TOML front matter (+++)

:class:`EventLog` is the events half of :class:`jpfs.core.conversation.Conversation`,
which sets the handle's state it uses (``id``, ``root``, ``path`` and the listing).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self

from jpfs.core import frontmatter
from jpfs.errors import ArgumentError, ConversationGone, ExistsError, FormatError
from jpfs.infra import fsclock, textfile

EVENTS = "events"
EVENT_RE = re.compile(r"^([0-9]{4,})-([a-z]+)\.md\Z")
ROLES = ("user", "assistant", "tool", "error")
# A directory modified within this much of being stat'ed may be modified again with the
# same timestamps (they come from a coarse clock).
_SETTLED_NS = fsclock.SETTLED_NS


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


@dataclass(frozen=True)
class _Listing:
    """``events/`` as a handle last listed it: its stat identity then, and its events."""

    stamp: tuple[int, int, int]  # inode, mtime, ctime of the directory
    names: list[tuple[int, str, str]]
    settled: bool  # its timestamps were older than the clock's granularity
    fresh: bool = False  # left by this handle's own append, not yet looked at since


@dataclass(frozen=True)
class Event:
    seq: int
    role: str
    path: Path
    meta: dict[str, Any]
    body: str

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        calls = self.meta.get("tool_calls") or []
        out = []
        for call in calls:
            raw = call.get("input", "{}")
            out.append({**call, "input": json.loads(raw) if isinstance(raw, str) else raw})
        return out

    def to_json(self) -> dict[str, Any]:
        meta = {
            k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in self.meta.items()
        }
        if "tool_calls" in meta:
            meta["tool_calls"] = self.tool_calls
        return {"seq": self.seq, "role": self.role, "meta": meta, "body": self.body}


class EventLog:
    """The events of one conversation handle (mixed into ``Conversation``)."""

    id: str
    root: Path
    path: Path
    _listing: _Listing | None
    _events: str | None  # events_dir as a string, built once
    _alone: int  # depth of exclusive(): this handle is the only jpfs writer

    def _gone(self) -> ConversationGone:
        # Writes never make the conversation's directory: one removed while a run went
        # on would come back holding a lone result.md or conversation.toml.
        return ConversationGone(f"conversation {self.id!r} was removed: its directory is gone")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Self]:
        """Within this block the handle's caller holds the conversation's run lock, and so
        is the only jpfs writer of its events: every other appender (input, a failure
        record, a fork's copy and prompt) takes that lock first. The handle then trusts
        its own listing while the directory's stat identity holds, without the tail check
        of :meth:`event_names` (5 of an append's 12 system calls; each one a hand-off of
        the interpreter lock when many runs share a process). What that can miss: an
        event file made by hand while the run appends, which the next event may number
        over under another role (see protocol/layout.md: input goes through ``task.md``,
        ``answers.md``, mail or a query, never a hand-made event)."""
        self._alone += 1
        try:
            yield self
        finally:
            self._alone -= 1

    @property
    def events_dir(self) -> Path:
        return self.path / EVENTS

    def _events_str(self) -> str:
        # An append and its commit name events/ up to eight times; with 50 writer threads
        # sharing one interpreter, each Path built costs them all.
        if self._events is None:
            self._events = os.path.join(self.path, EVENTS)
        return self._events

    def event_names(self) -> list[tuple[int, str, str]]:
        """(seq, role, filename) sorted by seq, from names only (no reads).

        A handle keeps its last listing with the directory's stat identity, and a run
        asks at every step: listing 1,000 events twice per commit made a commit
        O(events). The listing is reused while the directory's inode, mtime and ctime
        are unchanged; every entry created, removed or renamed in it sets them. Within
        the clock's granularity of a change (:data:`_SETTLED_NS`) a second change can
        leave them the same, so a listing taken then is reused only while the last event
        is still there and no event numbered next exists, under any role (how every
        jpfs writer numbers: see :meth:`append_event`), and is taken again once the
        directory has settled. What that can miss for at most 50 ms: a file named out
        of sequence by hand in the same clock tick as a jpfs write. A handle whose
        caller holds the run lock skips the tail check (:meth:`exclusive`).
        """
        events = self._events_str()
        try:
            st = os.stat(events)
        except OSError as exc:
            if not textfile.names_no_directory(exc):
                raise
            self._listing = None
            return []
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        cached = self._listing
        if cached is not None and cached.stamp == stamp:
            if cached.settled or self._alone:
                return list(cached.names)
            if not _settled(st) and self._tail_unchanged(cached.names):
                return list(cached.names)
        try:
            names = os.listdir(events)
        except OSError as exc:
            if not textfile.names_no_directory(exc):
                raise
            self._listing = None
            return []
        out = []
        for name in names:
            m = EVENT_RE.match(name)
            if m:
                out.append((int(m.group(1)), m.group(2), name))
        out.sort()
        self._listing = _Listing(stamp, out, _settled(st))
        return list(out)

    def known_event_names(self) -> list[tuple[int, str, str]]:
        """:meth:`event_names`, trusting the handle's listing while the directory's stat
        identity holds, even within the clock's granularity of a change.

        For callers that need every event up to the last one they see, and look again
        later (a run commits the events since its last commit: one added in the same
        tick is seen by the next look), never for numbering a new event. The first look
        after this handle's own append takes its listing as it is: that append stat the
        directory microseconds before, and a run commits every event it appends at once
        (each stat is a hand-off of the interpreter lock among busy writer threads)."""
        cached = self._listing
        if cached is not None and cached.fresh:
            self._listing = replace(cached, fresh=False)
            return list(cached.names)
        if cached is not None:
            try:
                st = os.stat(self._events_str())
            except (FileNotFoundError, NotADirectoryError):
                self._listing = None
                return []
            if cached.stamp == (st.st_ino, st.st_mtime_ns, st.st_ctime_ns):
                return list(cached.names)
        return self.event_names()

    def _tail_unchanged(self, names: list[tuple[int, str, str]]) -> bool:
        """Whether the last listed event still exists and none numbered next does."""
        base = self._events_str()
        if names and not os.path.lexists(f"{base}/{names[-1][2]}"):
            return False
        following = f"{base}/{(names[-1][0] + 1 if names else 1):04d}-"
        return not any(os.path.lexists(f"{following}{role}.md") for role in ROLES)

    def events(self, last: int | None = None) -> list[Event]:
        check_last(last)
        names = self.event_names()
        if last is not None:
            names = names[-last:] if last > 0 else []
        out = []
        for seq, role, name in names:
            meta, body = frontmatter.read(self.events_dir / name, self.root)
            out.append(Event(seq, role, self.events_dir / name, meta, body))
        return out

    def last_event(self) -> Event | None:
        names = self.event_names()
        if not names:
            return None
        seq, role, name = names[-1]
        meta, body = frontmatter.read(self.events_dir / name, self.root)
        return Event(seq, role, self.events_dir / name, meta, body)

    def append_event(self, role: str, body: str, meta: Mapping[str, Any] | None = None) -> Event:
        """Write the next event file; O_EXCL makes two writers fail rather than overwrite."""
        event, text = self.prepare_event(role, body, meta)
        try:
            created = textfile.create_new(event.path, text, parents=False, root=self.root)
        except FileNotFoundError as exc:
            try:  # events/ alone removed (a listing taken before): made again
                textfile.check_within(self.path, self.root)
                self.events_dir.mkdir()
            except FileNotFoundError:
                raise self._gone() from exc
            except FileExistsError:
                pass
            created = textfile.create_new(event.path, text, parents=False, root=self.root)
        if not created:
            raise self.clash(event)
        self.adopt_event(event)
        return event

    def prepare_event(
        self, role: str, body: str, meta: Mapping[str, Any] | None = None
    ) -> tuple[Event, str]:
        """The next event, numbered, and the text of its file, which is not written yet:
        :meth:`append_event` writes it, or a committer as it commits it (a run's
        :meth:`~jpfs.services.run.runtime.Runner.record_event`); then :meth:`adopt_event`."""
        if role not in ROLES:
            raise ValueError(f"unknown event role {role!r}")
        names = self.event_names()
        if self._listing is None:
            try:
                textfile.check_within(self.path, self.root)  # before making events/ there
                self.events_dir.mkdir(exist_ok=True)
            except FileNotFoundError as exc:
                raise self._gone() from exc
            except FileExistsError as exc:  # a file, or a link to none, in its place
                raise FormatError(
                    f"{self.events_dir} is not a directory: jpfs keeps the conversation's"
                    " events there; move it away"
                ) from exc
        seq = names[-1][0] + 1 if names else 1
        full = {"role": role, "created": now(), **(meta or {})}
        if "tool_calls" in full:
            full["tool_calls"] = [
                {**c, "input": json.dumps(c["input"])} for c in full["tool_calls"]
            ]
        # Nothing recognised as a secret is recorded (the record is shared): redacted,
        # and counted where anyone reading the event sees it. Imported here: writers
        # only, so that reading commands do not pay for it.
        from jpfs.core import secrets

        found: Counter[str] = Counter()
        body = secrets.redact_tree(body, found)
        full = secrets.redact_tree(full, found)
        if found:
            full["redacted"] = dict(sorted(found.items()))
        text = frontmatter.render(full, body)
        path = self.events_dir / f"{seq:04d}-{role}.md"
        return Event(seq, role, path, dict(full), body), text

    def clash(self, event: Event) -> ExistsError:
        """The error for ``event`` whose name another file took first (the listing is
        taken again at the next look)."""
        self._listing = None
        return ExistsError(
            f"event {event.path.name} already exists in {self.id}, made outside jpfs:"
            " move it out of events/ and give input through task.md, answers.md, mail or"
            " a query"
        )

    def adopt_event(self, event: Event) -> None:
        """Count ``event``, whose file was made from :meth:`prepare_event`, in the handle's
        listing: the listing plus that file. The directory has just changed, so the
        listing stays unsettled and the next look checks its tail (see event_names)."""
        cached = self._listing
        try:
            st = os.stat(self._events_str())
        except OSError:
            self._listing = None
            return
        if cached is None or (cached.names and cached.names[-1][0] >= event.seq):
            self._listing = None  # listed anew at the next look
            return
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        names = [*cached.names, (event.seq, event.role, event.path.name)]
        self._listing = _Listing(stamp, names, False, True)


def check_last(last: int | None) -> None:
    """``last`` (a number of events, from a caller) is None or >= 0: the one check for
    the CLI, the tools and MCP alike."""
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
        # Worded as the tools' schema check words it (jpfs.core.tool.check_arguments).
        raise ArgumentError(f"argument 'last' must be at least 0, got {last!r}")


def _settled(st: os.stat_result) -> bool:
    return max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - _SETTLED_NS
