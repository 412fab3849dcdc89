"""One conversation on disk: its record (``conversation.toml``) and its event files.

    <root>/<id>/conversation.toml   title, agent, created, status, hidden, expires,
                                    base, forked_from, branch, worktree, [config]
    <root>/<id>/task.md             caller -> agent
    <root>/<id>/events/0001-user.md one file per event, TOML front matter (+++)
    <root>/<id>/result.md           the latest final answer

Writes go to a temporary file and are renamed into place, so a crash never leaves
half a file; commits are the caller's job (see :mod:`jpfs.core.record`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jpfs.core import frontmatter, ids
from jpfs.core.scope import CONVERSATION_TOML, check_path, conversation_path
from jpfs.core.scope import TASK as TASK
from jpfs.errors import ConversationGone, ExistsError, FormatError, NotFoundError
from jpfs.infra import textfile

QUESTIONS = "questions.md"
ANSWERS = "answers.md"
RESULT = "result.md"
EVENTS = "events"
INBOX = "inbox"
FILES = "files"
_CONFIG_HEADER = re.compile(r"^\[config\][ \t]*(?:#.*)?$", re.MULTILINE)
_ONBOARDING_SECTION = re.compile(
    r"^\[config\.onboarding\][ \t]*(?:#.*)?\n(.*?)(?=^\[|\Z)", re.MULTILINE | re.DOTALL
)
EVENT_RE = re.compile(r"^([0-9]{4,})-([a-z]+)\.md\Z")
ROLES = ("user", "assistant", "tool", "error")
# A directory modified within this much of being stat'ed may be modified again with the
# same timestamps (they come from a coarse clock, well under 50 ms).
_SETTLED_NS = 50_000_000

HEADER = (
    "# jpfs conversation record. You may edit title and hidden; comments and key order\n"
    "# survive jpfs's own rewrites. [config] is the agent configuration this conversation\n"
    "# was created with; it is never re-applied from the profile.\n"
)


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


class Conversation:
    """A handle on one conversation directory; cheap to create, reads lazily."""

    def __init__(self, conv_root: Path, conv_id: str) -> None:
        self.id = ids.validate(conv_id)
        self.root = conv_root
        self.path = conversation_path(conv_root, self.id)
        self._config: dict[str, Any] | None = None
        self._agent: str | None = None
        self._listing: _Listing | None = None
        self._events: str | None = None  # events_dir as a string, built once
        self._alone = 0  # depth of exclusive(): this handle is the only jpfs writer

    def __repr__(self) -> str:
        return f"Conversation({self.id!r})"

    # -- the record --------------------------------------------------------------
    @property
    def toml_path(self) -> Path:
        return self.path / CONVERSATION_TOML

    def exists(self) -> bool:
        return os.path.lexists(self.toml_path) or os.path.lexists(self.path / TASK)

    def meta(self) -> dict[str, Any]:
        try:
            return tomllib.loads(textfile.read_text(self.toml_path, self.root))
        except FileNotFoundError:
            return {}
        except tomllib.TOMLDecodeError as exc:
            raise FormatError(f"{self.toml_path}: malformed TOML: {exc}") from exc

    def summary(self) -> dict[str, Any]:
        """The record's top-level keys and ``config.onboarding``: what listings need.

        The ``[config]`` snapshot is most of the file and most of the time a full parse
        takes (measured: 55% of ``ls`` at 10,000 conversations), so only the part
        before it and its ``[config.onboarding]`` table are parsed. Anything unusual
        (no ``[config]`` header, a malformed head) falls back to :meth:`meta`.
        """
        try:
            text = textfile.read_text(self.toml_path, self.root)
        except FileNotFoundError:
            return {}
        start = _CONFIG_HEADER.search(text)
        if start is None:
            return self.meta()
        try:
            head = tomllib.loads(text[: start.start()])
            section = _ONBOARDING_SECTION.search(text, start.start())
            onboarding = tomllib.loads(section.group(1)) if section else {}
        except tomllib.TOMLDecodeError:
            return self.meta()
        head["config"] = {"onboarding": onboarding}
        return head

    def update(self, **fields: Any) -> None:
        """Set fields in conversation.toml, keeping a human's comments and key order."""
        import tomlkit  # writers only: listing must not pay for the import
        import tomlkit.exceptions

        try:
            text = textfile.read_text(self.toml_path, self.root)
            doc = tomlkit.parse(text)
        except FileNotFoundError:
            doc = tomlkit.parse(HEADER)
        except tomlkit.exceptions.TOMLKitError as exc:
            raise FormatError(f"{self.toml_path}: malformed TOML: {exc}") from exc
        for key, value in fields.items():
            if value is None:
                doc.pop(key, None)
            else:
                doc[key] = value
        try:
            textfile.write_atomic(self.toml_path, tomlkit.dumps(doc), parents=False, root=self.root)
        except FileNotFoundError as exc:
            raise self._gone() from exc

    def _gone(self) -> ConversationGone:
        # Writes never make the conversation's directory: one removed while a run went
        # on would come back holding a lone result.md or conversation.toml.
        return ConversationGone(f"conversation {self.id!r} was removed: its directory is gone")

    @property
    def config(self) -> dict[str, Any]:
        """The agent configuration snapshot. It never changes once written (it is not
        re-applied from the profile), so one handle parses it once: a run asks for it
        at every step."""
        if self._config is None:
            cfg = self.meta().get("config", {})
            if not isinstance(cfg, dict) or not cfg:
                return {}  # not written yet (a conversation being adopted): ask again
            self._config = cfg
        return self._config

    @property
    def agent(self) -> str | None:
        """The profile the conversation was created with; like :attr:`config`, written
        once (or on adoption), so parsed once per handle."""
        if self._agent is None:
            agent = self.meta().get("agent")
            if not agent:
                return None
            self._agent = str(agent)
        return self._agent

    @property
    def status(self) -> str:
        return str(self.meta().get("status", "active"))

    # -- files ---------------------------------------------------------------------
    def file(self, name: str) -> Path:
        return self.path / name

    def read(self, name: str) -> str | None:
        """A file of the conversation as text (:mod:`jpfs.infra.textfile`), None if missing."""
        try:
            return textfile.read_text(self.path / name, self.root)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write(self, name: str, text: str) -> Path:
        """Replace file ``name`` (``files/notes.md`` makes ``files/``) of this
        conversation, whose directory must exist."""
        path = self.path / name
        try:
            if "/" in name:
                textfile.check_within(self.path, self.root)  # before making anything in it
            for directory in reversed(path.relative_to(self.path).parents[:-1]):
                (self.path / directory).mkdir(exist_ok=True)
            textfile.write_atomic(path, text, parents=False, root=self.root)
        except FileNotFoundError as exc:
            raise self._gone() from exc
        return path

    # -- events ----------------------------------------------------------------------
    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Conversation]:
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
        except (FileNotFoundError, NotADirectoryError):
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
        except (FileNotFoundError, NotADirectoryError):
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
            self._listing = None
            raise ExistsError(f"event {event.path.name} already exists in {self.id}")
        self.adopt_event(event)
        return event

    def prepare_event(
        self, role: str, body: str, meta: Mapping[str, Any] | None = None
    ) -> tuple[Event, str]:
        """The next event, numbered, and the text of its file, which is not written yet:
        :meth:`append_event` writes it, or a committer as it commits it (a run's
        :meth:`~jpfs.services.runtime.Runner.record_event`); then :meth:`adopt_event`."""
        if role not in ROLES:
            raise ValueError(f"unknown event role {role!r}")
        names = self.event_names()
        if self._listing is None:
            try:
                textfile.check_within(self.path, self.root)  # before making events/ there
                self.events_dir.mkdir(exist_ok=True)
            except FileNotFoundError as exc:
                raise self._gone() from exc
        seq = names[-1][0] + 1 if names else 1
        full = {"role": role, "created": now(), **(meta or {})}
        if "tool_calls" in full:
            full["tool_calls"] = [
                {**c, "input": json.dumps(c["input"], sort_keys=True)} for c in full["tool_calls"]
            ]
        text = frontmatter.render(full, body)
        path = self.events_dir / f"{seq:04d}-{role}.md"
        return Event(seq, role, path, dict(full), body), text

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


