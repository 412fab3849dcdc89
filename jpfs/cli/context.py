"""Global CLI state (workspace, --cfg) and the output conventions.

stdout carries only data (ids, answers, tables, JSON); notes and progress go to stderr.
Every command that shows data takes ``--format text|json``
(:data:`jpfs.cli.options.Format`): text is for people (tables under upper-case column
names, :func:`out_table`), json for programs (:func:`out_json`, the one place JSON is
written). ``NO_COLOR`` is honoured:
nothing here emits colour unless stderr is a terminal and ``NO_COLOR`` is unset.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace


@dataclass
class State:
    workspace: Path | None = None
    cfg: list[str] = field(default_factory=list)
    _ws: Workspace | None = None

    def reset(self) -> None:
        """As at the start of a command (a process may run several: tests, benches)."""
        self.workspace, self.cfg, self._ws = None, [], None

    def ws(self, extra_cfg: list[str] | None = None) -> Workspace:
        from jpfs.core.workspace import open_workspace

        if extra_cfg:
            return open_workspace(self.workspace, [*self.cfg, *extra_cfg])
        if self._ws is None:
            self._ws = open_workspace(self.workspace, self.cfg)
        return self._ws

    def policy_notes(self) -> dict[str, str]:
        """What of ``.jpfs/`` the last good copy stood in for in this command."""
        return dict(self._ws.notes) if self._ws is not None else {}

    def local_dir(self) -> Path:
        """``.jpfs/local`` of the workspace, found without loading its configuration:
        daemon control works whatever config.toml says."""
        from jpfs.core.workspace import LOCAL_DIR, find_root

        if self.workspace is not None and (self.workspace / ".jpfs").is_dir():
            return self.workspace.resolve() / LOCAL_DIR
        return find_root(self.workspace) / LOCAL_DIR


state = State()


def color_enabled() -> bool:
    return "NO_COLOR" not in os.environ and sys.stderr.isatty()


def out(text: str = "") -> None:
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def out_json(data: Any) -> None:
    """The one way the CLI writes JSON: indented, UTF-8 as is, one document."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


_ONE_LINE = str.maketrans({"\t": " ", "\n": " ", "\r": " "})


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """``rows`` under a header of upper-case column names, columns aligned with two
    spaces (as ``ps`` prints them); the last column is not padded. A tab or newline in
    a cell (a title, say) becomes a space, so a row is one line."""
    columns: list[list[str]] = [[h.upper()] for h in headers]
    for row in rows:
        for column, cell in zip(columns, row, strict=True):
            column.append("" if cell is None else str(cell))
    for column in columns:
        # One search per column rather than a translate per cell: listings print tens
        # of thousands of rows, and a title with a tab is rare.
        joined = "\0".join(column)
        if "\t" in joined or "\n" in joined or "\r" in joined:
            column[:] = [cell.translate(_ONE_LINE) for cell in column]
    widths = [max(map(len, column)) for column in columns]
    # One format per row, not a ljust per cell.
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + ("  {}" if len(widths) > 1 else "{}")
    return "".join(fmt.format(*line).rstrip() + "\n" for line in zip(*columns, strict=True))


def out_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    sys.stdout.write(table(headers, rows))


def note(text: str) -> None:
    if color_enabled():
        text = f"\x1b[2m{text}\x1b[0m"
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def meta_key(option: str) -> str:
    """Where the root keeps an option written before the subcommand, for the command
    below (click's ``ctx.meta``: jpfs.cli.options hands it down, completion reads it)."""
    return f"jpfs.cli.options:{option}"
