"""The one ``$EDITOR`` flow: a template in a temporary file, the user's editor on it,
the text back without comments. Without an editor, the text comes from stdin.

The editor setting is the user's own command line, split as a shell would (``code
--wait``); the file name stays a separate argv item, so nothing is interpolated.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable

from jpfs.core.state import COMMENT_RE
from jpfs.errors import ConfigError


def edit(template: str, *, keep: Callable[[str], bool] = lambda line: True) -> str:
    """What the user wrote: ``template`` edited in $VISUAL/$EDITOR (or stdin without
    one), HTML comments dropped, lines ``keep`` refuses dropped, stripped."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not editor:
        text = sys.stdin.read()
    else:
        with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as fh:
            fh.write(template)
            path = fh.name
        try:
            try:
                subprocess.run([*shlex.split(editor), path], check=True)
            except (OSError, ValueError, subprocess.CalledProcessError) as exc:
                raise ConfigError(
                    f"the editor {editor!r} failed ({exc}); check $VISUAL / $EDITOR;"
                    " nothing was sent"
                ) from exc
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        finally:
            os.unlink(path)
    kept = [line for line in COMMENT_RE.sub("", text).splitlines() if keep(line)]
    return "\n".join(kept).strip()
