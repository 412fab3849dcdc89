"""How jpfs names its commits: ``jpfs(<id>): <event>`` plus ``Jpfs-*`` trailers."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING

from jpfs.infra.committer import Change, Identity

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace
    from jpfs.infra.providers.base import Usage


def machine_name(ws: Workspace) -> str:
    """``sync.machine``, or the host name plus a digest of the workspace path (two
    clones on one host are two machines)."""
    name = str(ws.config["sync.machine"] or "")
    if name:
        return name
    digest = hashlib.sha1(str(ws.root).encode()).hexdigest()[:6]
    return f"{socket.gethostname()}-{digest}"


def agent_identity(agent: str) -> Identity:
    """Agents author their own commits; the committer stays the user running jpfs."""
    return Identity(f"{agent} (jpfs agent)", f"{agent}@agents.jpfs.invalid")


def change(
    ws: Workspace,
    conv_id: str,
    event: str,
    paths: Iterable[str] = (),
    *,
    agent: str | None = None,
    model: str | None = None,
    usage: Usage | None = None,
    author: Identity | None = None,
    note: str | None = None,
    creates: Iterable[tuple[str, str]] = (),
) -> Change:
    """A change of conversation ``conv_id``; ``paths`` default to its whole directory.

    ``creates``: new files the committer makes before it snapshots (:class:`Change`)."""
    rel = [f"{ws.conv_root_rel}/{conv_id}"] if not paths else list(paths)
    trailers = [("Jpfs-Conversation", conv_id), ("Jpfs-Event", event)]
    if agent:
        trailers.append(("Jpfs-Agent", agent))
    if model:
        trailers.append(("Jpfs-Model", model))
    if usage is not None and (usage.input_tokens or usage.output_tokens):
        trailers.append(("Jpfs-Usage", usage.trailer()))
    if ws.config["sync.remote"]:
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


def commit(ws: Workspace, conv_id: str, event: str, **kwargs: object) -> str | None:
    return ws.commit(change(ws, conv_id, event, **kwargs))  # type: ignore[arg-type]
