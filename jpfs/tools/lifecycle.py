"""Lifecycle tools: ``fork``, ``kill``, ``jp_await`` and ``mail_send|check|read|delete|filter``.

Thin adapters over :mod:`jpfs.services.run.control`, :mod:`jpfs.services.conversations.reports`,
:mod:`jpfs.services.conversations.mail` and :mod:`jpfs.services.conversations.mailfilter`; the
caller is always ``ctx.conversation`` (never an id the model supplies), so scope
holds however the model words its arguments. Results are JSON; every tool that
creates or names a conversation returns its id as ``conversation_id``. An agent
whose profile cannot delegate (no ``fork`` or ``jp_query``) may mail its parent
only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jpfs.core.tool import JsonDict, Tool, ToolContext
from jpfs.services.conversations import mail, mailfilter, reports
from jpfs.services.run import control
from jpfs.tools.conversation import BUDGET_PROPERTIES, runner_of

DELEGATING = frozenset({"fork", "jp_query"})
MAX_AWAIT = 3600.0


def _dump(data: Any) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False)


def _parent_only(ctx: ToolContext) -> bool:
    return not DELEGATING.intersection(ctx.settings.tools.allow)


def fork(ctx: ToolContext, args: JsonDict) -> str:
    child = control.fork(
        ctx.ws(),
        ctx.conversation,
        str(args["prompt"]),
        by=ctx.conversation,
        call_id=ctx.call_id,
        runner=runner_of(ctx),
        budget_tokens=args.get("budget_tokens"),
        budget_usd=args.get("budget_usd"),
    )
    return _dump(
        {
            "conversation_id": child,
            "status": "running",
            "note": "it mails you a status message when it stops; gather with jp_await",
        }
    )


def kill(ctx: ToolContext, args: JsonDict) -> str:
    runner = runner_of(ctx)
    killed = control.kill(
        ctx.ws(),
        str(args["id"]),
        by=ctx.conversation,
        cascade=bool(args.get("cascade", False)),
        app=runner.app if runner is not None else None,
    )
    return _dump({"conversation_id": str(args["id"]), "killed": killed})


def jp_await(ctx: ToolContext, args: JsonDict) -> str:
    timeout = min(max(float(args.get("timeout", 300.0)), 0.0), MAX_AWAIT)
    found = reports.wait_settled(
        ctx.ws(),
        [str(i) for i in args.get("ids") or []],
        by=ctx.conversation,
        timeout=timeout,
        cancel=ctx.cancel,
    )
    return _dump(found) if found else "[] (no children to wait for)"


def mail_send(ctx: ToolContext, args: JsonDict) -> str:
    msg, continued = control.send(
        ctx.ws(),
        str(args["to"]),
        str(args.get("subject", "")),
        str(args["body"]),
        sender=ctx.conversation,
        in_reply_to=args.get("in_reply_to"),
        parent_only=_parent_only(ctx),
        runner=runner_of(ctx),
        interrupt=bool(args.get("interrupt", False)),
    )
    return _dump({"message_id": msg.id, "conversation_id": msg.to, "continued": continued})


def mail_check(ctx: ToolContext, args: JsonDict) -> str:
    unread = mail.check(ctx.ws(), ctx.conversation)
    return _dump({"unread": len(unread), "messages": [m.header() for m in unread]})


def mail_read(ctx: ToolContext, args: JsonDict) -> str:
    return _dump(mail.read(ctx.ws(), ctx.conversation, str(args["id"])).to_json())


def mail_delete(ctx: ToolContext, args: JsonDict) -> str:
    msg = mail.delete(ctx.ws(), ctx.conversation, str(args["id"]))
    return _dump({"deleted": msg.id})


def mail_filter(ctx: ToolContext, args: JsonDict) -> str:
    found = mailfilter.select(
        ctx.ws(),
        ctx.conversation,
        sender=args.get("from"),
        kind=args.get("kind"),
        unread=args.get("unread"),
        since=args.get("since"),
        text=args.get("text"),
    )
    return _dump([m.header() for m in found])


def _schema(props: JsonDict, required: list[str]) -> JsonDict:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


MSG_ID: JsonDict = {
    "type": "string",
    "minLength": 1,
    "description": "A message id (m-...) from mail_check.",
}


def build(config: Mapping[str, Any]) -> dict[str, Tool]:
    del config  # the lifecycle tools are the same for every profile
    # The same specs for every profile (the MCP server lists them); the parent-only
    # rule for agents that cannot delegate is enforced when the tool runs.
    to_desc = (
        "Your parent's conversation id (or \"parent\"), or one of your descendants'"
        " (agents that cannot delegate may mail their parent only)."
    )
    tools = [
        Tool(
            "fork",
            "Start a sub-agent in the background: a copy of you with this conversation so far"
            " plus `prompt` as its task. Returns at once with its conversation_id; when it"
            " stops it mails you a status message. Gather with jp_await, continue it with"
            " mail_send, stop it with kill.",
            _schema(
                {
                    "prompt": {"type": "string", "description": "The child's task."},
                    **BUDGET_PROPERTIES,
                },
                ["prompt"],
            ),
            fork,
        ),
        Tool(
            "kill",
            "Stop one of your sub-agents now and mark it killed (it is never resumed);"
            " cascade=true also kills its descendants.",
            _schema(
                {
                    "id": {
                        "type": "string",
                        "minLength": 1,
                        "description": "A descendant's conversation_id.",
                    },
                    "cascade": {"type": "boolean", "description": "Kill its descendants too."},
                },
                ["id"],
            ),
            kill,
        ),
        Tool(
            "jp_await",
            "Wait until the given sub-agents stop (idle, failed, killed or asking questions)"
            " or the timeout passes; returns their status reports as JSON, one per"
            " conversation_id (still running ones have pending=true). No ids: all your"
            " direct children that are not killed.",
            _schema(
                {
                    "ids": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "conversation_ids of your descendants.",
                    },
                    "timeout": {
                        "type": "number",
                        "minimum": 0,
                        "description": "Seconds to wait at most (default 300).",
                    },
                },
                [],
            ),
            jp_await,
        ),
        Tool(
            "mail_send",
            "Send a message. Mail to an idle sub-agent continues it with the message as its"
            " next input; a running one reads it at its next model call.",
            _schema(
                {
                    "to": {"type": "string", "minLength": 1, "description": to_desc},
                    "body": {"type": "string", "description": "The message (markdown)."},
                    "subject": {"type": "string", "description": "One line (optional)."},
                    "in_reply_to": MSG_ID,
                    "interrupt": {
                        "type": "boolean",
                        "description": "Cut short the sub-agent's model call in flight so it"
                        " reads this at once (a running tool is never cut short).",
                    },
                },
                ["to", "body"],
            ),
            mail_send,
        ),
        Tool(
            "mail_check",
            "Your unread mail: the count and each message's header (id, from, subject,"
            " created, kind: message or status).",
            _schema({}, []),
            mail_check,
        ),
        Tool(
            "mail_read",
            "Read one message of your inbox (marks it read).",
            _schema({"id": MSG_ID}, ["id"]),
            mail_read,
        ),
        Tool(
            "mail_delete",
            "Delete a message from your inbox (it stays in the git history).",
            _schema({"id": MSG_ID}, ["id"]),
            mail_delete,
        ),
        Tool(
            "mail_filter",
            "Search your inbox; every given criterion must match. Returns headers.",
            _schema(
                {
                    "from": {"type": "string", "description": "Sender conversation id or @human."},
                    "kind": {"type": "string", "enum": list(mail.KINDS)},
                    "unread": {
                        "type": "boolean",
                        "description": "true: unread only; false: read only.",
                    },
                    "since": {
                        "type": "string",
                        "description": "ISO date/time, or a duration ago such as 30m or 2h.",
                    },
                    "text": {"type": "string", "description": "Substring of subject or body."},
                },
                [],
            ),
            mail_filter,
        ),
    ]
    return {t.name: t for t in tools}
