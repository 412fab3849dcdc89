"""``jpfs migrate``."""

from __future__ import annotations

from jpfs.cli.context import note, out, state


def migrate() -> None:
    """Move conversations tracked on your branch onto the record branch, history kept."""
    from jpfs.services.workspace.migrate import migrate as run

    ws = state.ws()
    done = run(ws)
    note(
        f"moved {ws.conv_root_rel}/ onto branch {done.branch} ({done.commits} commits, tip"
        f" {done.tip[:12]}); it is now a worktree of that branch. Commit the removal on your"
        f" branch: git commit -m 'jpfs: conversations live on {done.branch}'"
    )
    out(done.tip)
