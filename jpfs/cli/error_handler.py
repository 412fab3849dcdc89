"""The one place where errors become exit statuses.

Every error is one line on stderr, ``jpfs: error: ...``:

JpfsError -> its message, exit 1 (2 for bad patterns); usage errors (a bad option
value, an unknown option or command, a missing argument) -> click's message and where
to get help, exit 2; Ctrl-C -> 130; the OS saying the disk is full (or read-only, or
failing) -> what to do about it, exit 1; anything else is a bug -> exit 3 with the
traceback written to a log file the message names (or to stderr when it cannot be). A
command given no arguments that needs some prints its help instead (exit 2).
"""

from __future__ import annotations

import datetime as dt
import difflib
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import click
import typer

from jpfs.cli.context import state
from jpfs.errors import JpfsError, RepositoryFault


def _log_path() -> Path:
    try:
        from jpfs.core.workspace import find_root

        local = find_root(state.workspace) / ".jpfs" / "local"
        local.mkdir(parents=True, exist_ok=True)
        return local / "jpfs.log"
    except (JpfsError, OSError):  # no workspace, or not writable: the temp dir will do
        return Path(tempfile.gettempdir()) / f"jpfs-{os.getuid()}.log"


def one_line(message: str) -> str:
    """``message`` on one line: a message quoting several lines (git's stderr, say)
    keeps their words."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def error(message: str) -> None:
    """Write ``message`` as jpfs's one error line."""
    sys.stderr.write(f"jpfs: error: {one_line(message)}\n")


def _usage(exc: click.ClickException) -> str:
    """A usage error's message, and where to read the usage."""
    message = str(getattr(exc, "format_message", exc.__str__)())
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        guesses = _did_you_mean(message, ctx)
        message = f"{message.rstrip('.')} (see '{ctx.command_path} --help')"
        if guesses:
            message += f"; did you mean {' or '.join(repr(g) for g in guesses)}?"
    return message


# Words other tools use for what jpfs calls otherwise.
_SYNONYMS = {"status": ("daemon status", "tree"), "ps": ("tree",), "show": ("conversation show",)}


def _did_you_mean(message: str, ctx: click.Context) -> list[str]:
    """For "No such command 'X'" that click found no close spelling for: subcommands of
    that name or close to it (`ls` -> `conversation ls`), and other tools' words
    (`status` -> `daemon status`)."""
    if not message.startswith("No such command") or "Did you mean" in message:
        return []
    name = message.split("'")[1] if message.count("'") >= 2 else ""
    group = ctx.command
    if not name or not isinstance(group, click.Group):
        return []
    prefix = ctx.command_path
    paths: dict[str, list[str]] = {}  # a last word -> the commands it ends
    for sub in group.list_commands(ctx):
        command = group.get_command(ctx, sub)
        if isinstance(command, click.Group) and not command.hidden:
            for leaf in command.list_commands(ctx):
                paths.setdefault(leaf, []).append(f"{prefix} {sub} {leaf}")
    if ctx.parent is None:
        for word, meant in _SYNONYMS.items():
            paths.setdefault(word, []).extend(f"{prefix} {m}" for m in meant)
    close = difflib.get_close_matches(name, list(paths), n=2, cutoff=0.75)
    found = [path for word in close for path in paths[word]]
    return list(dict.fromkeys(found))[:3]


def run(fn: Callable[[], int | None]) -> int:
    try:
        return fn() or 0
    except JpfsError as exc:
        error(str(exc))
        return exc.exit_code
    except click.ClickException as exc:  # usage errors
        show = getattr(exc, "show", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and callable(show):
            show()  # the help, as asked for by giving nothing
        else:
            error(_usage(exc))
        return int(getattr(exc, "exit_code", 2))
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write("jpfs: interrupted\n")
        return 130
    except BrokenPipeError:
        # Reader went away (`jpfs ... | head`): not our error.
        sys.stderr.close()
        return 1
    except Exception as exc:
        fault = RepositoryFault.of(exc)  # a full disk is no bug of jpfs's
        if fault is not None:
            error(str(fault))
            return fault.exit_code
        path = _log_path()
        try:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(f"--- {dt.datetime.now().isoformat()} jpfs {' '.join(sys.argv[1:])}\n")
                fh.write(traceback.format_exc())
        except OSError:
            traceback.print_exc()  # the log cannot be written: the traceback goes here
            sys.stderr.write("jpfs: internal error (a bug in jpfs). Please report it.\n")
            return 3
        sys.stderr.write(
            f"jpfs: internal error (a bug in jpfs); the traceback is in {path}. Please report it.\n"
        )
        return 3
