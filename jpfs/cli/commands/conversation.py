"""``jpfs conversation`` (alias ``jpfs c``): new, ls, print, grep, fork, rm, use, show."""

from __future__ import annotations

from typing import Annotated

import typer

from jpfs.cli.completion import complete_agents, complete_ids
from jpfs.cli.context import note, out, out_json, out_table, state
from jpfs.cli.lazygroup import Commands
from jpfs.cli.options import (
    Format,
    FullIds,
    RootId,
    resolve,
    root_scope,
    scoped,
    shortener,
    subtree,
)


def new(
    conv_id: Annotated[
        str | None, typer.Argument(autocompletion=complete_ids, metavar="[ID]")
    ] = None,
    parent: Annotated[
        str | None,
        typer.Option("--parent", autocompletion=complete_ids, help="Create under this id."),
    ] = None,
    agent: Annotated[
        str | None, typer.Option("--agent", autocompletion=complete_agents, help="Agent profile.")
    ] = None,
    title: Annotated[str, typer.Option("--title")] = "",
    hidden: Annotated[bool, typer.Option("--hidden")] = False,
    tmp: Annotated[
        str | None, typer.Option("--tmp", help="Expire after DURATION (30m, 2h, 1d); see gc.")
    ] = None,
    no_activate: Annotated[bool, typer.Option("--no-activate")] = False,
    no_onboard: Annotated[
        bool, typer.Option("--no-onboard", help="Skip onboarding: the agent starts work.")
    ] = False,
    root_id: RootId = None,
) -> None:
    """Create a conversation and print its id."""
    from jpfs.services.conversations import creation, lifecycle

    ws = state.ws()
    within = root_scope(ws, root_id)
    if parent:
        parent = resolve(ws, parent, within)
    elif within is not None:
        parent = within
    conv = lifecycle.new_conversation(
        ws,
        conv_id,
        parent=parent,
        agent=agent,
        title=title,
        hidden=hidden,
        tmp=lifecycle.parse_duration(tmp) if tmp else None,
        activate=not no_activate,
        onboarding=False if no_onboard else None,
        actor=creation.USER if within is None else creation.agent_actor(),
    )
    out(conv.id)


def ls(
    root: Annotated[
        str | None,
        typer.Option("--root", autocompletion=complete_ids, help="List the descendants of ID."),
    ] = None,
    hidden: Annotated[bool, typer.Option("--hidden", help="Include hidden conversations.")] = False,
    as_tree: Annotated[bool, typer.Option("--tree", help="Indent by depth.")] = False,
    fmt: Format = "text",
    root_id: RootId = None,
    full_ids: FullIds = False,
) -> None:
    """List conversations: id (indented by depth with --tree), state, agent, events, title."""
    from jpfs.core import tree

    ws = state.ws()
    under = subtree(ws, root, root_id)
    left_out: list[str] = []
    levels: dict[str, list[str]] = {}
    items = tree.listing(
        ws.conv_root,
        under,
        include_hidden=hidden,
        cache_dir=ws.local_dir,
        left_out=left_out,
        levels=levels,
    )
    for rel in left_out:
        note(f"jpfs: note: {tree.left_out_note(rel)}")
    if fmt == "json":
        out_json([i.to_json() for i in items])
        return
    base = under.count("/") + 1 if under else 0
    short = shortener(ws, root_id, full_ids, levels)

    def name(conv_id: str) -> str:
        if not as_tree:
            return short(conv_id)
        return "  " * (conv_id.count("/") - base) + short(conv_id).rsplit("/", 1)[-1]

    out_table(
        ("id", "state", "agent", "events", "title"),
        [(name(i.id), i.status, i.agent, i.events_count, i.title) for i in items],
    )


