"""``jpfs query`` and ``jpfs answer``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from jpfs.cli.app import runner as make_runner
from jpfs.cli.completion import complete_agents, complete_ids
from jpfs.cli.context import note, out, state
from jpfs.cli.editor import edit
from jpfs.cli.options import BudgetTokens, BudgetUsd, RootId, resolve, root_scope, scoped
from jpfs.errors import JpfsError, StateError

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace
    from jpfs.services.run.handoff import Outcome, QueryRequest
    from jpfs.services.run.runtime import Runner


def read_query(text: str | None) -> str:
    if text is not None and text != "-":
        return text
    data = sys.stdin.read()
    if not data.strip():
        raise typer.BadParameter("QUERY is empty (give it as an argument or on stdin)")
    return data


def progress_for(conv_id: str) -> Callable[[str], None]:
    """Progress notes on stderr, but for the one saying ``conv_id`` failed: the error
    line says it (:func:`failed`), once."""
    held = f"[{conv_id}] failed:"

    def progress(text: str) -> None:
        if not text.startswith(held):
            note(text)

    return progress


def failed(result: Outcome) -> JpfsError:
    """The run of ``result`` failed: the error line, with its error event's first line."""
    reason = next((ln.strip() for ln in result.text.splitlines() if ln.strip()), "")
    return JpfsError(f"{result.conversation} failed: {reason or 'the run failed'}")


def spent_note(usage: Mapping[str, Any] | None) -> str:
    """`` · N tokens, $X`` for a run's usage (the stderr line after the answer)."""
    if not usage:
        return ""
    from jpfs.core.usage import COUNTS, dollars

    tokens = sum(int(usage.get(k) or 0) for k in COUNTS)
    cost = usage.get("cost_usd")
    return f" · {tokens:,} tokens, {dollars(cost if isinstance(cost, int | float) else None)}"


def preflight(runner: Runner, config: Mapping[str, Any]) -> None:
    """Build the provider the run will use, so that what it lacks (ANTHROPIC_API_KEY)
    is one error line before anything is written, not a failed conversation."""
    if config:
        runner.provider(config)


class QueryClient:
    """Runs ``jpfs query``'s requests: by the workspace's daemon when one takes them
    (it has the model's SDK loaded; this process imports none of it), else here."""

    def __init__(self, extra_cfg: list[str], live: LiveAnswer | None) -> None:
        self.extra_cfg = extra_cfg
        self.live = live
        self._ws: Workspace | None = None

    def run(self, request: QueryRequest) -> Outcome:
        from jpfs.services.run import handoff

        return handoff.hand_or_run(
            state.local_dir(),
            request,
            [*state.cfg, *self.extra_cfg],
            lambda: self.run_here(request),
            on_text=self.live,
            on_note=lambda conv, text: progress_for(conv)(text),
        )

    def run_here(self, request: QueryRequest) -> Outcome:
        from jpfs.services.run.query import run_request

        ws = self._ws = self._ws or state.ws(self.extra_cfg)
        wait = ws.config.query_lock_wait
        return run_request(
            ws,
            request,
            lambda target: make_runner(ws, progress=progress_for(target), lock_wait=wait),
            on_text=self.live,
        )


