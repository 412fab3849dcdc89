"""``jpfs mail send|check|read|delete|filter``: a human's view of any conversation's mailbox.

Each command takes the conversation whose mailbox it acts on first (for ``send``, the
recipient). Mail sent here is from ``@human``, a caller of every conversation: an
idle conversation continues with it in a detached background run.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jpfs.cli.completion import complete_ids
from jpfs.cli.context import note, out, out_json, out_table, state
from jpfs.cli.lazygroup import Commands
from jpfs.cli.options import Format, RootId, scoped

if TYPE_CHECKING:
    from jpfs.services.conversations.mail import Message


def header(msg: Message) -> dict[str, Any]:
    """A message's header with every key present (``null`` when not set)."""
    head = msg.header()
    return {**head, "in_reply_to": head.get("in_reply_to"), "event": head.get("event")}


def listing(messages: Sequence[Message]) -> None:
    """A table of messages; NEW marks the unread ones with ``*``."""
    out_table(
        ("new", "id", "kind", "from", "created", "subject"),
        [
            ("" if m.read else "*", m.id, m.kind, m.sender, m.header()["created"], m.subject)
            for m in messages
        ],
    )


def send(
    conv_id: Annotated[
        str, typer.Argument(autocompletion=complete_ids, metavar="ID", help="The recipient.")
    ],
    body: Annotated[
        str | None, typer.Argument(metavar="[BODY]", help="- or absent: stdin.")
    ] = None,
    subject: Annotated[str, typer.Option("--subject", "-s", help="One line.")] = "",
    reply_to: Annotated[
        str | None, typer.Option("--reply-to", help="In reply to MESSAGE_ID.")
    ] = None,
    no_start: Annotated[
        bool, typer.Option("--no-start", help="Do not run the recipient here (a daemon will).")
    ] = False,
    interrupt: Annotated[
        bool,
        typer.Option(
            "--interrupt",
            help="Cut short the recipient's model call in flight to read this at once"
            " (a running tool is never cut short).",
        ),
    ] = False,
    root_id: RootId = None,
) -> None:
    """Mail a conversation; print the message id. An idle recipient continues with it; a
    running one reads it at its next model call."""
    from jpfs.services.run import control

    ws = state.ws()
    to = scoped(ws, conv_id, root_id)
    text = body if body is not None and body != "-" else sys.stdin.read()
    if not text.strip():
        raise typer.BadParameter("the message body is empty (give BODY or pipe it on stdin)")
    msg, started = control.send(
        ws,
        to,
        subject,
        text,
        in_reply_to=reply_to,
        start_run=not no_start,
        detached=True,
        interrupt=interrupt,
    )
    out(msg.id)
    note(f"sent to {to}" + ("; it continues in the background" if started else ""))


def check(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    fmt: Format = "text",
    root_id: RootId = None,
) -> None:
    """Unread mail of ID: the count (stderr) and one line per message."""
    from jpfs.services.conversations import mail

    ws = state.ws()
    box = scoped(ws, conv_id, root_id)
    unread = mail.check(ws, box)
    if fmt == "json":
        out_json(
            {
                "conversation_id": box,
                "unread": len(unread),
                "messages": [header(m) for m in unread],
            }
        )
        return
    listing(unread)
    note(f"{len(unread)} unread in {box}")


def read(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    msg_id: Annotated[str, typer.Argument(metavar="MESSAGE_ID")],
    fmt: Format = "text",
    root_id: RootId = None,
) -> None:
    """Print a message of ID's inbox and mark it read."""
    from jpfs.services.conversations import mail

    ws = state.ws()
    msg = mail.read(ws, scoped(ws, conv_id, root_id), msg_id)
    if fmt == "json":
        out_json({**header(msg), "body": msg.body})
        return
    head = msg.header()
    lines = [f"{k}: {head[k]}" for k in ("id", "from", "to", "subject", "created", "kind")]
    if msg.in_reply_to:
        lines.append(f"in_reply_to: {msg.in_reply_to}")
    out("\n".join(lines) + "\n\n" + msg.body)


def delete(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    msg_id: Annotated[str, typer.Argument(metavar="MESSAGE_ID")],
    root_id: RootId = None,
) -> None:
    """Delete a message from ID's inbox (git history keeps it)."""
    from jpfs.services.conversations import mail

    ws = state.ws()
    out(mail.delete(ws, scoped(ws, conv_id, root_id), msg_id).id)


def filter_(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    sender: Annotated[str | None, typer.Option("--from", help="Sender id, or @human.")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="message or status")] = None,
    unread: Annotated[
        bool | None, typer.Option("--unread/--read", help="Only unread / read.")
    ] = None,
    since: Annotated[str | None, typer.Option("--since", help="ISO time or duration (2h).")] = None,
    text: Annotated[
        str | None, typer.Option("--text", help="Substring of subject or body.")
    ] = None,
    fmt: Format = "text",
    root_id: RootId = None,
) -> None:
    """Messages of ID's inbox matching every given criterion (* marks unread)."""
    from jpfs.services.conversations import mailfilter

    ws = state.ws()
    found = mailfilter.select(
        ws,
        scoped(ws, conv_id, root_id),
        sender=sender,
        kind=kind,
        unread=unread,
        since=since,
        text=text,
    )
    if fmt == "json":
        out_json([header(m) for m in found])
        return
    listing(found)


COMMANDS = Commands(
    help="Send, list, read and delete conversations' mail.",
    entries={
        "send": send,
        "check": check,
        "read": read,
        "delete": delete,
        "filter": filter_,
        "ls": filter_,
    },
    helps={"ls": "List the messages of ID's inbox, as filter does (* marks unread)."},
)