def print_(
    conv_id: Annotated[
        str | None, typer.Argument(autocompletion=complete_ids, metavar="[ID]")
    ] = None,
    last: Annotated[int | None, typer.Option("--last", help="Only the last N events.")] = None,
    fmt: Format = "text",
    root_id: RootId = None,
) -> None:
    """Print a conversation: markdown (text), or everything as JSON."""
    from jpfs.core import transcript
    from jpfs.core.conversation import Conversation

    ws = state.ws()
    conv = Conversation(ws.conv_root, scoped(ws, conv_id, root_id))
    if fmt == "json":
        out_json(transcript.as_json(conv, last))
    else:
        out(transcript.markdown(conv, last))


def grep(
    pattern: str,
    conv_ids: Annotated[
        list[str] | None,
        typer.Option("--id", autocompletion=complete_ids, help="Search only these conversations."),
    ] = None,
    root: Annotated[
        str | None, typer.Option("--root", autocompletion=complete_ids, help="Search below ID.")
    ] = None,
    root_id: RootId = None,
    ignore_case: Annotated[
        bool, typer.Option("-i", "--ignore-case", help="Match upper and lower case alike.")
    ] = False,
    regex: Annotated[
        bool, typer.Option("--regex", help="PATTERN is a regular expression.")
    ] = False,
    hidden: Annotated[
        bool,
        typer.Option("--hidden", help="Search hidden conversations too (`c new --hidden`)."),
    ] = False,
    files_with_matches: Annotated[
        bool, typer.Option("-l", "--files-with-matches", help="Print only ID:FILE of each file.")
    ] = False,
    count: Annotated[
        bool, typer.Option("-c", "--count", help="Print ID:FILE:N, the matches in each file.")
    ] = False,
    context: Annotated[
        int,
        typer.Option("-C", "--context", metavar="N", help="Show N lines around each match."),
    ] = 0,
    fmt: Format = "text",
    full_ids: FullIds = False,
) -> None:
    """Search conversations, grep-style: one ID:FILE:LINE: text per match (matches
    highlighted on a terminal). Exit 0 when found, 1 when not, 2 on a bad pattern."""
    from jpfs.cli import grepview  # imports jpfs.services.views.search
    from jpfs.services.views import search

    check_grep_flags(files_with_matches, count, context, fmt)
    ws = state.ws()
    only = [scoped(ws, c, root_id) for c in conv_ids or []]
    under = subtree(ws, root, root_id)
    matches = search.grep(
        ws.conv_root,
        pattern,
        only=only,
        under=under,
        regex=regex,
        ignore_case=ignore_case,
        include_hidden=hidden,
        cache_dir=ws.local_dir,
    )
    files: dict[tuple[str, str], int] = {}
    for m in matches:
        files[(m.id, m.file)] = files.get((m.id, m.file), 0) + 1
    if fmt == "json":
        if files_with_matches or count:
            out_json(
                [
                    {"id": i, "file": f, **({"count": n} if count else {})}
                    for (i, f), n in files.items()
                ]
            )
        else:
            out_json([m.to_json() for m in matches])
    elif files_with_matches or count:
        short = shortener(ws, root_id, full_ids)
        for (conv_id, file), n in files.items():
            out(f"{short(conv_id)}:{file}" + (f":{n}" if count else ""))
    else:
        paint = grepview.painter(pattern, regex=regex, ignore_case=ignore_case)
        shown = search.with_context(ws.conv_root, matches, context) if context else matches
        short = shortener(ws, root_id, full_ids)
        for line in shown:
            out(grepview.render(line, paint, short))
    if not matches:
        raise typer.Exit(1)


def check_grep_flags(files_with_matches: bool, count: bool, context: int, fmt: str) -> None:
    if files_with_matches and count:
        raise typer.BadParameter("-l and -c cannot go together", param_hint="-l/-c")
    if context < 0:
        raise typer.BadParameter(f"must be 0 or more, got {context}", param_hint="-C")
    if context and (files_with_matches or count or fmt == "json"):
        raise typer.BadParameter(
            "-C applies only to the text listing of matches (not -l, -c or --format json)",
            param_hint="-C",
        )


