"""``jpfs mail send|check|read|delete|filter``: a human's view of any conversation's mailbox.

Each command takes the conversation whose mailbox it acts on first (for ``send``, the
recipient). Mail sent here is from ``@human``, a caller of every conversation: an
idle conversation continues with it in a detached background run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from jpfs.cli.commands.conversation import RootId
from jpfs.cli.context import note, out, out_json, state

if TYPE_CHECKING:
    from jpfs.mail import Message
    from jpfs.workspace import Workspace

app = typer.Typer(help="Send, list, read and delete conversations' mail.", no_args_is_help=True)

Format = Annotated[str, typer.Option("--format", help="table or json")]


def mailbox(ws: Workspace, conv_id: str, root_id: str | None) -> str:
    from jpfs import scope

    within = scope.resolve(ws.conv_root, root_id) if root_id is not None else None
    return scope.resolve(ws.conv_root, conv_id, within=within)


def row(msg: Message) -> str:
    flag = " " if msg.read else "*"
    created = msg.header()["created"]
    return f"{flag}\t{msg.id}\t{msg.kind}\t{msg.sender}\t{created}\t{msg.subject}"


@app.command("send")
def send(
    conv_id: Annotated[str, typer.Argument(metavar="ID", help="The recipient.")],
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
    root_id: RootId = None,
) -> None:
    """Mail a conversation; print the message id. An idle recipient continues with it."""
    import sys

    from jpfs import control

    ws = state.ws()
    to = mailbox(ws, conv_id, root_id)
    text = body if body is not None and body != "-" else sys.stdin.read()
    if not text.strip():
        raise typer.BadParameter("the message body is empty (give BODY or pipe it on stdin)")
    msg, started = control.send(
        ws, to, subject, text, in_reply_to=reply_to, start_run=not no_start, detached=True
    )
    out(msg.id)
    note(f"sent to {to}" + ("; it continues in the background" if started else ""))


@app.command("check")
def check(
    conv_id: Annotated[str, typer.Argument(metavar="ID")],
    fmt: Format = "table",
    root_id: RootId = None,
) -> None:
    """Unread mail of ID: the count (stderr) and one line per message."""
    from jpfs import mail

    ws = state.ws()
    box = mailbox(ws, conv_id, root_id)
    unread = mail.check(ws, box)
    if fmt == "json":
        out_json(
            {
                "conversation_id": box,
                "unread": len(unread),
                "messages": [m.header() for m in unread],
            }
        )
        return
    for msg in unread:
        out(row(msg))
    note(f"{len(unread)} unread in {box}")


@app.command("read")
def read(
    conv_id: Annotated[str, typer.Argument(metavar="ID")],
    msg_id: Annotated[str, typer.Argument(metavar="MESSAGE_ID")],
    fmt: Annotated[str, typer.Option("--format", help="markdown or json")] = "markdown",
    root_id: RootId = None,
) -> None:
    """Print a message of ID's inbox and mark it read."""
    from jpfs import mail

    ws = state.ws()
    msg = mail.read(ws, mailbox(ws, conv_id, root_id), msg_id)
    if fmt == "json":
        out_json(msg.to_json())
        return
    head = msg.header()
    lines = [f"{k}: {head[k]}" for k in ("id", "from", "to", "subject", "created", "kind")]
    if msg.in_reply_to:
        lines.append(f"in_reply_to: {msg.in_reply_to}")
    out("\n".join(lines) + "\n\n" + msg.body)


@app.command("delete")
def delete(
    conv_id: Annotated[str, typer.Argument(metavar="ID")],
    msg_id: Annotated[str, typer.Argument(metavar="MESSAGE_ID")],
    root_id: RootId = None,
) -> None:
    """Delete a message from ID's inbox (git history keeps it)."""
    from jpfs import mail

    ws = state.ws()
    out(mail.delete(ws, mailbox(ws, conv_id, root_id), msg_id).id)


@app.command("filter")
def filter_(
    conv_id: Annotated[str, typer.Argument(metavar="ID")],
    sender: Annotated[str | None, typer.Option("--from", help="Sender id, or @human.")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="message or status")] = None,
    unread: Annotated[
        bool | None, typer.Option("--unread/--read", help="Only unread / read.")
    ] = None,
    since: Annotated[str | None, typer.Option("--since", help="ISO time or duration (2h).")] = None,
    text: Annotated[
        str | None, typer.Option("--text", help="Substring of subject or body.")
    ] = None,
    fmt: Format = "table",
    root_id: RootId = None,
) -> None:
    """Messages of ID's inbox matching every given criterion (* marks unread)."""
    from jpfs import mail

    ws = state.ws()
    found = mail.select(
        ws,
        mailbox(ws, conv_id, root_id),
        sender=sender,
        kind=kind,
        unread=unread,
        since=since,
        text=text,
    )
    if fmt == "json":
        out_json([m.header() for m in found])
        return
    for msg in found:
        out(row(msg))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="mail")
