"""Creating, forking and removing conversations; the active conversation; gc.

These are the core operations behind ``jpfs conversation new|fork|rm|use|show`` and
``jpfs gc``; the tools and the library call the same functions.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jpfs.core import frontmatter, ids, locks, record, secrets, transcript, tree
from jpfs.core.conversation import QUESTIONS, RESULT, TASK, Conversation, create, now
from jpfs.core.eventlog import check_last
from jpfs.core.profiles import apply_overrides
from jpfs.core.scope import resolve
from jpfs.core.state import State
from jpfs.core.workspace import Workspace
from jpfs.errors import ConfigError, NotFoundError, ProfileError, StateError
from jpfs.infra import git
from jpfs.services.forks import branches
from jpfs.services.workspace import policy

if TYPE_CHECKING:
    from jpfs.infra.committer import Identity

ACTIVE_FILE = "active"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> dt.timedelta:
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"bad duration {text!r}: use a number and s, m, h, d or w (e.g. 30m)")
    return dt.timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


_HEADING = re.compile(r"^\s*#*\s*")


def title_of(task: str | None) -> str:
    """A conversation's default title: the first non-empty line of its task (no ``#``s),
    at most 80 characters, so listings say what each sub-conversation is about."""
    for line in (task or "").splitlines():
        text = _HEADING.sub("", line).strip()
        if text:
            return text[:80]
    return ""


def head_commit(ws: Workspace) -> str | None:
    proc = git.run(ws.root, ["rev-parse", "--verify", "-q", "HEAD"], check=False)
    return proc.stdout.strip() or None


def agent_config(
    ws: Workspace, agent: str, overrides: Sequence[str] = (), onboarding: bool | None = None
) -> dict[str, Any]:
    config = apply_overrides(policy.load_profile(ws, agent, trusted=False), overrides)
    if onboarding is not None:
        config["onboarding"]["enabled"] = onboarding
    return config


def require_allowed(
    ws: Workspace, agent: str, parent: str | None = None, *, hint: str | None = None
) -> None:
    """Refuse ``agent`` where the user may not start it: at the top level (the CLI, the
    library, a hand-written task.md) it must be in ``agents.allowed``; below ``parent``,
    in ``agents.allowed`` or in the agents ``parent``'s profile may call. Every path
    that gives a conversation an agent from a profile for the user asks here (a calling
    agent's tool checks its own list: jp_query, MCP), so that a profile shipped off
    (the example ``openai`` researchers) stays off until the user names it."""
    allowed = [str(a) for a in ws.config["agents.allowed"]]
    if agent in allowed:
        return
    if parent is None:
        where = "agents.allowed"
        listed = ", ".join(f'"{a}"' for a in [*allowed, agent])
        hint = hint or f"to run it, `jpfs config set agents.allowed '[{listed}]'`"
    else:
        called = Conversation(ws.conv_root, parent).config.get("tools", {}).get("agents", [])
        if agent in [str(a) for a in called]:
            return
        allowed += [str(a) for a in called if str(a) not in allowed]
        where = f"agents.allowed or the agents {parent!r} may call"
        hint = hint or (
            f"name one of those, or add it to agents.allowed or to [tools] agents in the"
            f" profile of {parent!r}"
        )
    suffix = f": {hint}" if hint else ""
    raise ProfileError(
        f"agent {agent!r} is not in {where} ({', '.join(allowed) or 'none'}){suffix}"
    )


def adopt(ws: Workspace, conv: Conversation, base: str | None) -> str:
    """Fill conversation.toml of a conversation a human started with only task.md.

    Keeps whatever the human already wrote there (comments too); the agent defaults to
    ``conversations.default_agent`` and must be one of ``agents.allowed``. The caller
    commits it, with the human's task.md. Returns the agent.
    """
    meta = conv.meta()
    agent = str(meta.get("agent") or ws.config["conversations.default_agent"])
    require_allowed(
        ws, agent, hint="name an allowed agent in conversation.toml, or add it to agents.allowed"
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


def new_conversation(
    ws: Workspace,
    conv_id: str | None = None,
    *,
    parent: str | None = None,
    agent: str | None = None,
    title: str = "",
    hidden: bool = False,
    tmp: dt.timedelta | None = None,
    activate: bool = False,
    overrides: Sequence[str] = (),
    onboarding: bool | None = None,
    task: str | None = None,
    config: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    commit: bool = True,
    author: Identity | None = None,
    scoped: bool = False,
) -> Conversation:
    """Create a conversation (optionally with its task) and commit it.

    ``author`` is who wrote the task: the user (None) or a calling agent. ``scoped``:
    made for a caller confined to a subtree (``--root-id``, a seed's tool script), whose
    tool checked the profile against its own list.
    """
    if commit:
        ws.ensure_record()  # refuse (old layout, SHA-256) before writing anything
    if parent is not None:
        parent = resolve(ws.conv_root, parent)
    full_id = ids.join(parent, conv_id or ids.generate()) if conv_id or parent else ids.generate()
    agent = agent or str(ws.config["conversations.default_agent"])
    made_here = config is None
    if config is None:
        if author is None and not scoped:
            # The user's: checked here. A calling agent's child was checked against the
            # caller's own rights where it acts (jp_query, MCP, a tool script's enum),
            # which are not always the parent's profile (an MCP client under --root-id
            # has its own list).
            require_allowed(ws, agent, ids.parent(full_id))
        config = agent_config(ws, agent, overrides, onboarding)
    fields = {"base": head_commit(ws), **branches.plan(ws, full_id, config), **(extra or {})}
    conv = create(
        ws.conv_root,
        full_id,
        agent=agent,
        title=title,
        hidden=hidden,
        expires=now() + tmp if tmp else None,
        config=config,
        extra=fields,
    )
    if made_here:
        policy.adopted(ws, conv, agent)
    if "branch" in fields:
        branches.ensure_worktree(ws, branches.require_fork(ws, conv.id))
    event = "new"
    if task is not None:
        task = secrets.redact(task)[0]  # from a caller's words: the record is shared
        conv.write(TASK, task if task.endswith("\n") else task + "\n")
        event = "task"
    if commit:
        record.commit(ws, conv.id, event, agent=agent, author=author)
    if activate:
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
    require_allowed(ws, agent, ids.parent(conv.id))
    config = agent_config(ws, agent)
    old = conv.config
    if old and config.get("workspace") != old.get("workspace"):
        raise StateError(
            f"{agent!r} works in a {config.get('workspace')} workspace and {conv.id!r} was"
            f" made for a {old.get('workspace')} one: start a new conversation instead"
        )
    conv.update(agent=agent, config=config)
    # A fresh handle: ``conv`` keeps the snapshot it parsed, which is now the old one.
    policy.adopted(ws, Conversation(ws.conv_root, conv.id), agent)
    record.commit(ws, conv.id, "edit", agent=agent, note=f"(agent: {agent})")


def skip_onboarding(ws: Workspace, conv: Conversation) -> None:
    """Turn onboarding off for ``conv``, which has not started: no question asked, no
    event. Refused (:class:`StateError`) once it has, as there is nothing left to skip."""
    onboarding = (conv.config.get("onboarding") or {}) if conv.config else {}
    if not onboarding.get("enabled", False):
        return
    if conv.event_names() or conv.file(QUESTIONS).exists():
        raise StateError(
            f"--no-onboard applies to a conversation that has not started; {conv.id!r}"
            " has already asked its questions or begun work (answer with `jpfs answer`)"
        )
    config = dict(conv.config)
    config["onboarding"] = {**onboarding, "enabled": False}
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
    child_id = ids.join(source, ids.generate())
    fields = {"base": head_commit(ws), **branches.plan(ws, child_id, src.config)}
    # Held until the fork is committed: no daemon may run a half-copied child, and its
    # events have one writer at a time (Conversation.exclusive).
    with locks.conversation_lock(ws.local_dir, child_id):
        child = create(
            ws.conv_root,
            child_id,
            agent=str(meta.get("agent", "")),
            title=title if title is not None else str(meta.get("title", "")),
            hidden=hidden,
            config=src.config,
            extra={**fields, "forked_from": f"{source}@{seq}"},
        )
        if "branch" in fields:
            branches.ensure_worktree(ws, branches.require_fork(ws, child.id))
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
        record.commit(ws, child.id, "fork", agent=str(meta.get("agent", "")), note=f"from {source}")
    return child


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
