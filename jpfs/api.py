"""The library API: onboarding handles, calls and batch onboarding for Python code.

    handle = onboard("researcher", "Our service is slow under load ...")
    while not handle.ready:
        handle = reply(handle, input(handle.current_question))
    print(call(handle, "Find the slowest endpoint"))     # a ready handle can be called again
    print(call("researcher", "One-off question"))         # no onboarding

An onboarded conversation is a *template*: it holds the task context and the Q&A
and does no work itself. Each ``call`` runs a child of it that inherits the whole Q&A
(so one onboarding serves many calls), which is also how batch onboarding forks one
child per task.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpfs.core import locks, scope
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.core.workspace import Workspace, open_workspace
from jpfs.errors import StateError
from jpfs.services.conversations import onboarding
from jpfs.services.run import control
from jpfs.services.run.app import App
from jpfs.services.run.query import Outcome, outcome, query
from jpfs.services.run.runtime import Progress, Runner
from jpfs.tools.registry import build_tools


@dataclass(frozen=True)
class OnboardingHandle:
    agent: str
    conversation: str
    current_question: str | None
    ready: bool


Where = Workspace | Path | str | None


def workspace(where: Where = None) -> Workspace:
    if isinstance(where, Workspace):
        return where
    return open_workspace(Path(where) if where is not None else None)


@functools.cache
def app() -> App:
    """The composition root of the library and the CLI (``jpfs.cli.app``): the one App
    of this process's runs, built on first use. The library's run in process (the
    caller gets its progress callbacks and its exceptions);
    ``jpfs.services.run.handoff.hand_or_run`` hands a CLI query to a daemon instead."""
    return App(build_tools)


def runner(ws: Workspace, progress: Progress | None = None, **options: Any) -> Runner:
    """A runner on :func:`app` (``options``: the rest of :class:`Runner`'s fields)."""
    return Runner(ws, app=app(), progress=progress, **options)


def run_detached(argv: Sequence[str]) -> int:
    """A detached background run's process (``background.spawn``): ``ROOT CONV_ID``."""
    from jpfs.services.run.background import log, run_background

    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [{argv[1]}] %(message)s")
    ws = open_workspace(Path(argv[0]), search=False)
    state = run_background(runner(ws, progress=log.info), argv[1])
    return 0 if state is not None else 1


def _handle(ws: Workspace, conv_id: str, state: State) -> OnboardingHandle:
    conv = Conversation(ws.conv_root, conv_id)
    agent = str(conv.meta().get("agent", ""))
    if state is State.WAITING:
        return OnboardingHandle(agent, conv_id, onboarding.questions_of_round(conv), False)
    if state is State.IDLE:
        return OnboardingHandle(agent, conv_id, None, True)
    raise StateError(f"onboarding of {conv_id!r} ended in state {state}")


def onboard(
    agent: str,
    context: str,
    *,
    workspace_dir: Where = None,
    parent: str | None = None,
    tasks: Sequence[str] = (),
    progress: Progress | None = None,
) -> OnboardingHandle:
    """Start onboarding ``agent`` on ``context``; returns when it asks or is ready."""
    ws = workspace(workspace_dir)
    result = query(
        ws,
        context,
        parent=parent,
        agent=agent,
        onboarding_enabled=True,
        runner=runner(ws, progress),
        extra={"mode": "template", "tasks": list(tasks) or None},
    )
    return _handle(ws, result.conversation, result.state)


def reply(
    handle: OnboardingHandle, answer: str, *, workspace_dir: Where = None
) -> OnboardingHandle:
    """Answer the handle's open questions; returns the next handle (more questions or ready)."""
    ws = workspace(workspace_dir)
    if handle.ready:
        raise StateError(f"{handle.conversation!r} is ready; it has no open questions")
    result = query(ws, answer, conv_id=handle.conversation, runner=runner(ws))
    return _handle(ws, result.conversation, result.state)


def spawn(ws: Workspace, template_id: str, task: str) -> Conversation:
    """A child of an onboarded template that inherits its Q&A and does ``task``: a fork
    of the template (``control.fork``), made as every conversation is (redaction, lock,
    branch plan: :mod:`jpfs.services.conversations.creation`), not started."""
    template = scope.resolve(ws.conv_root, template_id)
    return Conversation(
        ws.conv_root, control.fork(ws, template, task, start_run=False, event="task")
    )


# Seconds a call waits for a child a daemon took up between its creation and its run
# (the daemon runs it; the call then reads its result).
CHILD_LOCK_WAIT = 600.0


def run_child(ws: Workspace, conv: Conversation, runner: Runner) -> Outcome:
    with locks.conversation_lock(ws.local_dir, conv.id, wait=CHILD_LOCK_WAIT):
        return outcome(conv, runner.run_locked(conv))


def run_children(ws: Workspace, children: Sequence[Conversation], runner: Runner) -> list[Outcome]:
    def one(conv: Conversation) -> Outcome:
        return run_child(ws, conv, runner)

    workers = max(1, min(len(children), os.cpu_count() or 2, 8))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, children))


def call(
    target: OnboardingHandle | str,
    input: str,
    *,
    workspace_dir: Where = None,
    progress: Progress | None = None,
) -> str:
    """Run a ready handle (a fresh child inheriting its Q&A) or an agent, and return its answer."""
    ws = workspace(workspace_dir)
    run = runner(ws, progress)
    if isinstance(target, str):
        result = query(ws, input, agent=target, onboarding_enabled=False, runner=run)
    else:
        if not target.ready:
            raise StateError(f"{target.conversation!r} still has open questions: reply() first")
        child = spawn(ws, target.conversation, input)
        result = run_child(ws, child, run)
    if result.state is not State.IDLE:
        raise StateError(f"{result.conversation!r} ended {result.state}: {result.text.strip()}")
    return result.text


def batch_context(tasks: Sequence[str]) -> str:
    listed = "\n".join(f"{n}. {t.strip()}" for n, t in enumerate(tasks, 1))
    return (
        f"You will be given {len(tasks)} related tasks, each to be done separately by a copy"
        " of you that inherits this onboarding. Ask now whatever you need for all of them.\n\n"
        f"## Tasks\n\n{listed}\n"
    )


def fork_tasks(ws: Workspace, template_id: str, runner: Runner) -> list[Outcome]:
    """Fork one child per stored task of a ready batch template and run them in parallel."""
    template = Conversation(ws.conv_root, scope.resolve(ws.conv_root, template_id))
    tasks = [str(t) for t in template.meta().get("tasks", [])]
    if not tasks:
        raise StateError(f"{template_id!r} is not a batch onboarding (it has no tasks)")
    children = [spawn(ws, template.id, t) for t in tasks]
    return run_children(ws, children, runner)
