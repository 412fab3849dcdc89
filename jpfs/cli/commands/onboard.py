"""``jpfs onboard``: one onboarding over N tasks, then N children in parallel."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from jpfs.cli.completion import complete_agents, complete_ids
from jpfs.cli.context import note, out, state
from jpfs.errors import ConfigError


def parse_tasks(text: str) -> list[str]:
    """``## `` sections are tasks; without headings, every non-empty line is one."""
    if re.search(r"^## ", text, re.MULTILINE):
        parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
        return [p.strip() for p in parts if p.strip()]
    return [line.strip() for line in text.splitlines() if line.strip()]


def onboard(
    agent: Annotated[
        str | None, typer.Argument(help="Agent profile.", autocompletion=complete_agents)
    ] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="File of tasks.")] = None,
    conv_id: Annotated[
        str | None,
        typer.Option(
            "--id", autocompletion=complete_ids, help="Continue a batch onboarding after answering."
        ),
    ] = None,
) -> None:
    """Onboard AGENT once over every task in FILE, then fork one child per task.

    When the agent asks questions the command prints them and exits with status 4:
    answer with `jpfs answer ID TEXT`, then run `jpfs onboard --id ID`.
    """
    from jpfs import api
    from jpfs.cli.app import runner as make_runner
    from jpfs.core.state import State
    from jpfs.services.run.query import outcome, query

    ws = state.ws()
    runner = make_runner(ws, progress=note)
    if conv_id is None:
        if agent is None or tasks is None:
            raise ConfigError("give AGENT and --tasks FILE (or --id ID to continue)")
        items = parse_tasks(tasks.read_text(encoding="utf-8"))
        if not items:
            raise ConfigError(f"{tasks}: no tasks found")
        handle = api.onboard(
            agent, api.batch_context(items), workspace_dir=ws, tasks=items, progress=note
        )
        conv_id = handle.conversation
        result_state = State.IDLE if handle.ready else State.WAITING
    else:
        from jpfs.cli.options import resolve

        conv_id = resolve(ws, conv_id)  # as typed: a prefix, `@`
        result = query(ws, None, conv_id=conv_id, runner=runner)
        result_state = result.state
    if result_state is State.WAITING:
        from jpfs.core.conversation import Conversation

        out(outcome(Conversation(ws.conv_root, conv_id), result_state).wrapped())
        note(f"answer with: jpfs answer {conv_id} TEXT, then: jpfs onboard --id {conv_id}")
        raise typer.Exit(4)
    for result in api.fork_tasks(ws, conv_id, runner):
        out(result.wrapped())
