"""The application object: what a process runs conversations with.

Each adapter builds one :class:`App`, in one function (its composition root, listed
in ARCHITECTURE.md), and hands it down: every :class:`~jpfs.services.run.runtime.Runner`
holds it. It carries the tools (the run loop sits below them, so it is handed
them), and the state a process has once by nature: its runs (a kill from another
thread finds the run there), its sync engines, and where background starts go.

One global remains, :func:`default`: the App of code that calls a service without
a runner of its own (tests, benchmarks, a program using ``jpfs.services``
directly). It has no tools until such an entry point calls :func:`use_default`;
nothing fills it on import, and no adapter relies on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jpfs.core.tool import Toolbox
from jpfs.services.conversations.runs import RunTable
from jpfs.services.sync.claims import Claims

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace

# ``starter(ws, conv_id)`` takes a background start (a daemon's pool): True when it did.
Starter = Callable[["Workspace", str], bool]


@dataclass(frozen=True)
class App:
    toolbox: Toolbox | None = None
    runs: RunTable = field(default_factory=RunTable)
    claims: Claims = field(default_factory=Claims)
    starter: Starter | None = None


_default = [App()]


def default() -> App:
    return _default[0]


def use_default(app: App) -> None:
    """Make ``app`` the one of runners built without one (an entry point's call)."""
    _default[0] = app
