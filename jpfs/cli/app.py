"""The CLI's composition root: the one App of a ``jpfs`` process, and its runners.

The commands that run conversations (``query``, ``answer``, ``onboard``, ``daemon
run``) take their runners from :func:`runner` and their App from :func:`app`; the App
is built on first use, so a command that runs nothing imports no tool. ``mcp`` is an
adapter of its own: :func:`jpfs.mcp.caller.session` builds its App.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace
    from jpfs.services.run.app import App
    from jpfs.services.run.runtime import Runner


@functools.cache
def app() -> App:
    from jpfs.services.run.app import App
    from jpfs.tools.registry import build_tools

    return App(build_tools)


def runner(ws: Workspace, **options: Any) -> Runner:
    from jpfs.services.run.runtime import Runner

    return Runner(ws, app=app(), **options)
