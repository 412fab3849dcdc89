"""Global options anywhere on the command line: ``jpfs mcp -w DIR`` as ``jpfs -w DIR mcp``.

click takes a group's options only before the subcommand, but users (and MCP client
configurations such as the README's ``"args": ["mcp", "-w", "/path/to/repo"]``) write
them after it too. The workspace option is moved to the front before parsing; nothing
after ``--`` is touched, and no subcommand has an option of that name.
"""

from __future__ import annotations

from collections.abc import Sequence

_WORKSPACE = ("-w", "--workspace")


def hoist_global_options(args: Sequence[str]) -> list[str]:
    """``args`` with every workspace option (and its value) moved to the front."""
    front: list[str] = []
    rest: list[str] = []
    it = iter(args)
    for arg in it:
        if arg == "--":
            rest.append(arg)
            rest.extend(it)
            break
        if arg in _WORKSPACE:
            front.append(arg)
            value = next(it, None)
            if value is not None:
                front.append(value)
        elif arg.startswith("--workspace=") or (
            arg.startswith("-w") and len(arg) > 2 and not arg.startswith("--")
        ):
            front.append(arg)
        else:
            rest.append(arg)
    return front + rest
