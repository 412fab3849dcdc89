"""Creating, forking and removing conversations; the active conversation; gc.

These are the core operations behind ``jpfs conversation new|fork|rm|use|show`` and
``jpfs gc``; the tools and the library call the same functions.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jpfs.core import agentconfig, frontmatter, ids, record, transcript, tree
from jpfs.core.conversation import QUESTIONS, RESULT, TASK, Conversation, now
from jpfs.core.eventlog import check_last
from jpfs.core.scope import resolve
from jpfs.core.state import State
from jpfs.core.workspace import Workspace
from jpfs.errors import ConfigError, NotFoundError, StateError
from jpfs.services.conversations import creation
from jpfs.services.conversations.creation import agent_config as agent_config
from jpfs.services.conversations.creation import head_commit as head_commit
from jpfs.services.conversations.creation import title_of as title_of
from jpfs.services.workspace import policy

if TYPE_CHECKING:
    pass

ACTIVE_FILE = "active"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> dt.timedelta:
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"bad duration {text!r}: use a number and s, m, h, d or w (e.g. 30m)")
    return dt.timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def adopt(ws: Workspace, conv: Conversation, base: str | None) -> str:
    """Fill conversation.toml of a conversation a human started with only task.md.

    Keeps whatever the human already wrote there (comments too); the agent defaults to
    ``conversations.default_agent`` and must be one of ``agents.allowed``. The caller
    commits it, with the human's task.md. Returns the agent.
    """
    meta = conv.meta()
    agent = str(meta.get("agent") or ws.config.default_agent)
    creation.authorize(
        ws,
        creation.USER,
        agent,
        None,  # a person's own task.md, at any depth: the user's agents.allowed
        hint="name an allowed agent in conversation.toml, or add it to agents.allowed",
    )
    config = agent_config(ws, agent)
    fields: dict[str, Any] = {
        "title": title_of(conv.read(TASK)),
        "agent": agent,
        "created": now(),
        "status": "active",
        "hidden": False,
        "base": base,
    }
    conv.update(**{k: v for k, v in fields.items() if k not in meta}, config=config)
    policy.adopted(ws, conv, agent)
    return agent


@dataclass(frozen=True)
class NewConversation:
    """A conversation a caller asks for (:func:`create_new`): ``conv_id`` a segment
    under ``parent`` or a whole id (None: generated); ``actor`` who asks for it (the
    user, a calling agent, a caller confined to a subtree), which says who checks its
    agent (:func:`jpfs.services.conversations.creation.authorize`) and whom the commit
    names; ``locked``: the caller holds the conversation's lock."""

    conv_id: str | None = None
    parent: str | None = None
    agent: str | None = None  # None: conversations.default_agent
    title: str = ""
    hidden: bool = False
    tmp: dt.timedelta | None = None
    activate: bool = False
    overrides: Sequence[str] = ()
    onboarding: bool | None = None
    task: str | None = None
    # Given: its configuration (a copy's, a budgeted child's, a session's); None: made
    # from the profile. ``from_profile``: the given one is the profile's own, as
    # :func:`agent_config` made it (admitted at once, as one made here).
    config: Mapping[str, Any] | None = None
    from_profile: bool = False
    extra: Mapping[str, Any] | None = None
    commit: bool = True
    actor: creation.Actor = creation.USER
    locked: bool = False


def new_conversation(ws: Workspace, conv_id: str | None = None, **fields: Any) -> Conversation:
    """:func:`create_new` of ``NewConversation(conv_id, **fields)``: the keyword form."""
    return create_new(ws, NewConversation(conv_id, **fields))


def create_new(ws: Workspace, request: NewConversation) -> Conversation:
    """Create a conversation (optionally with its task) and commit it
    (:func:`jpfs.services.conversations.creation.create`, every rule applied)."""
    parent = request.parent
    if parent is not None:
        parent = resolve(ws.conv_root, parent)
    conv_id = request.conv_id
    full_id = ids.join(parent, conv_id or ids.generate()) if conv_id or parent else ids.generate()
    conv = creation.create(
        ws,
        creation.Spec(
            full_id,
            request.agent or ws.config.default_agent,
            request.actor,
            title=request.title,
            task=request.task,
            config=request.config,
            from_profile=request.from_profile,
            overrides=request.overrides,
            onboarding=request.onboarding,
            hidden=request.hidden,
            expires=now() + request.tmp if request.tmp else None,
            extra=request.extra or {},
            locked=request.locked,
            commit=request.commit,
        ),
    )
    if request.activate:
        set_active(ws, conv.id)
    return conv


def set_agent(ws: Workspace, conv: Conversation, agent: str) -> None:
    """Give ``conv``, which has not worked yet, another agent: its ``[config]`` made
    again from that profile (as at creation: allowed agents, trust at its run). A
    conversation that only failed before any work (a missing API key) may change too;
    `jpfs retry` then runs it with the new agent."""
    meta = conv.meta()
    worked = [n for _, role, n in conv.event_names() if role != "error"]
    if worked or conv.file(QUESTIONS).exists():
        raise StateError(
            f"{conv.id!r} has begun work with {meta.get('agent')!r}; its agent stays (start"
            " a new conversation, or `jpfs c fork` it, for another agent)"
        )
    creation.authorize(ws, creation.USER, agent, ids.parent(conv.id))
    config = agent_config(ws, agent)
    new, old = agentconfig.view(config), conv.settings
    if old.raw and new.workspace != old.workspace:
        raise StateError(
            f"{agent!r} works in a {new.workspace} workspace and {conv.id!r} was"
            f" made for a {old.workspace} one: start a new conversation instead"
        )
    conv.update(agent=agent, config=config)
    # A fresh handle: ``conv`` keeps the snapshot it parsed, which is now the old one.
    policy.adopted(ws, Conversation(ws.conv_root, conv.id), agent)
    record.commit(ws, conv.id, "edit", agent=agent, note=f"(agent: {agent})")


