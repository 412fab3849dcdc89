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

import datetime as dt
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jpfs.core import frontmatter, ids
from jpfs.core.eventlog import EVENT_RE as EVENT_RE
from jpfs.core.eventlog import EVENTS as EVENTS
from jpfs.core.eventlog import ROLES as ROLES
from jpfs.core.eventlog import Event as Event
from jpfs.core.eventlog import EventLog
from jpfs.core.eventlog import now as now
from jpfs.core.scope import CONVERSATION_TOML, check_path, conversation_path
from jpfs.core.scope import TASK as TASK
from jpfs.errors import ExistsError, FormatError, NotFoundError
from jpfs.infra import textfile

if TYPE_CHECKING:
    from jpfs.core.agentconfig import AgentConfig

QUESTIONS = "questions.md"
ANSWERS = "answers.md"
RESULT = "result.md"
INBOX = "inbox"
FILES = "files"
_CONFIG_HEADER = re.compile(r"^\[config\][ \t]*(?:#.*)?$", re.MULTILINE)
_ONBOARDING_SECTION = re.compile(
    r"^\[config\.onboarding\][ \t]*(?:#.*)?\n(.*?)(?=^\[|\Z)", re.MULTILINE | re.DOTALL
)

HEADER = (
    "# jpfs conversation record. You may edit title and hidden; comments and key order\n"
    "# survive jpfs's own rewrites. [config] is the agent configuration this conversation\n"
    "# was created with; it is never re-applied from the profile.\n"
)


class Conversation(EventLog):
    """A handle on one conversation directory; cheap to create, reads lazily."""

    def __init__(self, conv_root: Path, conv_id: str) -> None:
        self.id = ids.validate(conv_id)
        self.root = conv_root
        self.path = conversation_path(conv_root, self.id)
        self._config: dict[str, Any] | None = None
        self._settings: AgentConfig | None = None
        self._agent: str | None = None
        self._listing = None
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
            text = textfile.read_text(self.toml_path, self.root)
        except FileNotFoundError:
            return {}
        return frontmatter.loads(text, str(self.toml_path))

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
        except (tomllib.TOMLDecodeError, RecursionError):
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
    def settings(self) -> AgentConfig:
        """:attr:`config`, typed (:func:`jpfs.core.agentconfig.view`)."""
        # Imported here: a listing reads conversations without their configuration.
        from jpfs.core import agentconfig

        config = self.config
        if self._settings is None or self._settings.raw is not config:
            self._settings = agentconfig.view(config)
        return self._settings

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


def prepare_writes() -> None:
    """Load now what writing conversation.toml takes (tomlkit: 10 ms, more among runs
    starting together): a daemon does once idle, off its first runs' path."""
    import tomlkit

    tomlkit.parse(HEADER)


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
