"""``jpfs config get|set|show`` (``list`` is ``show``)."""

from __future__ import annotations

from typing import Any

import typer

from jpfs.cli.context import Format, out, out_json, out_table, state

app = typer.Typer(help="Read and change the workspace configuration.", no_args_is_help=True)


def _value(value: Any) -> str:
    """A value as it is written in TOML (a string bare for `config get`)."""
    import json

    return json.dumps(value, ensure_ascii=False)


@app.command("get")
def get(key: str, fmt: Format = "text") -> None:
    """Print the resolved value of KEY (with --format json: key, value and source)."""
    config = state.ws().config
    value = config.get(key)
    if fmt == "json":
        out_json({"key": key, "value": value, "source": config.sources[key]})
        return
    out(value if isinstance(value, str) else _value(value))


@app.command("set")
def set_(key: str, value: str) -> None:
    """Set KEY to VALUE (TOML syntax) in .jpfs/config.toml; comments survive.

    The file is a project file: commit it with your own work (jpfs never commits on
    your branch).
    """
    from jpfs.core.config import CONFIG_FILE, set_in_file

    ws = state.ws()
    set_in_file(ws.jpfs_dir / CONFIG_FILE, key, value)


@app.command("show")
def show(fmt: Format = "text") -> None:
    """Every key with its resolved value and where it came from."""
    rows = list(state.ws().config.items())
    if fmt == "json":
        out_json([{"key": k, "value": v, "source": s} for k, v, s in rows])
        return
    out_table(("key", "value", "source"), [(k, _value(v), s) for k, v, s in rows])


app.command("list", help="Every key with its resolved value and where it came from (= show).")(show)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="config")
