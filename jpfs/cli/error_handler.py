"""The one place where errors become exit statuses.

JpfsError -> its one-line message, exit 1 (2 for bad patterns); usage errors -> 2;
Ctrl-C -> 130; anything else is a bug -> exit 3 with the traceback written to a log
file the message names.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import typer

from jpfs.errors import JpfsError


def _log_path() -> Path:
    from jpfs.cli.context import state

    try:
        from jpfs.workspace import find_root

        local = find_root(state.workspace) / ".jpfs" / "local"
        local.mkdir(parents=True, exist_ok=True)
        return local / "jpfs.log"
    except Exception:
        return Path(tempfile.gettempdir()) / f"jpfs-{os.getuid()}.log"


def run(fn: Callable[[], int | None]) -> int:
    try:
        return fn() or 0
    except JpfsError as exc:
        sys.stderr.write(f"jpfs: error: {exc}\n")
        return exc.exit_code
    except typer.TyperException as exc:  # click's usage errors
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            sys.stderr.write(f"jpfs: {exc.format_message()}\n")
        return exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write("jpfs: interrupted\n")
        return 130
    except BrokenPipeError:
        # Reader went away (`jpfs ... | head`): not our error.
        sys.stderr.close()
        return 1
    except Exception:
        path = _log_path()
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"--- {dt.datetime.now().isoformat()} jpfs {' '.join(sys.argv[1:])}\n")
            fh.write(traceback.format_exc())
        sys.stderr.write(
            f"jpfs: internal error (a bug in jpfs); the traceback is in {path}. Please report it.\n"
        )
        return 3
