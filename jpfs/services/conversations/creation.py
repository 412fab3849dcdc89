"""The one way a conversation is made: :func:`create` of a :class:`Spec`.

Every way in creates through here: the CLI (``c new``, ``c fork``, ``query``), the
tools (``jp_query``, ``fork``), MCP (its session's conversation, its ``jp_query``), the
library (``onboard``, ``reply``, ``call``, ``spawn``, ``fork_tasks``) and batch
onboarding. So every new conversation gets the same rules, in one place:

- :func:`authorize`: may this actor give it this agent (``agents.allowed`` for the
  user; an agent's own list was checked by its tool; a copy keeps its source's);
- its id checked and its parent existing (:func:`jpfs.core.conversation.create`);
- the conversation lock, held from before its directory exists until it is committed,
  so that no daemon runs a half-made conversation;
- the branch plan (a ``workspace = "branch"`` profile's branch and worktree);
- secrets redacted (:mod:`jpfs.core.secrets`) from all it is given in words: the
  task, the title, any text of ``conversation.toml`` (a batch's tasks); copies of a
  source's events are redacted as every event is written;
- one commit.

What is made without this function is a conversation a person wrote by hand (a
``task.md``): the daemon fills in its ``conversation.toml``
(:func:`jpfs.services.conversations.lifecycle.adopt`), redacting the title it takes
from the task, and commits the person's own files as they are.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from jpfs.core import ids, locks, record, secrets
from jpfs.core.conversation import TASK, Conversation
from jpfs.core.conversation import create as make_files
from jpfs.core.profiles import apply_overrides
from jpfs.core.workspace import Workspace
from jpfs.errors import ProfileError
from jpfs.infra import git
from jpfs.services.forks import branches
from jpfs.services.workspace import policy

if TYPE_CHECKING:
    from jpfs.infra.committer import Identity


@dataclass(frozen=True)
class Actor:
    """Who asks for a conversation, which says who checks its agent.

    ``user``: a person (the CLI, the library): the agent must be in ``agents.allowed``,
    or one the parent's profile may call. ``agent``: a calling agent, or a caller
    confined to a subtree (MCP, ``--root-id``, a tool script), whose tool checked the
    agent against its own list (``may_start``, when it is known here). ``copy``: a
    fork, with the agent and configuration of the conversation it copies."""

    kind: Literal["user", "agent", "copy"]
    may_start: tuple[str, ...] | None = None
    author: Identity | None = None  # who the first commit names (None: the user)


USER = Actor("user")
COPY = Actor("copy")


def agent_actor(author: Identity | None = None, may_start: Sequence[str] | None = None) -> Actor:
    return Actor("agent", None if may_start is None else tuple(may_start), author)


@dataclass(frozen=True)
class Spec:
    """A conversation to make. ``config`` None: made from ``agent``'s profile (with
    ``overrides`` and ``onboarding``); given: a copy's, a budgeted child's, a session's.
    ``fill`` writes what it copies from another conversation, under the lock, before
    the task; ``locked``: the caller holds the lock already (a query, whose lock covers
    the run too)."""

    id: str
    agent: str
    actor: Actor = USER
    title: str = ""
    task: str | None = None
    config: Mapping[str, Any] | None = None
    from_profile: bool = False  # ``config`` is agent_config's, of this agent: admitted at once
    overrides: Sequence[str] = ()
    onboarding: bool | None = None
    hidden: bool = False
    expires: dt.datetime | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    event: str = ""  # the commit's event: "task" with a task, else "new"
    note: str | None = None
    fill: Callable[[Conversation], None] | None = None
    locked: bool = False
    commit: bool = True


def create(ws: Workspace, spec: Spec) -> Conversation:
    """Make the conversation ``spec`` says, by every rule (the module docstring)."""
    if spec.commit:
        ws.ensure_record()  # refuse (old layout, SHA-256) before writing anything
    conv_id = ids.validate(spec.id)
    authorize(ws, spec.actor, spec.agent, ids.parent(conv_id))
    made_here = spec.config is None or spec.from_profile
    config = (
        agent_config(ws, spec.agent, spec.overrides, spec.onboarding)
        if spec.config is None
        else dict(spec.config)
    )
    counts: Counter[str] = Counter()
    extra = {key: secrets.redact_tree(value, counts) for key, value in spec.extra.items()}
    fields = {"base": head_commit(ws), **branches.plan(ws, conv_id, config), **extra}
    held = (
        contextlib.nullcontext() if spec.locked else locks.conversation_lock(ws.local_dir, conv_id)
    )
    with held:
        conv = make_files(
            ws.conv_root,
            conv_id,
            agent=spec.agent,
            title=secrets.redact(spec.title)[0],  # a title is a task's first line
            hidden=spec.hidden,
            expires=spec.expires,
            config=config,
            extra=fields,
        )
        if made_here:
            policy.adopted(ws, conv, spec.agent)
        if "branch" in fields:
            branches.ensure_worktree(ws, branches.require_fork(ws, conv.id))
        if spec.fill is not None:
            spec.fill(conv)
        if spec.task is not None:
            task = secrets.redact(spec.task)[0]  # from a caller's words: the record is shared
            conv.write(TASK, task if task.endswith("\n") else task + "\n")
        if spec.commit:
            event = spec.event or ("task" if spec.task is not None else "new")
            record.commit(
                ws, conv.id, event, agent=spec.agent, author=spec.actor.author, note=spec.note
            )
    return conv


def authorize(
    ws: Workspace, actor: Actor, agent: str, parent: str | None, *, hint: str | None = None
) -> None:
    """Refuse ``agent`` where ``actor`` may not give it to a conversation under ``parent``
    (:class:`ProfileError`, saying what to do, or ``hint``). The one place the
    allow-list is asked: every way of giving a conversation an agent comes here with
    who acts, never with a flag that skips the check."""
    if actor.kind == "user":
        _require_allowed(ws, agent, parent, hint=hint)
    elif actor.kind == "agent" and actor.may_start is not None and agent not in actor.may_start:
        raise ProfileError(
            f"profile {agent!r} is not one this agent may start"
            f" (allowed: {', '.join(actor.may_start) or 'none'})"
        )


def _require_allowed(
    ws: Workspace, agent: str, parent: str | None = None, *, hint: str | None = None
) -> None:
    """Refuse ``agent`` where the user may not start it: at the top level (the CLI, the
    library, a hand-written task.md) it must be in ``agents.allowed``; below ``parent``,
    in ``agents.allowed`` or in the agents ``parent``'s profile may call. Every path
    that gives a conversation an agent from a profile for the user asks here (a calling
    agent's tool checks its own list: jp_query, MCP), so that a profile shipped off
    (the example ``openai`` researchers) stays off until the user names it."""
    allowed = list(ws.config.agents_allowed)
    if agent in allowed:
        return
    if parent is None:
        where = "agents.allowed"
        listed = ", ".join(f'"{a}"' for a in [*allowed, agent])
        hint = hint or f"to run it, `jpfs config set agents.allowed '[{listed}]'`"
    else:
        called = Conversation(ws.conv_root, parent).settings.tools.agents
        if agent in called:
            return
        allowed += [a for a in called if a not in allowed]
        where = f"agents.allowed or the agents {parent!r} may call"
        hint = hint or (
            f"name one of those, or add it to agents.allowed or to [tools] agents in the"
            f" profile of {parent!r}"
        )
    suffix = f": {hint}" if hint else ""
    raise ProfileError(
        f"agent {agent!r} is not in {where} ({', '.join(allowed) or 'none'}){suffix}"
    )


def agent_config(
    ws: Workspace, agent: str, overrides: Sequence[str] = (), onboarding: bool | None = None
) -> dict[str, Any]:
    config = apply_overrides(policy.load_profile(ws, agent, trusted=False), overrides)
    if onboarding is not None:
        config["onboarding"]["enabled"] = onboarding
    return config


def head_commit(ws: Workspace) -> str | None:
    proc = git.run(ws.root, ["rev-parse", "--verify", "-q", "HEAD"], check=False)
    return proc.stdout.strip() or None


_HEADING = re.compile(r"^\s*#*\s*")


def title_of(task: str | None) -> str:
    """A conversation's default title: the first non-empty line of its task (no ``#``s),
    at most 80 characters, so listings say what each sub-conversation is about. Secrets
    are redacted before the cut, so none is half kept."""
    for line in secrets.redact(task or "")[0].splitlines():
        text = _HEADING.sub("", line).strip()
        if text:
            return text[:80]
    return ""
