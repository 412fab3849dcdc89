"""How jpfs names its commits: ``jpfs(<id>): <event>`` plus ``Jpfs-*`` trailers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from jpfs.infra.committer import Change, Identity

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace
    from jpfs.infra.providers.base import Usage


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
) -> Change:
    """A change of conversation ``conv_id``; ``paths`` default to its whole directory."""
    rel = [f"{ws.conv_root_rel}/{conv_id}"] if not paths else list(paths)
    trailers = [("Jpfs-Conversation", conv_id), ("Jpfs-Event", event)]
    if agent:
        trailers.append(("Jpfs-Agent", agent))
    if model:
        trailers.append(("Jpfs-Model", model))
    if usage is not None and (usage.input_tokens or usage.output_tokens):
        trailers.append(("Jpfs-Usage", usage.trailer()))
    subject = f"jpfs({conv_id}): {event}" + (f" {note}" if note else "")
    return Change(paths=tuple(rel), subject=subject, trailers=tuple(trailers), author=author)


def commit(ws: Workspace, conv_id: str, event: str, **kwargs: object) -> str | None:
    return ws.commit(change(ws, conv_id, event, **kwargs))  # type: ignore[arg-type]
