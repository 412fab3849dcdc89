"""``jpfs cost``: what a subtree's model calls spent, by conversation or by model, over a
time range; read from the record (:mod:`jpfs.core.usage`), so it is the same on every
machine that shares it.

Each call counts at the time it was recorded (an event's ``created``, a ``usage.toml``
call's ``at``); ``since`` is inclusive and ``until`` exclusive, so consecutive ranges
never count a call twice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from jpfs.core import tree, usage
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import Workspace
from jpfs.errors import ConfigError
from jpfs.services.conversations.mailfilter import parse_since

GROUPS = ("conversation", "model")


@dataclass(frozen=True)
class Report:
    by: str
    rows: list[tuple[str, usage.Spend]]
    total: usage.Spend
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    skipped: list[str] = field(default_factory=list)  # calls with no time, left out of a range
    left_out: list[str] = field(default_factory=list)  # directories too deep to list

    def to_json(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "rows": [
                {self.by: key, "calls": spend.calls, **spend.to_json()} for key, spend in self.rows
            ],
            "total": {"calls": self.total.calls, **self.total.to_json()},
        }


def report(
    ws: Workspace,
    under: str | None = None,
    *,
    by: str = "conversation",
    since: str | None = None,
    until: str | None = None,
) -> Report:
    """The calls of ``under`` and its descendants (the whole record without it), summed
    per conversation or per model, within ``[since, until)``."""
    if by not in GROUPS:
        raise ConfigError(f"--by {by!r}: choose {' or '.join(GROUPS)}")
    start = parse_since(since) if since else None
    end = parse_since(until) if until else None
    left_out: list[str] = []
    ids = ([under] if under else []) + list(tree.walk(ws.conv_root, under, left_out=left_out))
    sums: dict[str, usage.Spend] = {}
    total = usage.Spend()
    skipped: list[str] = []
    for conv_id in ids:
        for call in usage.calls(Conversation(ws.conv_root, conv_id), ws.prices):
            if start or end:
                if call.at is None:
                    skipped.append(f"{conv_id} {call.step}")
                    continue
                if (start and call.at < start) or (end and call.at >= end):
                    continue
            key = conv_id if by == "conversation" else call.model or "(unnamed model)"
            sums[key] = sums.get(key, usage.Spend()) + call.spend
            total = total + call.spend
    rows = sorted(sums.items(), key=lambda item: -item[1].tokens if by == "model" else 0)
    return Report(by, rows, total, start, end, skipped, left_out)
