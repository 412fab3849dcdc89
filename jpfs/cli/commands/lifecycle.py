"""``jpfs fork``, ``jpfs kill`` and ``jpfs capture``.

Started children run in a detached background process (``.jpfs/local/background.log``)
so these commands return at once; a running daemon may pick them up instead.
"""

from __future__ import annotations

from typing import Annotated

import typer

from jpfs.cli.completion import complete_ids
from jpfs.cli.context import note, out, state
from jpfs.cli.editor import edit
from jpfs.cli.options import BudgetTokens, BudgetUsd, RootId, scoped
from jpfs.errors import JpfsError

NoStart = Annotated[
    bool, typer.Option("--no-start", help="Only create it; do not run it here (a daemon will).")
]

CAPTURE_TEMPLATE = """\

<!-- The task for a new sub-agent of {parent}. It starts with {parent}'s conversation
     so far plus this text; {parent}'s own model never sees it. Save and close the
     editor to create and start it; leave it empty to cancel. -->
"""


def fork(
    parent: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="PARENT")],
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="The child's task.")] = None,
    no_start: NoStart = False,
    root_id: RootId = None,
    budget_tokens: BudgetTokens = None,
    budget_usd: BudgetUsd = None,
) -> None:
    """Fork PARENT: a child with its conversation so far (+ PROMPT, then started); print its id.

    Without --prompt the child is created idle (when PARENT is idle); continue it with
    `jpfs mail send` or `jpfs query --id`. A budget is the child's and its descendants',
    at most what PARENT has left.
    """
    from jpfs.services.run import control

    ws = state.ws()
    child = control.fork(
        ws,
        scoped(ws, parent, root_id),
        prompt,
        start_run=not no_start,
        detached=True,
        budget_tokens=budget_tokens,
        budget_usd=budget_usd,
    )
    out(child)
    note(f"forked {child}" + (" and started it" if prompt and not no_start else ""))


def kill(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    cascade: Annotated[bool, typer.Option("--cascade", help="Kill its descendants too.")] = False,
    root_id: RootId = None,
) -> None:
    """Stop ID now and mark it killed (it is not resumed by accident); print the ids killed."""
    from jpfs.services.run import control

    ws = state.ws()
    killed = control.kill(ws, scoped(ws, conv_id, root_id), cascade=cascade)
    for cid in killed:
        out(cid)
    if not killed:
        note(f"{conv_id} was already killed")


def compose(parent: str) -> str:
    """The task from $VISUAL/$EDITOR (comments dropped), or stdin without an editor."""
    return edit(CAPTURE_TEMPLATE.format(parent=parent))


def capture(
    parent: Annotated[
        str | None, typer.Argument(autocompletion=complete_ids, metavar="[PARENT]")
    ] = None,
    no_start: NoStart = False,
    root_id: RootId = None,
) -> None:
    """Compose a sub-agent's task in $EDITOR (or on stdin) and start it under PARENT.

    PARENT defaults to the active conversation. The text goes to the new child only,
    never to PARENT's model. An empty task cancels (exit status 1).
    """
    from jpfs.services.conversations import lifecycle
    from jpfs.services.run import control

    ws = state.ws()
    parent = scoped(ws, parent or lifecycle.require_active(ws), root_id)
    task = compose(parent)
    if not task:
        raise JpfsError("empty task: nothing created")
    child = control.fork(ws, parent, task, start_run=not no_start, detached=True)
    out(child)
    note(f"captured into {child}" + ("" if no_start else "; it runs in the background"))


def retry(
    conv_id: Annotated[str, typer.Argument(autocompletion=complete_ids, metavar="ID")],
    message: Annotated[
        str | None, typer.Argument(metavar="[MESSAGE]", help="Extra input (default: a note).")
    ] = None,
    no_start: Annotated[
        bool, typer.Option("--no-start", help="Do not run it here (a daemon will).")
    ] = False,
    root_id: RootId = None,
) -> None:
    """Resume a failed conversation: its next input is MESSAGE or a note naming the failure."""
    from jpfs.services.run import control

    ws = state.ws()
    msg, started = control.retry(
        ws, scoped(ws, conv_id, root_id), message, start_run=not no_start, detached=True
    )
    out(msg.id)
    note(f"retrying {conv_id}" + ("; it continues in the background" if started else ""))
