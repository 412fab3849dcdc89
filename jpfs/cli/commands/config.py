"""``jpfs config get|set|show``."""

from __future__ import annotations

from typing import Annotated

import typer

from jpfs.cli.context import out, out_json, state

app = typer.Typer(help="Read and change the workspace configuration.", no_args_is_help=True)


@app.command("get")
def get(key: str) -> None:
    """Print the resolved value of KEY."""
    import json

    value = state.ws().config.get(key)
    out(value if isinstance(value, str) else json.dumps(value))


@app.command("set")
def set_(key: str, value: str) -> None:
    """Set KEY to VALUE (TOML syntax) in .jpfs/config.toml; comments survive.

    The file is a project file: commit it with your own work (jpfs never commits on
    your branch).
    """
    from jpfs.config import CONFIG_FILE, set_in_file

    ws = state.ws()
    set_in_file(ws.jpfs_dir / CONFIG_FILE, key, value)


@app.command("show")
def show(
    fmt: Annotated[str, typer.Option("--format", help="table or json")] = "table",
) -> None:
    """Every key with its resolved value and where it came from."""
    import json

    rows = list(state.ws().config.items())
    if fmt == "json":
        out_json([{"key": k, "value": v, "source": s} for k, v, s in rows])
        return
    for key, value, source in rows:
        out(f"{key} = {json.dumps(value)}    # {source}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="config")
