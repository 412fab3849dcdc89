"""The application object: what a process runs conversations with.

Each adapter builds one :class:`App`, in one function (its composition root, listed
in ARCHITECTURE.md), and hands it down: every :class:`~jpfs.services.run.runtime.Runner`
holds it. It carries the tools (the run loop sits below them, so it is handed
them), and the state a process has once by nature: its runs (a kill from another
thread finds the run there), its sync engines, and where background starts go.

There is no global App: a runner built without one (a program calling
``jpfs.services`` directly) gets an empty App of its own, without tools, and a
service called without a runner or App reaches no other run of the process. Tests
and benchmarks build theirs as the library does (``jpfs.api.app``).
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
