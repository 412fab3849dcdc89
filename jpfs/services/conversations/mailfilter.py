"""``mail filter``: the messages of a mailbox that match every given criterion.

Sender, kind, read or unread, a start time (``since``: an ISO date/time or a duration
ago, which ``jpfs cost`` reads the same way) and a substring of subject or body; the
mailbox itself is :mod:`jpfs.services.conversations.mail`'s.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING

from jpfs.core.conversation import now
from jpfs.errors import FormatError
from jpfs.services.conversations.mail import KINDS, Message, messages

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace

_DURATION_RE = re.compile(r"^\s*\d+(?:\.\d+)?\s*[smhdw]\s*$")


def parse_since(text: str, at: dt.datetime | None = None) -> dt.datetime:
    """``since`` as an ISO date/time (UTC unless given) or a duration ago (``30m``, ``2d``)."""
    from jpfs.services.conversations.lifecycle import parse_duration

    raw = str(text).strip()
    if _DURATION_RE.match(raw):
        return (at or now()) - parse_duration(raw)
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise FormatError(
            f"bad since {text!r}: use an ISO date/time (2026-01-31T12:00Z) or a duration (2h)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def select(
    ws: Workspace,
    conv_id: str,
    *,
    sender: str | None = None,
    kind: str | None = None,
    unread: bool | None = None,
    since: str | dt.datetime | None = None,
    text: str | None = None,
) -> list[Message]:
    """Messages of ``conv_id`` matching every given criterion (``mail filter``)."""
    if kind is not None and kind not in KINDS:
        raise FormatError(f"unknown message kind {kind!r} (use {' or '.join(KINDS)})")
    after = parse_since(since) if isinstance(since, str) else since
    needle = text.casefold() if text else None
    out = []
    for msg in messages(ws, conv_id):
        if sender is not None and msg.sender != sender:
            continue
        if kind is not None and msg.kind != kind:
            continue
        if unread is not None and msg.read == unread:
            continue
        if after is not None and msg.created < after:
            continue
        if needle is not None and needle not in f"{msg.subject}\n{msg.body}".casefold():
            continue
        out.append(msg)
    return out
