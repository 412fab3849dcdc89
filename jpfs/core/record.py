"""How jpfs names its commits: ``jpfs(<id>): <event>`` plus ``Jpfs-*`` trailers."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Concatenate, ParamSpec

# The committer is imported where a change is made, not here: its package loads pygit2
# and a dozen modules (~60 ms of start-up), and a reader of the trailer names below
# (jpfs blame) commits nothing.
if TYPE_CHECKING:
    from jpfs.core.conversation import Conversation
    from jpfs.core.workspace import Workspace
    from jpfs.infra.committer import Change, Identity
    from jpfs.infra.providers.base import Usage

P = ParamSpec("P")

# Provenance trailers (protocol/provenance.md): a writer's commit on its branch names
# what a reader needs to find the step that wrote it, without searching the record.
EVENT_PATH = "Jpfs-Event-Path"  # record path of a tool event whose call made the edit
TURN = "Jpfs-Turn"  # record path of the model turn that made those calls
RECORD = "Jpfs-Record"  # the record's tip when the edit was committed
MERGED = "Jpfs-Merged"  # on a merge commit: a conversation whose edits it brings in


def machine_name(ws: Workspace) -> str:
    """``sync.machine``, or the host name plus a digest of the workspace path (two
    clones on one host are two machines)."""
    name = ws.config.sync.machine
    if name:
        return name
    digest = hashlib.sha1(str(ws.root).encode()).hexdigest()[:6]
    return f"{socket.gethostname()}-{digest}"


def agent_identity(agent: str) -> Identity:
    """Agents author their own commits; the committer stays the user running jpfs."""
    from jpfs.infra.committer import Identity

    return Identity(f"{agent} (jpfs agent)", f"{agent}@agents.jpfs.invalid")


def usage_trailer(ws: Workspace, usage: Usage, model: str) -> str:
    """``input=N output=N cache_read=N cache_creation=N cost_usd=X`` (no cost_usd when
    the model has no price): one call's usage, as ``jpfs log`` shows it."""
    from jpfs.core.prices import cost_of

    text = (
        f"input={usage.input_tokens} output={usage.output_tokens}"
        f" cache_read={usage.cache_read_input_tokens}"
        f" cache_creation={usage.cache_creation_input_tokens}"
    )
    cost = cost_of(usage, model, ws.prices)
    return text if cost is None else f"{text} cost_usd={cost:.6f}"


def change(
    ws: Workspace,
    conv_id: str,
    event: str,
    paths: Iterable[str] = (),
    *,
    agent: str | None = None,
    model: str | None = None,
    usage: Usage | None = None,
    priced_as: str | None = None,
    author: Identity | None = None,
    note: str | None = None,
    creates: Iterable[tuple[str, str]] = (),
) -> Change:
    """A change of conversation ``conv_id``; ``paths`` default to its whole directory.

    ``priced_as``: the name ``usage`` is priced by when not ``model``
    (:func:`jpfs.core.prices.billed_as`: a gateway's name for the model asked for).
    ``creates``: new files the committer makes before it snapshots (:class:`Change`)."""
    from jpfs.infra.committer import Change

    rel = [f"{ws.conv_root_rel}/{conv_id}"] if not paths else list(paths)
    trailers = [("Jpfs-Conversation", conv_id), ("Jpfs-Event", event)]
    if agent:
        trailers.append(("Jpfs-Agent", agent))
    if model:
        trailers.append(("Jpfs-Model", model))
    if usage is not None and usage.total:
        trailers.append(("Jpfs-Usage", usage_trailer(ws, usage, priced_as or model or "")))
    if ws.config.sync.remote:
        # Several machines share this record: say which one made the change.
        trailers.append(("Jpfs-Machine", machine_name(ws)))
    subject = f"jpfs({conv_id}): {event}" + (f" {note}" if note else "")
    return Change(
        paths=tuple(rel),
        subject=subject,
        trailers=tuple(trailers),
        author=author,
        creates=tuple(creates),
    )


def _committed(
    make: Callable[Concatenate[Workspace, P], Change],
) -> Callable[Concatenate[Workspace, P], str | None]:
    def commit(ws: Workspace, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """:func:`change`, committed: the commit's id (None when nothing changed)."""
        return ws.commit(make(ws, *args, **kwargs))

    return commit


# change's parameters, typed, without writing them twice.
commit = _committed(change)


def edit_links(ws: Workspace, conv: Conversation, call_ids: Iterable[str]) -> list[tuple[str, str]]:
    """The provenance trailers of an edit made by the tool calls ``call_ids`` of ``conv``:
    their tool events, the turn that asked for them, its model, and the record's tip.

    Read from the conversation's own files when the edit is committed, so a reader of
    the commit goes straight to the events (``git blame`` never searches the record)."""
    from jpfs.infra.git import refs

    wanted = set(call_ids)
    events = conv.events()
    links: list[tuple[str, str]] = []
    turn = None
    for i, ev in enumerate(events):
        if ev.role == "tool" and ev.meta.get("tool_call_id") in wanted:
            links.append((EVENT_PATH, f"{conv.id}/events/{ev.path.name}"))
            if turn is None:
                turn = next((e for e in reversed(events[:i]) if e.role == "assistant"), None)
    if turn is not None:
        links.append((TURN, f"{conv.id}/events/{turn.path.name}"))
        if turn.meta.get("model"):
            links.append(("Jpfs-Model", str(turn.meta["model"])))
    tip = refs.resolve(ws.root, f"refs/heads/{ws.record_branch}")
    if tip:
        links.append((RECORD, tip))
    return links
