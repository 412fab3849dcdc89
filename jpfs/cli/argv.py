"""Global options anywhere on the command line.

click takes a group's options only before the subcommand and a command's only after
it, but users (and MCP client configurations such as the README's
``"args": ["mcp", "-w", "/path/to/repo"]``) write them on either side. Before parsing,

* the workspace and config options (``-w/--workspace``, ``--cfg``), the root's own, are
  moved to the front wherever they are written: ``jpfs mcp -w DIR`` is
  ``jpfs -w DIR mcp``;
* the options most commands share (``--format``, ``--root-id``), written before the
  subcommand, are moved after it: ``jpfs --format json tree`` is
  ``jpfs tree --format json``. A command without such an option refuses it, as click
  does ("No such option"), rather than ignoring it.

Nothing after ``--`` is touched.
"""

from __future__ import annotations

from collections.abc import Sequence

_FRONT = ("-w", "--workspace", "--cfg")
_BACK = ("--format", "--root-id")


def _split(arg: str, names: Sequence[str]) -> bool:
    """Whether ``arg`` is one of ``names`` with its value in the same token."""
    return (
        any(
            arg.startswith(f"{name}=") or (not name.startswith("--") and arg.startswith(name))
            for name in names
        )
        and arg not in names
    )


def hoist_global_options(args: Sequence[str]) -> list[str]:
    """``args`` with the global options moved to where click expects them."""
    front: list[str] = []
    back: list[str] = []
    rest: list[str] = []
    before_command = True
    it = iter(args)
    for arg in it:
        if arg == "--":
            rest.append(arg)
            rest.extend(it)
            break
        if arg in _FRONT or (before_command and arg in _BACK):
            target = front if arg in _FRONT else back
            target.append(arg)
            value = next(it, None)
            if value is not None:
                target.append(value)
        elif _split(arg, _FRONT):
            front.append(arg)
        elif before_command and _split(arg, _BACK):
            back.append(arg)
        else:
            if not arg.startswith("-"):
                before_command = False
            rest.append(arg)
    if back:
        cut = rest.index("--") if "--" in rest else len(rest)
        rest[cut:cut] = back
    return front + rest
