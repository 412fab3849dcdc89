"""Runs as an entry point starts them: on the library's App (``jpfs.api.app``, which
has the tools).

Nothing global is filled for the tests: a runner built without an App has no tools.
A test that runs agents through the services takes its runner from ``jpfs.api.runner``,
or its queries from :func:`query` here.
"""

from __future__ import annotations

from typing import Any

from jpfs import api
from jpfs.core.workspace import Workspace
from jpfs.services.run import query as queries


def query(ws: Workspace, text: str | None, **fields: Any) -> queries.Outcome:
    """:func:`jpfs.services.run.query.query`, run by the library's runner unless given one."""
    if fields.get("runner") is None:
        fields["runner"] = api.runner(ws)
    return queries.query(ws, text, **fields)