def fork(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    last: Annotated[
        int | None, typer.Option("--last", help="Copy the last N events (0: a blank child).")
    ] = None,
    hidden: Annotated[bool, typer.Option("--hidden")] = False,
    title: Annotated[str | None, typer.Option("--title")] = None,
    root_id: RootId = None,
) -> None:
    """Create a child of ID holding its last N events; print the child's id."""
    from jpfs.services.conversations import lifecycle

    ws = state.ws()
    child = lifecycle.fork_conversation(
        ws, scoped(ws, conv_id, root_id), last=last, hidden=hidden, title=title
    )
    out(child.id)


def rm(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    cascade: Annotated[bool, typer.Option("--cascade", help="Also remove descendants.")] = False,
    root_id: RootId = None,
) -> None:
    """Remove a conversation (it stays in git history)."""
    from jpfs.services.conversations import lifecycle

    ws = state.ws()
    removed = lifecycle.remove_conversation(ws, scoped(ws, conv_id, root_id), cascade=cascade)
    note(f"removed {len(removed)} conversation(s)")


def use(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    root_id: RootId = None,
) -> None:
    """Make ID the active conversation (local state, never committed)."""
    from jpfs.services.conversations import lifecycle

    ws = state.ws()
    lifecycle.set_active(ws, scoped(ws, conv_id, root_id))


def set_agent(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    agent: Annotated[str, typer.Argument(autocompletion=complete_agents, metavar="AGENT")],
    root_id: RootId = None,
) -> None:
    """Give ID, which has not worked yet, another AGENT (its profile's configuration
    replaces the old one). After a failure before any work, `jpfs retry ID` runs it."""
    from jpfs.core import tree
    from jpfs.core.conversation import Conversation
    from jpfs.services.conversations import lifecycle

    ws = state.ws()
    conv = Conversation(ws.conv_root, scoped(ws, conv_id, root_id))
    lifecycle.set_agent(ws, conv, agent)
    failed = str(tree.state_of(Conversation(ws.conv_root, conv.id))) == "failed"
    note(f"{conv.id} now runs {agent}" + (f"; `jpfs retry {conv.id}` runs it" if failed else ""))


def show(
    conv_id: Annotated[
        str | None, typer.Argument(autocompletion=complete_ids, metavar="[ID]")
    ] = None,
    fmt: Format = "text",
    root_id: RootId = None,
) -> None:
    """Print the active conversation's id, or the details of ID (`key: value` lines).

    With --format json: the details (of ID, or of the active conversation) as one object.
    """
    from jpfs.core import failures, tree
    from jpfs.core.conversation import Conversation

    ws = state.ws()
    target = scoped(ws, conv_id, root_id)
    if conv_id is None and fmt == "text":
        out(target)
        return
    conv = Conversation(ws.conv_root, target)
    details = tree.info(conv).to_json()
    # Why a failed one failed (a budget spent, a provider that gave up): its error event,
    # or, where its files refused that, the failure kept here (jpfs.core.failures).
    kept = failures.of(ws.local_dir, conv)
    if kept is not None:
        details["status"], details["error"] = "failed", kept.shown
    else:
        last = conv.last_event() if details["status"] == "failed" else None
        details["error"] = last.body.strip() if last is not None and last.role == "error" else None
    # What it spent: its own model calls, and with all its descendants' (jpfs.core.usage).
    details["usage"] = ws.spending.of(target).to_json()
    details["subtree_usage"] = ws.spending.subtree(target).to_json()
    if fmt == "json":
        out_json(details)
        return
    out("".join(f"{key}: {_text(value)}".rstrip() + "\n" for key, value in details.items()))


def _text(value: object) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={_text(v) or 'null'}" for k, v in value.items())
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


COMMANDS = Commands(
    help="Create, list, read and search conversations (alias: jpfs c).",
    entries={
        "new": new,
        "ls": ls,
        "print": print_,
        "grep": grep,
        "fork": fork,
        "rm": rm,
        "use": use,
        "set-agent": set_agent,
        "show": show,
    },
)
