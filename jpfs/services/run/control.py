"""Sub-agent lifecycle: fork, kill, and mail that continues a conversation.

    fork(parent, prompt)   a child with the parent's context plus ``prompt``, started
                           at once in the background (jpfs.services.run.background); returns its id
    send(to, ...)          mail; from the recipient's caller it is input: an idle,
                           failed, waiting or empty conversation continues with it
    kill(id)               status = "killed" (committed), its run cancelled (jpfs.services.conversations.runs)

When a child's run ends it mails its parent a status report (jpfs.services.conversations.reports), which
``jp_await`` gathers.

Scope: ``by`` is the calling agent's conversation id, or ``None`` for a human. Agents
fork only themselves, kill only their descendants, and mail their parent and
descendants; every id goes through :func:`jpfs.core.scope.resolve`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from jpfs.core import failures, frontmatter, ids, record, scope, secrets, transcript, tree
from jpfs.core.conversation import ANSWERS, QUESTIONS, RESULT, Conversation, now
from jpfs.core.scope import TASK
from jpfs.core.state import State
from jpfs.errors import LimitError, ScopeError, StateError
from jpfs.services.conversations import budgets, creation, inputs, mail, runs
from jpfs.services.run import background
from jpfs.services.run.app import App

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace
    from jpfs.services.run.runtime import Runner

log = logging.getLogger("jpfs.services.run.control")


# -- limits ---------------------------------------------------------------------------


def check_limits(ws: Workspace, parent: Conversation, *, agent: bool, starting: bool) -> None:
    """max_children / max_depth (the parent's profile, for agents) and daemon.max_agents."""
    if agent:
        limits = parent.settings.limits
        max_children = limits.max_children
        children = [c for c in tree.walk(ws.conv_root, parent.id) if ids.parent(c) == parent.id]
        if len(children) >= max_children:
            raise LimitError(
                f"max_children reached: {parent.id!r} already has {len(children)} children"
                f" (limit {max_children}); continue one by mail or kill one"
            )
        max_depth = limits.max_depth
        if ids.depth(parent.id) + 1 > max_depth:
            raise LimitError(
                f"max_depth reached: a child of {parent.id!r} would be at depth"
                f" {ids.depth(parent.id) + 1} (limit {max_depth})"
            )
    if starting:
        max_agents = ws.config.daemon.max_agents
        running = runs.count_running(ws.local_dir)
        if running >= max_agents:
            raise LimitError(
                f"max_agents reached: {running} agents are running (daemon.max_agents ="
                f" {max_agents}); wait for one (jp_await) or kill one"
            )


# -- fork ------------------------------------------------------------------------------


def find_child_for_call(conv_root: Path, parent: str, call_id: str) -> str | None:
    """The child a previous attempt of this very tool call created (crash resume)."""
    if not call_id:
        return None
    for child in tree.walk(conv_root, parent):
        if ids.parent(child) != parent:
            continue
        if Conversation(conv_root, child).meta().get("origin_call") == call_id:
            return child
    return None


def _fork_task(src: Conversation, prompt: str | None) -> str | None:
    """A fork's task.md: with events, its prompt; before any (a template, an onboarding),
    the source's task and, under it, the prompt as its own task."""
    if src.event_names():
        return prompt.rstrip() if prompt else None
    task = (src.read(TASK) or "").rstrip()
    if prompt:
        task = f"{task}\n\n## Your task\n\n{prompt.strip()}" if task else prompt.strip()
    return task or None


def _copy_context(child: Conversation, src: Conversation, prompt: str | None) -> None:
    """What a fork copies of ``src`` besides its task: the Q&A before any event, else the
    events (the user's own words redacted, as every event is written)."""
    events = src.events()
    if not events:
        # Not started yet (a template or onboarding): the task and Q&A are the context.
        for name in (QUESTIONS, ANSWERS):
            text = src.read(name)
            if text is not None:
                child.write(name, secrets.redact(text)[0])  # jpfs writes the copy
        return
    # The fork's own turn (still calling tools) is copied as its text, if it has any.
    seq = transcript.copy_for_fork(events, child.events_dir)
    # The copies' usage is the source's spending, not the child's (jpfs.core.usage).
    child.update(inherited_events=seq)
    if prompt:
        child.append_event("user", prompt)
    elif tree.state_of(child) is State.FINISHING:
        # A copy of a finished run is idle, like its parent: result.md marks it so.
        last = child.last_event()
        body = last.body if last is not None else ""
        meta = {"event": seq, "created": now(), "success": True}
        child.write(RESULT, frontmatter.render(meta, body))


def fork(
    ws: Workspace,
    parent: str,
    prompt: str | None = None,
    *,
    by: str | None = None,
    call_id: str = "",
    runner: Runner | None = None,
    start_run: bool = True,
    detached: bool = False,
    budget_tokens: int | None = None,
    budget_usd: float | None = None,
    event: str = "fork",
) -> str:
    """A child of ``parent`` with its context so far plus ``prompt``, started; its id.

    Without a prompt the child is only created (idle when the parent is idle). A
    budget given is the child's subtree's, at most what ``parent`` has left
    (:func:`jpfs.services.conversations.budgets.for_child`). ``event``: its first
    commit's (``task`` for a library call's child, whose caller wrote the task).
    """
    parent = scope.resolve(ws.conv_root, parent)
    if by is not None and parent != by:
        raise ScopeError(f"an agent may fork only itself ({by!r}), not {parent!r}")
    src = Conversation(ws.conv_root, parent)
    prompt = prompt if prompt and prompt.strip() else None
    starting = start_run and prompt is not None
    if call_id:
        existing = find_child_for_call(ws.conv_root, parent, call_id)
        if existing is not None:
            if starting:
                background.start(ws, existing, runner=runner, detached=detached)
            return existing
    check_limits(ws, src, agent=by is not None, starting=starting)
    config = budgets.for_child(ws, src, src.config, budget_tokens, budget_usd)
    meta = src.meta()
    prompt = secrets.redact(prompt)[0] if prompt else prompt  # the caller's words, recorded
    seq = src.event_names()[-1][0] if src.event_names() else 0
    # Made as every conversation is (the lock held until it is committed, the branch
    # plan, the redaction): jpfs.services.conversations.creation.
    child = creation.create(
        ws,
        creation.Spec(
            ids.join(parent, ids.generate()),
            str(meta.get("agent", "")),
            creation.COPY,
            title=creation.title_of(prompt) if prompt else str(meta.get("title", "")),
            task=_fork_task(src, prompt),
            config=config,
            extra={"forked_from": f"{parent}@{seq}", "origin_call": call_id or None},
            event=event,
            note=f"from {parent}",
            fill=lambda child: _copy_context(child, src, prompt),
        ),
    )
    if starting:
        background.start(ws, child.id, runner=runner, detached=detached)
    return child.id


# -- mail that continues ---------------------------------------------------------------


def send(
    ws: Workspace,
    to: str,
    subject: str,
    body: str,
    *,
    sender: str | None = None,
    in_reply_to: str | None = None,
    parent_only: bool = False,
    runner: Runner | None = None,
    start_run: bool = True,
    detached: bool = False,
    interrupt: bool = False,
) -> tuple[mail.Message, bool]:
    """Mail ``to``; mail from its caller starts it when it can take input, and reaches
    it at its next model call while it runs (``interrupt``: cutting short the call in
    flight).

    Returns the message and whether a run was started.
    """
    msg = mail.send(
        ws,
        to,
        subject,
        body,
        sender=sender,
        in_reply_to=in_reply_to,
        parent_only=parent_only,
        interrupt=interrupt,
    )
    if not start_run or not ids.is_caller(msg.sender, msg.to):
        return msg, False
    conv = Conversation(ws.conv_root, msg.to)
    if tree.state_of(conv) not in inputs.TAKES_INPUT or conv.meta().get("mode") == "template":
        # Busy: its run delivers the mail at its next model call (steering), or when
        # it stops (runs.supervise).
        return msg, False
    background.start(ws, msg.to, runner=runner, detached=detached)
    return msg, True


def retry(
    ws: Workspace,
    conv_id: str,
    text: str | None = None,
    *,
    runner: Runner | None = None,
    start_run: bool = True,
    detached: bool = False,
) -> tuple[mail.Message, bool]:
    """Resume a failed conversation: mail it, as its caller, ``text`` or a note naming
    the failure, which becomes its next input (the same path as any new input, so a
    conversation that failed before its first event still gets its task). Returns the
    message and whether a run was started here."""
    conv = Conversation(ws.conv_root, conv_id)
    # A failure its files refused is kept on this machine (jpfs.core.failures): retried
    # alike, once forgotten (the mail changes its files anyway).
    kept = failures.of(ws.local_dir, conv)
    state = State.FAILED if kept is not None else tree.state_of(conv)
    if state is not State.FAILED:
        raise StateError(f"conversation {conv_id!r} is {state}, not failed: nothing to retry")
    if text is None or not text.strip():
        last = conv.last_event() if kept is None else None
        reason = last.body.strip().splitlines()[0] if last and last.role == "error" else ""
        reason = kept.message.strip().splitlines()[0] if kept is not None else reason
        text = "The last attempt failed" + (f" ({reason})" if reason else "") + ". Try again."
    if kept is not None:
        failures.clear(ws.local_dir, conv.id)
    return send(ws, conv_id, "retry", text, runner=runner, start_run=start_run, detached=detached)


# -- kill --------------------------------------------------------------------------------


def kill(
    ws: Workspace,
    conv_id: str,
    *,
    by: str | None = None,
    cascade: bool = False,
    app: App | None = None,
) -> list[str]:
    """Mark ``conv_id`` (and with ``cascade`` its descendants) killed and stop their runs
    (those of ``app``, this process's, at once; the others notice the file).

    The status is committed before the run is cancelled, so the record shows the
    kill even when the run is mid-step. Returns the ids newly killed.
    """
    target = scope.resolve(ws.conv_root, conv_id, within=by)
    targets = [target, *(tree.walk(ws.conv_root, target) if cascade else ())]
    killed = []
    for cid in targets:
        conv = Conversation(ws.conv_root, cid)
        if conv.status == "killed":
            continue
        conv.update(status="killed")
        record.commit(
            ws,
            cid,
            "kill",
            paths=[ws.rel(conv.toml_path)],
            agent=conv.meta().get("agent"),
            note=f"by {by or 'human'}",
        )
        if app is not None:
            app.runs.cancel(ws.root, cid)
        killed.append(cid)
    return killed
