"""The CLI's composition root: the one App of a ``jpfs`` process, and its runners,
built as the library builds its own (:func:`jpfs.api.app`, :func:`jpfs.api.runner`).

The commands that run conversations (``query``, ``answer``, ``onboard``, ``daemon
run``) take their runners from :func:`runner` and their App from :func:`app`; the App
is built on first use, so a command that runs nothing imports no tool. ``mcp`` is an
adapter of its own: :func:`jpfs.mcp.caller.session` builds its App.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jpfs.core.workspace import Workspace
    from jpfs.services.run.app import App
    from jpfs.services.run.runtime import Runner


def app() -> App:
    from jpfs import api

    return api.app()


def runner(ws: Workspace, **options: Any) -> Runner:
    from jpfs import api

    return api.runner(ws, **options)