def skip_onboarding(ws: Workspace, conv: Conversation) -> None:
    """Turn onboarding off for ``conv``, which has not started: no question asked, no
    event. Refused (:class:`StateError`) once it has, as there is nothing left to skip."""
    if not conv.settings.onboarding.enabled:
        return
    if conv.event_names() or conv.file(QUESTIONS).exists():
        raise StateError(
            f"--no-onboard applies to a conversation that has not started; {conv.id!r}"
            " has already asked its questions or begun work (answer with `jpfs answer`)"
        )
    config = dict(conv.config)
    config["onboarding"] = {**config["onboarding"], "enabled": False}
    conv.update(config=config)
    record.commit(ws, conv.id, "edit", agent=conv.meta().get("agent"), note="(no onboarding)")


def fork_conversation(
    ws: Workspace,
    source: str,
    *,
    last: int | None = None,
    hidden: bool = False,
    title: str | None = None,
    prompt: str | None = None,
    within: str | None = None,
) -> Conversation:
    """A new child of ``source`` holding its last ``last`` events (all when None).

    A turn still calling tools is copied as its text alone (nothing without text):
    its tool calls stay the source's, never to be run again by the copy.
    """
    check_last(last)  # before anything is made
    source = resolve(ws.conv_root, source, within=within)
    src = Conversation(ws.conv_root, source)
    meta = src.meta()
    seq = src.event_names()[-1][0] if src.event_names() else 0

    def fill(child: Conversation) -> None:
        if last != 0:
            # Renumbered from 1 so the child's transcript is self-contained.
            copied = transcript.copy_for_fork(src.events(), child.events_dir, last)
            # The copies' usage is the source's spending, not the child's.
            child.update(inherited_events=copied)
        if prompt:
            child.append_event("user", prompt)
        elif tree.state_of(child) is State.FINISHING:
            # A copy that ends on the source's final reply is as finished as its source:
            # its result is that reply (no run, and no status mail, for a copy).
            final = child.last_event()
            assert final is not None
            result = frontmatter.render({"event": final.seq, "created": now(), "success": True},
                                        final.body)  # fmt: skip
            child.write(RESULT, result)

    # Its events have one writer at a time (Conversation.exclusive): the lock is held
    # until the fork is committed.
    return creation.create(
        ws,
        creation.Spec(
            ids.join(source, ids.generate()),
            str(meta.get("agent", "")),
            creation.COPY,
            title=title if title is not None else str(meta.get("title", "")),
            config=src.config,
            hidden=hidden,
            extra={"forked_from": f"{source}@{seq}"},
            event="fork",
            note=f"from {source}",
            fill=fill,
        ),
    )


def children(ws: Workspace, conv_id: str) -> list[str]:
    return list(tree.walk(ws.conv_root, conv_id))


def remove_conversation(ws: Workspace, conv_id: str, *, cascade: bool = False) -> list[str]:
    conv_id = resolve(ws.conv_root, conv_id)
    below = children(ws, conv_id)
    if below and not cascade:
        raise StateError(
            f"conversation {conv_id!r} has {len(below)} descendant(s); use --cascade to remove them"
        )
    shutil.rmtree(ws.conv_root.joinpath(*conv_id.split("/")))
    record.commit(ws, conv_id, "rm")
    if get_active(ws) in (conv_id, *below):
        clear_active(ws)
    return [conv_id, *below]


def set_active(ws: Workspace, conv_id: str) -> None:
    conv_id = resolve(ws.conv_root, conv_id)
    ws.ensure_local()
    (ws.local_dir / ACTIVE_FILE).write_text(conv_id + "\n", encoding="utf-8")


def get_active(ws: Workspace) -> str | None:
    try:
        value = (ws.local_dir / ACTIVE_FILE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return value or None


def clear_active(ws: Workspace) -> None:
    (ws.local_dir / ACTIVE_FILE).unlink(missing_ok=True)


def require_active(ws: Workspace) -> str:
    active = get_active(ws)
    if active is None:
        raise NotFoundError("no active conversation (run `jpfs conversation use ID`)")
    return active


def expired(ws: Workspace, at: dt.datetime | None = None) -> list[str]:
    at = at or now()
    out: list[str] = []
    for conv_id in tree.walk(ws.conv_root):
        if any(ids.is_descendant(conv_id, o) for o in out):
            continue
        expires = Conversation(ws.conv_root, conv_id).meta().get("expires")
        if isinstance(expires, dt.datetime) and expires <= at:
            out.append(conv_id)
    return out


def gc(ws: Workspace, at: dt.datetime | None = None) -> tuple[list[str], list[str]]:
    """Remove expired temporary conversations; returns (removed, kept-because-active)."""
    active = get_active(ws)
    removed, kept = [], []
    for conv_id in expired(ws, at):
        if active and ids.is_descendant(active, conv_id, strict=False):
            kept.append(conv_id)
            continue
        removed.extend(remove_conversation(ws, conv_id, cascade=True))
    return removed, kept
