"""``jpfs doctor``: checks the set-up and says what to do about each problem."""

from __future__ import annotations

import typer

from jpfs.cli.context import out_json, out_table, state
from jpfs.cli.options import Format


def doctor(fmt: Format = "text") -> None:
    """Check git, the workspace and its record, the config and profiles, trust, the API
    key and the daemon; one line each, with what to do. Exit 1 if any check fails."""
    from jpfs.services.views import doctor as doctor_mod

    checks = doctor_mod.examine(state.workspace, state.cfg)
    if fmt == "json":
        out_json([c.to_json() for c in checks])
    else:
        out_table(("check", "status", "detail", "fix"), [
            (c.name, c.status, c.detail, c.fix) for c in checks
        ])  # fmt: skip
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(1)
