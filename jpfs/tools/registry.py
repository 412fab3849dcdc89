"""The registry: which tools an agent gets. Exactly those its profile lists, no more."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jpfs.core import agentconfig
from jpfs.core.tool import Tool
from jpfs.errors import ProfileError


def catalog(config: Mapping[str, Any], agents_dir: Path | None = None) -> dict[str, Tool]:
    """Every tool that could exist for this configuration (before the allow list)."""
    from jpfs.tools import branches, command, conversation, fs, lifecycle, provenance

    tools: dict[str, Tool] = {}
    tools.update(conversation.build(config, agents_dir))
    tools.update(lifecycle.build(config))
    tools.update(fs.FS_TOOLS)
    tools.update(branches.TOOLS)
    tools.update(provenance.TOOLS)
    for spec in command.parse_command_tools(config.get("tools", {})):
        tools[spec.name] = command.make_command_tool(spec)
    return tools


def build_tools(config: Mapping[str, Any], agents_dir: Path | None = None) -> dict[str, Tool]:
    settings = agentconfig.view(config)
    allow = list(settings.tools.allow)
    declared = {str(c.get("name")) for c in settings.tools.command}
    out: dict[str, Tool] = {}
    if not allow and not settings.tools.command:
        return out  # an agent without tools does not import their modules (re2 and more)
    everything = catalog(config, agents_dir)
    for name in [*allow, *sorted(declared - set(allow))]:
        tool = everything.get(name)
        if tool is None:
            raise ProfileError(f"profile {settings.name!r} lists unknown tool {name!r}")
        out[name] = tool
    return out
