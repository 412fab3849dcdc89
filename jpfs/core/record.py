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
    if usage is not None and usage.total:
        trailers.append(("Jpfs-Usage", usage_trailer(ws, usage, model or "")))
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
