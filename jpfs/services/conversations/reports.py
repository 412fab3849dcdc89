"""Status reports: a child's mail to its parent when a run ends, and gathering them.

    +++ kind = "status", from = child, to = parent, event = <the child's last event> +++
    {"status": "idle", "success": true, "summary": "<the final reply, or the error>",
     "usage": {<the run's usage: the four token counts and cost_usd>}}

:func:`report_status` is every runner's default ``on_finish``: it is called before
result.md is written, and the message id is derived from (child, event), so a run
redone after a crash reports once. :func:`wait_settled` (``jp_await``) waits until
children stop and returns their reports.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jpfs.core import frontmatter, ids, locks, scope, tree
from jpfs.core.conversation import RESULT, Conversation, now
from jpfs.core.state import State
from jpfs.errors import Cancelled, JpfsError
from jpfs.services.conversations import mail, mailfilter
from jpfs.services.forks import diffs

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace
    from jpfs.services.conversations.runs import RunContext

log = logging.getLogger("jpfs.services.conversations.reports")

# States in which a child has stopped and waits for its caller (jp_await returns).
SETTLED = frozenset({State.EMPTY, State.WAITING, State.IDLE, State.FAILED, State.KILLED})
SUMMARY_MAX = 4000
POLL = 0.05


def report_status(runner: RunContext, conv: Conversation, success: bool, text: str) -> None:
    """``Runner.on_finish``: mail the parent the run's status (once per run ending)."""
    parent = ids.parent(conv.id)
    last = conv.last_event()
    if parent is None or last is None:
        return
    summary = text.strip()
    if len(summary) > SUMMARY_MAX:
        summary = summary[:SUMMARY_MAX] + f"\n[truncated: read result.md of {conv.id}]"
    if stat := diffs.diffstat(runner.ws, conv.id):  # branch workspaces: what merge brings
        summary += f"\n\nbranch diff stat (merge with `merge`):\n{stat}"
    report = {"status": "idle", "success": success, "summary": summary}
    report["usage"] = runner.run_usage(conv)  # what this run cost, its sub-agents' included
    body = json.dumps(report, ensure_ascii=False)
    created = last.meta.get("created")
    when = created if isinstance(created, dt.datetime) else now()
    msg_id = mail.status_id(conv.id, last.seq, when)
    subject = f"status: idle ({'success' if success else 'failed'})"
    try:
        mail.send(
            runner.ws,
            parent,
            subject,
            body,
            sender=conv.id,
            kind="status",
            msg_id=msg_id,
            event=last.seq,
        )
    except JpfsError as exc:
        # The parent may have been removed; the child's own record still says it all.
        log.warning("status report of %s to %s not sent: %s", conv.id, parent, exc)


def _report(ws: Workspace, parent: str, conv: Conversation, state: State) -> dict[str, Any] | None:
    """The status of a settled child: its status message, or one made from its files."""
    out: dict[str, Any] = {"conversation_id": conv.id, "state": str(state)}
    if state in (State.IDLE, State.FAILED):
        last = conv.last_event()
        seq = last.seq if last is not None else 0
        for msg in reversed(mailfilter.select(ws, parent, sender=conv.id, kind="status")):
            if msg.event == seq:
                try:
                    data = json.loads(msg.body)
                except json.JSONDecodeError:
                    data = {"summary": msg.body}
                return {**out, **data, "message_id": msg.id}
        return None
    if state is State.WAITING:
        from jpfs.services.conversations.onboarding import questions_of_round

        return {**out, "status": "waiting", "success": False, "questions": questions_of_round(conv)}
    return {**out, "status": str(state), "success": False, "summary": ""}


def _fallback(conv: Conversation, state: State) -> dict[str, Any]:
    """A report for a stopped child whose status message never came (e.g. deleted)."""
    result = conv.read(RESULT)
    meta, body = frontmatter.parse(result) if result else ({}, "")
    if state is State.FAILED:
        last = conv.last_event()
        body = last.body if last is not None and last.role == "error" else body
    success = state is State.IDLE and bool(meta.get("success", True))
    summary = body.strip()[:SUMMARY_MAX]
    return {
        "conversation_id": conv.id,
        "state": str(state),
        "status": "idle",
        "success": success,
        "summary": summary,
        "message_id": None,
    }


def wait_settled(
    ws: Workspace,
    conv_ids: Sequence[str],
    *,
    by: str,
    timeout: float = 300.0,
    cancel: threading.Event | None = None,
    grace: float = 2.0,
) -> list[dict[str, Any]]:
    """Wait until each child of ``by`` in ``conv_ids`` has stopped; their status reports.

    No ids means every direct child that is not killed. Reports returned are marked
    read (one commit). A child still running at the timeout is reported with its
    state and ``"pending": true``. A set ``cancel`` (the caller was killed) raises
    ``Cancelled``.
    """
    if conv_ids:
        targets = list(dict.fromkeys(scope.resolve(ws.conv_root, c, within=by) for c in conv_ids))
    else:
        targets = [
            c
            for c in tree.walk(ws.conv_root, by)
            if ids.parent(c) == by and Conversation(ws.conv_root, c).status != "killed"
        ]
    cancel = cancel or threading.Event()
    deadline = time.monotonic() + timeout
    reports: dict[str, dict[str, Any]] = {}
    unreported: dict[str, float] = {}  # settled without a status message, since when
    while True:
        for cid in targets:
            if cid in reports:
                continue
            conv = Conversation(ws.conv_root, cid)
            state = tree.state_of(conv)
            if state not in SETTLED or (
                state is not State.KILLED
                and (mail.pending_input(ws, cid) or locks.is_locked(ws.local_dir, cid))
            ):
                # Running, or about to: caller mail waiting for it is its next input
                # (a mail_send that continues it), so its last report is not the answer.
                # A held run lock counts too: between taking that mail as read and
                # writing its event, a run's files still look settled on the old report.
                unreported.pop(cid, None)
                continue
            report = _report(ws, by, conv, state)
            if report is None:
                # The report is sent just before the state settles; allow it a moment.
                first = unreported.setdefault(cid, time.monotonic())
                if time.monotonic() - first < grace:
                    continue
                report = _fallback(conv, state)
            reports[cid] = report
        if len(reports) == len(targets) or time.monotonic() >= deadline:
            break
        if cancel.wait(POLL):
            raise Cancelled(f"jp_await of {by} cancelled")
    read = [
        m
        for m in mailfilter.select(ws, by, kind="status", unread=True)
        if m.id in {r.get("message_id") for r in reports.values()}
    ]
    mail.mark_read(ws, by, read)
    out = []
    for cid in targets:
        if cid in reports:
            report = reports[cid]
        else:
            state = tree.state_of(Conversation(ws.conv_root, cid))
            report = {
                "conversation_id": cid, "state": str(state), "status": str(state), "pending": True
            }  # fmt: skip
        out.append({**report, **mail_from(ws, by, cid)})
    return out


def mail_from(ws: Workspace, sender: str, conv_id: str) -> dict[str, Any]:
    """What became of ``sender``'s mail to ``conv_id``: read by its agent (delivered at a
    model call, or as its next input) or waiting; nothing when there was none."""
    sent = [m for m in mail.messages(ws, conv_id) if m.sender == sender and m.kind == "message"]
    if not sent:
        return {}
    return {
        "mail": {
            "delivered": [m.id for m in sent if m.read],
            "waiting": [m.id for m in sent if not m.read],
        }
    }