class LiveAnswer:
    """The run's text on stdout as the provider streams it, turn after turn; at the end,
    the final answer is printed only if it was not already shown whole."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.turn: list[str] = []
        self.shown = False

    def __call__(self, text: str | None) -> None:
        if text is None:  # a new turn: keep the last one's text apart
            if self.turn:
                self.stream.write("\n\n")
            self.turn = []
            return
        self.turn.append(text)
        self.stream.write(text)
        self.stream.flush()
        self.shown = True

    def finish(self, answer: str | None) -> None:
        if self.shown and answer is not None and "".join(self.turn).strip() == answer.strip():
            answer = None  # already on the screen
        if self.shown:
            self.stream.write("\n")
        if answer is not None:
            out(answer)
        self.shown, self.turn = False, []


def query(
    text: Annotated[
        str | None, typer.Argument(metavar="QUERY", help="The query; - or absent: stdin.")
    ] = None,
    conv_id: Annotated[
        str | None,
        typer.Option("--id", autocompletion=complete_ids, help="Continue this conversation."),
    ] = None,
    new: Annotated[bool, typer.Option("--new", help="Start a new conversation.")] = False,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent", autocompletion=complete_agents, help="Profile for a new conversation."
        ),
    ] = None,
    root_id: RootId = None,
    cfg: Annotated[
        list[str] | None,
        typer.Option("--cfg", metavar="SPEC", help="Config layer (see jpfs --help)."),
    ] = None,
    hidden: Annotated[bool, typer.Option("--hidden")] = False,
    tmp: Annotated[str | None, typer.Option("--tmp", help="Expire after DURATION.")] = None,
    no_activate: Annotated[bool, typer.Option("--no-activate")] = False,
    non_interactive: Annotated[
        bool, typer.Option("--non-interactive", help="Never prompt; questions go to stdout.")
    ] = False,
    no_onboard: Annotated[bool, typer.Option("--no-onboard", help="Skip onboarding.")] = False,
    stream: Annotated[
        bool | None,
        typer.Option(
            "--stream/--no-stream",
            help="Show the answer as it arrives (default: when stdout is a terminal).",
            show_default=False,
        ),
    ] = None,
    budget_tokens: BudgetTokens = None,
    budget_usd: BudgetUsd = None,
) -> None:
    """Ask an agent; print only its final answer on stdout.

    Without --id or --new, continues the active conversation if there is one. If the
    agent asks onboarding questions, an interactive terminal is prompted for answers;
    otherwise the questions are printed as <questions conversation_id="ID"> and the
    command exits with status 4 (answer with `jpfs answer ID` or `jpfs query --id ID`).
    """
    from jpfs.core.state import State
    from jpfs.services.run.handoff import QueryRequest

    if conv_id is not None:
        # Options that only shape a new conversation cannot apply to an existing one.
        given = [
            name
            for name, on in (
                ("--new", new),
                ("--agent", agent is not None),
                ("--hidden", hidden),
                ("--tmp", tmp is not None),
                ("--budget-tokens", budget_tokens is not None),
                ("--budget-usd", budget_usd is not None),
            )
            if on
        ]
        if given:
            raise typer.BadParameter(
                f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to a new"
                " conversation; --id continues"
                " an existing one (drop them, or start a new one with --new)",
                param_hint="--id",
            )
    if conv_id is not None:  # as typed (a prefix, `@`): the daemon has no active one
        ws = state.ws(list(cfg or []))
        conv_id = resolve(ws, conv_id, root_scope(ws, root_id))
    body = read_query(text)
    live = LiveAnswer(sys.stdout) if (sys.stdout.isatty() if stream is None else stream) else None
    request = QueryRequest(
        body,
        conv_id=conv_id,
        new=new,
        agent=agent,
        root_id=root_id,
        hidden=hidden,
        tmp=tmp,
        activate=not no_activate,
        onboard=False if no_onboard else None,
        budget_tokens=budget_tokens,
        budget_usd=budget_usd,
    )
    client = QueryClient(list(cfg or []), live)
    result = client.run(request)
    interactive = not non_interactive and sys.stdin.isatty() and sys.stderr.isatty()
    while result.state is State.WAITING and interactive:
        note(f"{result.conversation} asks:\n{result.text}\n(answer; end with an empty line)")
        lines = []
        for line in sys.stdin:
            if not line.strip():
                break
            lines.append(line)
        if not lines:
            break
        result = client.run(QueryRequest("".join(lines), conv_id=result.conversation))
    if live is not None and result.state is not State.IDLE:
        live.finish(None)  # a streamed turn that did not end in an answer
    if result.state is State.WAITING:
        out(result.wrapped())
        note(f"answer with: jpfs answer {result.conversation}")
        raise typer.Exit(4)
    if result.state is State.FAILED:
        raise failed(result)
    note(f"conversation {result.conversation}" + spent_note(result.usage))
    if live is not None:
        live.finish(result.text)
    else:
        out(result.text)


ANSWER_TEMPLATE = """\
{questions}

<!-- Write your answers below this line; lines inside these comment markers are
     ignored. Save and close the editor to send; leave it empty to cancel. -->
"""


def edit_answer(questions: str) -> str:
    """The answers from $VISUAL/$EDITOR (the questions quoted above), or stdin."""
    quoted = "\n".join(f"> {q}" for q in questions.splitlines())
    return edit(ANSWER_TEMPLATE.format(questions=quoted), keep=lambda ln: not ln.startswith(">"))


def answer(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    text: Annotated[str | None, typer.Argument(metavar="[TEXT]")] = None,
    run: Annotated[
        bool, typer.Option("--run/--no-run", help="Run the agent after answering.")
    ] = False,
    root_id: RootId = None,
) -> None:
    """Answer a conversation's open questions (opens $EDITOR when TEXT is absent)."""
    from jpfs.core import record, tree
    from jpfs.core.conversation import Conversation
    from jpfs.core.state import State
    from jpfs.services.conversations import onboarding

    ws = state.ws()
    conv = Conversation(ws.conv_root, scoped(ws, conv_id, root_id))
    if tree.state_of(conv) is not State.WAITING:
        raise StateError(f"conversation {conv.id!r} has no open questions ({tree.state_of(conv)})")
    runner = None
    if run:
        runner = make_runner(ws, progress=progress_for(conv.id))
        preflight(runner, conv.config)
    if text is None:
        text = edit_answer(onboarding.questions_of_round(conv))
    if not text.strip():
        raise JpfsError("empty answer: nothing sent")
    n = onboarding.append_answers(conv, text)
    record.commit(ws, conv.id, "answers", agent=conv.meta().get("agent"), note=f"round {n}")
    note(f"answered round {n} of {conv.id}")
    if runner is not None:
        from jpfs.services.run.query import outcome

        result = outcome(conv, runner.run(conv.id))
        if result.state is State.FAILED:
            raise failed(result)
        out(result.wrapped() if result.state is State.WAITING else result.text)
