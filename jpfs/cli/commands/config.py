"""``jpfs config get|set|show`` (``list`` is ``show``)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from jpfs.cli.completion import complete_config_keys
from jpfs.cli.context import out, out_json, out_table, state
from jpfs.cli.lazygroup import Commands
from jpfs.cli.options import Format

Key = Annotated[str, typer.Argument(metavar="KEY", autocompletion=complete_config_keys)]


def _value(value: Any) -> str:
    """A value as it is written in TOML (a string bare for `config get`)."""
    return json.dumps(value, ensure_ascii=False)


def get(key: Key, fmt: Format = "text") -> None:
    """Print the resolved value of KEY (with --format json: key, value and source)."""
    config = state.ws().config
    value = config.get(key)
    if fmt == "json":
        out_json({"key": key, "value": value, "source": config.sources[key]})
        return
    out(value if isinstance(value, str) else _value(value))


def set_(key: Key, value: str) -> None:
    """Set KEY to VALUE (TOML syntax) in .jpfs/config.toml; comments survive.

    The file is a project file: commit it with your own work (jpfs never commits on
    your branch).
    """
    from jpfs.core.config import CONFIG_FILE, set_in_file

    ws = state.ws()
    set_in_file(ws.jpfs_dir / CONFIG_FILE, key, value)


def show(fmt: Format = "text") -> None:
    """Every key with its resolved value and where it came from."""
    rows = list(state.ws().config.items())
    if fmt == "json":
        out_json([{"key": k, "value": v, "source": s} for k, v, s in rows])
        return
    out_table(("key", "value", "source"), [(k, _value(v), s) for k, v, s in rows])


COMMANDS = Commands(
    help="Read and change the workspace configuration.",
    entries={"get": get, "set": set_, "show": show, "list": show},
    helps={"list": "Every key with its resolved value and where it came from (= show)."},
)
