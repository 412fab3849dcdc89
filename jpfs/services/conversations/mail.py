"""Mail between conversations: markdown files with TOML front matter in ``inbox/``.

    <conversation>/inbox/m-01jh5w7x2k....md
    +++
    id = "m-01jh5w7x2k..."      time-sortable, jpfs.core.ids.generate("m")
    from = "lead"               the sending conversation, or "@human"
    to = "lead/c-01jh..."
    subject = "Continue with the tests"
    created = 2026-11-22T08:00:00Z
    kind = "message"            or "status": a child's report at the end of a run
    read = false
    in_reply_to = "m-..."       optional
    event = 12                  status messages only: the child's event they report on
    interrupt = true            optional: cut short the recipient's model call in flight
    +++
    body (a status message's body is JSON: {"status", "success", "summary"})

Each send, read-mark and delete is one commit, ``jpfs(<mailbox>): mail|status|mail-read|
mail-delete`` with ``Jpfs-Message`` and ``Jpfs-From`` trailers; a deleted message stays in
git history.

Scope is decided here, for tools, CLI and library alike: a human (``sender=None``) may
mail any conversation; an agent may mail its parent and its own descendants, nothing
else. Reading, marking and deleting act on one mailbox, named by the caller (CLI) or
the caller's own (tools). Unread ``message`` mail from a conversation's *caller* (its
parent, or a human) is pending input (:func:`pending_input`): jpfs.services.run.control turns it
into the next user input when the conversation can take input.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jpfs.core import frontmatter, ids, record, scope, secrets
from jpfs.core.conversation import INBOX, Conversation, now
from jpfs.core.ids import HUMAN, is_caller
from jpfs.errors import ExistsError, FormatError, IdError, NotFoundError, ScopeError
from jpfs.infra import git, textfile

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace

KINDS = ("message", "status")
MESSAGE_ID_RE = re.compile(r"m-[0-9a-z]{26}")


@dataclass(frozen=True)
class Message:
    id: str
    sender: str
    to: str
    subject: str
    created: dt.datetime
    kind: str
    read: bool
    body: str
    in_reply_to: str | None = None
    event: int | None = None
    # Secrets redacted from it, by kind (jpfs.core.secrets); in the file's front matter.
    redacted: dict[str, int] | None = None
    # Cut short the recipient's model call in flight, to be read at once
    # (jpfs.services.conversations.steering); never a tool.
    interrupt: bool = False

    def header(self) -> dict[str, Any]:
        """The front matter as JSON-ready data (``from``, not ``sender``)."""
        out: dict[str, Any] = {
            "id": self.id,
            "from": self.sender,
            "to": self.to,
            "subject": self.subject,
            "created": self.created.isoformat().replace("+00:00", "Z"),
            "kind": self.kind,
            "read": self.read,
        }
        if self.in_reply_to:
            out["in_reply_to"] = self.in_reply_to
        if self.event is not None:
            out["event"] = self.event
        if self.interrupt:
            out["interrupt"] = True
        return out

    def to_json(self) -> dict[str, Any]:
        return {**self.header(), "body": self.body}

    def render(self) -> str:
        meta: dict[str, Any] = {
            "id": self.id,
            "from": self.sender,
            "to": self.to,
            "subject": self.subject,
            "created": self.created,
            "kind": self.kind,
            "read": self.read,
            "in_reply_to": self.in_reply_to,
            "event": self.event,
            "interrupt": True if self.interrupt else None,
        }
        if self.redacted:
            meta["redacted"] = self.redacted
        return frontmatter.render(meta, self.body)


# -- ids, paths, scope ----------------------------------------------------------------


def check_message_id(msg_id: str) -> str:
    msg_id = str(msg_id).strip()
    if not MESSAGE_ID_RE.fullmatch(msg_id):
        raise IdError(
            f"bad message id {msg_id!r}: message ids look like m-01jh5w7x2k... (26 chars)"
        )
    return msg_id


def status_id(conv_id: str, seq: int, created: dt.datetime) -> str:
    """The id of the status report of ``conv_id``'s event ``seq``: the same on every retry.

    Time-sortable like generated ids (the event's time, to the second), so a crash
    between sending it and writing result.md never sends a second one.
    """
    ms = int(created.timestamp() * 1000)
    digest = int.from_bytes(hashlib.sha1(f"{conv_id}@{seq}".encode()).digest()[:10], "big")
    return f"m-{ids.encode(ms, 10)}{ids.encode(digest, 16)}"


def inbox_dir(ws: Workspace, conv_id: str) -> Path:
    return scope.conversation_path(ws.conv_root, conv_id) / INBOX


def message_path(ws: Workspace, conv_id: str, msg_id: str) -> Path:
    return inbox_dir(ws, conv_id) / f"{check_message_id(msg_id)}.md"


def check_recipient(
    ws: Workspace, to: str, sender: str | None, *, parent_only: bool = False
) -> str:
    """The canonical recipient id, if ``sender`` may mail it (``None``: a human, anyone)."""
    if sender is None or sender == HUMAN:
        return scope.resolve(ws.conv_root, to)
    parent = ids.parent(sender)
    if to == "parent":
        if parent is None:
            raise ScopeError(f"{sender!r} is a top-level conversation: it has no parent to mail")
        to = parent
    target = ids.validate(to)
    if parent is not None and target == parent:
        return scope.resolve(ws.conv_root, target)
    if parent_only:
        raise ScopeError(
            f"{target!r} is not your parent ({parent or 'none'}):"
            " this agent may mail only its parent"
        )
    if not ids.is_descendant(target, sender):
        raise ScopeError(
            f"{target!r} is neither your parent ({parent or 'none'}) nor one of your"
            " descendants: an agent may mail only those"
        )
    return scope.resolve(ws.conv_root, target, within=sender)


# -- the mailbox ------------------------------------------------------------------------


def _commit(
    ws: Workspace, box: str, event: str, paths: Sequence[Path], msgs: Sequence[Message]
) -> None:
    note = msgs[0].id if len(msgs) == 1 else f"{len(msgs)} messages"
    senders = {m.sender for m in msgs}
    author = None
    if event in ("mail", "status") and len(senders) == 1 and HUMAN not in senders:
        # Mail an agent sends is the agent's commit, like its events.
        sender = next(iter(senders))
        agent = Conversation(ws.conv_root, sender).meta().get("agent") or "agent"
        author = record.agent_identity(str(agent))
    change = record.change(ws, box, event, [ws.rel(p) for p in paths], note=note, author=author)
    extra = [("Jpfs-Message", m.id) for m in msgs]
    extra += [("Jpfs-From", s) for s in dict.fromkeys(m.sender for m in msgs)]
    ws.commit(dataclasses.replace(change, trailers=(*change.trailers, *extra)))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:200]


def _load(ws: Workspace, path: Path) -> Message:
    meta, body = frontmatter.read(path, ws.conv_root)
    created = meta.get("created")
    if not isinstance(created, dt.datetime):
        raise FormatError(f"{path}: message has no valid `created` time")
    event = meta.get("event")
    return Message(
        id=str(meta.get("id", path.stem)),
        sender=str(meta.get("from", "")),
        to=str(meta.get("to", "")),
        subject=str(meta.get("subject", "")),
        created=created,
        kind=str(meta.get("kind", "message")),
        read=bool(meta.get("read", False)),
        body=body,
        in_reply_to=str(meta["in_reply_to"]) if meta.get("in_reply_to") else None,
        event=int(event) if isinstance(event, int) else None,
        redacted=_counts(meta.get("redacted")),
        interrupt=meta.get("interrupt") is True,
    )


def _counts(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {str(k): v for k, v in value.items() if isinstance(v, int)} or None


def _tmp_dir(ws: Workspace) -> Path:
    """Temporary files go outside the conversation tree: a commit of the inbox's
    directory running meanwhile never sees them (come and go)."""
    tmp_dir = ws.local_dir / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    return tmp_dir


def send(
    ws: Workspace,
    to: str,
    subject: str,
    body: str,
    *,
    sender: str | None = None,
    kind: str = "message",
    in_reply_to: str | None = None,
    msg_id: str | None = None,
    event: int | None = None,
    parent_only: bool = False,
    interrupt: bool = False,
) -> Message:
    """Deliver a message to ``to``'s inbox and commit it. ``sender=None`` is a human.

    With an explicit ``msg_id`` (status reports) an existing message of that id is
    returned unchanged: sending is idempotent.
    """
    if kind not in KINDS:
        raise FormatError(f"unknown message kind {kind!r} (use {' or '.join(KINDS)})")
    to = check_recipient(ws, to, sender, parent_only=parent_only)
    if in_reply_to is not None:
        in_reply_to = check_message_id(in_reply_to)
    # Mail is committed, and shared with the record: no recognised secret goes in.
    found: Counter[str] = Counter()
    subject, body = secrets.redact_tree(subject, found), secrets.redact_tree(body, found)
    msg = Message(
        id=check_message_id(msg_id) if msg_id else ids.generate("m"),
        sender=sender or HUMAN,
        to=to,
        subject=_one_line(subject) or "(no subject)",
        created=now(),
        kind=kind,
        read=False,
        body=body if body.endswith("\n") or not body else body + "\n",
        in_reply_to=in_reply_to,
        event=event,
        redacted=dict(sorted(found.items())) or None,
        interrupt=interrupt,
    )
    path = message_path(ws, to, msg.id)
    event_name = "status" if kind == "status" else "mail"
    if not textfile.create_new(path, msg.render(), tmp_dir=_tmp_dir(ws)):
        if msg_id is None:
            raise ExistsError(f"message {msg.id} already exists in {to}")
        # A retry after a crash: committing again is a no-op once it is committed.
        msg = _load(ws, path)
    _commit(ws, to, event_name, [path], [msg])
    return msg


def messages(ws: Workspace, conv_id: str) -> list[Message]:
    """Every message in ``conv_id``'s inbox, oldest first (ids sort by time)."""
    box = inbox_dir(ws, conv_id)
    try:
        names = sorted(n for n in os.listdir(box) if n.endswith(".md"))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        if MESSAGE_ID_RE.fullmatch(name[:-3]):
            out.append(_load(ws, box / name))
    return out


def get(ws: Workspace, conv_id: str, msg_id: str) -> Message:
    path = message_path(ws, conv_id, msg_id)
    if not path.is_file():
        raise NotFoundError(f"no message {msg_id} in the inbox of {conv_id!r}")
    return _load(ws, path)


def check(ws: Workspace, conv_id: str) -> list[Message]:
    """The unread messages of ``conv_id`` (their headers are what ``mail check`` shows)."""
    return [m for m in messages(ws, conv_id) if not m.read]


def mark_read(ws: Workspace, conv_id: str, msgs: Sequence[Message], *, commit: bool = True) -> None:
    """Set ``read = true`` on ``msgs``; one commit for all (none when ``commit`` is false)."""
    paths, marked = [], []
    for msg in msgs:
        if msg.read:
            continue
        path = message_path(ws, conv_id, msg.id)
        text = dataclasses.replace(msg, read=True).render()
        textfile.write_atomic(path, text, tmp_dir=_tmp_dir(ws))
        paths.append(path)
        marked.append(msg)
    if commit and paths:
        _commit(ws, conv_id, "mail-read", paths, marked)


def read(ws: Workspace, conv_id: str, msg_id: str) -> Message:
    """The message, marked read (a commit when it was unread)."""
    msg = get(ws, conv_id, msg_id)
    mark_read(ws, conv_id, [msg])
    return dataclasses.replace(msg, read=True)


def delete(ws: Workspace, conv_id: str, msg_id: str) -> Message:
    """Remove a message from the inbox (it stays in git history)."""
    msg = get(ws, conv_id, msg_id)
    path = message_path(ws, conv_id, msg.id)
    path.unlink()
    _commit(ws, conv_id, "mail-delete", [path], [msg])
    return msg


def pending_input(ws: Workspace, conv_id: str) -> list[Message]:
    """Unread ``message`` mail to ``conv_id`` from its caller (parent or human).

    This is input waiting for the conversation: when it is idle, failed, waiting for
    answers or empty, whoever runs it (:func:`jpfs.services.conversations.inputs.deliver`, called from
    every run) turns these into its next input and marks them read, in one commit.
    The daemon runs a conversation in those states when this list is not empty.

    Only messages already committed count: a sender writes the message, then commits
    it, then starts the recipient. Taking one in between would let the sender's commit
    pick up the read mark, splitting "input + read mark" over two commits.
    """
    unread = _from_caller(ws, conv_id)
    committed = _committed(ws, conv_id, unread)
    return [m for m in unread if m.id in committed]


def take_in(ws: Workspace, conv_id: str) -> list[Message]:
    """:func:`pending_input` for a run in progress, mail saved into the inbox by hand
    included: such a message (no sender commits it) is committed first, as its sender's
    mail. The daemon leaves a running conversation's files to its run, so the run takes
    them in, before each model call (jpfs.services.conversations.steering)."""
    unread = _from_caller(ws, conv_id)
    committed = _committed(ws, conv_id, unread)
    arrived = [m for m in unread if m.id not in committed]
    if arrived:
        _commit(ws, conv_id, "mail", [message_path(ws, conv_id, m.id) for m in arrived], arrived)
    return unread


def _from_caller(ws: Workspace, conv_id: str) -> list[Message]:
    return [m for m in check(ws, conv_id) if m.kind == "message" and is_caller(m.sender, conv_id)]


def _committed(ws: Workspace, conv_id: str, msgs: Sequence[Message]) -> set[str]:
    """The ids of ``msgs`` whose files the record's tip holds."""
    if not msgs:
        return set()
    paths = {
        message_path(ws, conv_id, m.id).relative_to(ws.conv_root).as_posix(): m.id for m in msgs
    }
    listed = git.run(ws.conv_root, ["ls-tree", "--name-only", "HEAD", "--", *paths], check=False)
    found = set(listed.stdout.splitlines()) if listed.returncode == 0 else set()
    return {msg_id for path, msg_id in paths.items() if path in found}


def as_input(msgs: Sequence[Message]) -> str:
    """Messages rendered as one user input for the recipient's model."""
    parts = []
    for m in msgs:
        who = "a human" if m.sender == HUMAN else m.sender
        parts.append(f"Mail from {who} ({m.id}), subject: {m.subject}\n\n{m.body.strip()}\n")
    return "\n---\n\n".join(parts)
