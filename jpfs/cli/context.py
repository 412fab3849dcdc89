"""Global CLI state (workspace, --cfg) and the output conventions.

stdout carries only data (ids, answers, JSON); notes and progress go to stderr.
``NO_COLOR`` is honoured: nothing here emits colour unless stderr is a terminal and
``NO_COLOR`` is unset.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jpfs.workspace import Workspace


@dataclass
class State:
    workspace: Path | None = None
    cfg: list[str] = field(default_factory=list)
    _ws: Workspace | None = None

    def ws(self, extra_cfg: list[str] | None = None) -> Workspace:
        from jpfs.workspace import open_workspace

        if extra_cfg:
            return open_workspace(self.workspace, [*self.cfg, *extra_cfg])
        if self._ws is None:
            self._ws = open_workspace(self.workspace, self.cfg)
        return self._ws

    def local_dir(self) -> Path:
        """``.jpfs/local`` of the workspace, found without loading its configuration:
        daemon control works whatever config.toml says."""
        from jpfs.workspace import LOCAL_DIR, find_root

        if self.workspace is not None and (self.workspace / ".jpfs").is_dir():
            return self.workspace.resolve() / LOCAL_DIR
        return find_root(self.workspace) / LOCAL_DIR


state = State()


def color_enabled() -> bool:
    return "NO_COLOR" not in os.environ and sys.stderr.isatty()


def out(text: str = "") -> None:
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def out_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def note(text: str) -> None:
    if color_enabled():
        text = f"\x1b[2m{text}\x1b[0m"
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