def _settled(st: os.stat_result) -> bool:
    return max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - _SETTLED_NS


def create(
    conv_root: Path,
    conv_id: str,
    *,
    agent: str,
    title: str = "",
    hidden: bool = False,
    expires: dt.datetime | None = None,
    config: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Conversation:
    """Create the directory and conversation.toml; an existing conversation is an error."""
    import tomlkit

    conv = Conversation(conv_root, conv_id)
    check_path(conv_root, conv.id)
    parent_id = ids.parent(conv.id)
    if parent_id is not None:
        parent_path = conversation_path(conv_root, parent_id)
        if not parent_path.is_dir():
            raise NotFoundError(f"parent conversation {parent_id!r} does not exist")
    try:
        conv.path.mkdir(parents=parent_id is None)
    except FileExistsError:
        if conv.exists():
            raise ExistsError(f"conversation {conv.id!r} already exists") from None
    doc = tomlkit.parse(HEADER)
    doc["title"] = title
    doc["agent"] = agent
    doc["created"] = now()
    doc["status"] = "active"
    doc["hidden"] = hidden
    if expires is not None:
        doc["expires"] = expires
    for key, value in (extra or {}).items():
        if value is not None:
            doc[key] = value
    table = tomlkit.table()
    for key, value in (config or {}).items():
        table[key] = value
    doc["config"] = table
    textfile.write_atomic(conv.toml_path, tomlkit.dumps(doc), root=conv.root)
    conv._agent = agent or None  # what the record now says; spares a parse at each run
    return conv
