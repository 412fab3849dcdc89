"""An agent's configuration: a profile's keys, their types and defaults, declared once
(:data:`TOP`, :data:`SUB`), and :class:`AgentConfig`, the frozen typed view jpfs reads
them through.

A profile is checked and filled by :func:`jpfs.core.profiles.normalize`, which stores
the result as the new conversation's ``[config]`` table, verbatim (:attr:`AgentConfig.raw`
keeps it, for snapshots and the providers). Everything else reads the typed view:
:func:`view` of a profile, a ``[config]`` snapshot, a tool caller's configuration.
``view`` never refuses: a conversation's files come from anyone, and a run admits its
snapshot (:func:`jpfs.core.profiles.admit`) before it acts on it; a listing or a budget
check reads a key that is absent or of the wrong type as its default, as the readers it
replaces did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from jpfs.core import models

Kind = type | tuple[type, ...]

# key -> (type, default). Tables are checked one level deep.
TOP: dict[str, tuple[Kind, Any]] = {
    "name": (str, ""),
    "model": (str, None),
    "provider": (str, "anthropic"),
    "description": (str, ""),
    "max_tokens": (int, 8192),
    "timeout": ((int, float), 600.0),
    "prompt_cache": (bool, True),
    "workspace": (str, "shared"),
    "overridable": (list, ["model"]),
    "system": (dict, {}),
    "tools": (dict, {}),
    "limits": (dict, {}),
    "onboarding": (dict, {}),
    "command": (dict, {}),
    "script": (dict, {}),
    # provider = "openai": where the server is, and which variable holds its key.
    "base_url": (str, None),
    "api_key_env": (str, None),
    # Thinking and the context window (jpfs.core.models): absent unless given.
    "thinking": ((str, int), None),
    "effort": (str, None),
    "context_window": (int, None),
}
SUB: dict[str, dict[str, tuple[Kind, Any]]] = {
    "tools": {
        "allow": (list, []),
        "agents": (list, []),
        "write": (list, []),
        "command": (list, []),
        # Paths (globs) the file tools may read although git ignores them or their name
        # is a well-known secret file's (jpfs.core.secrets).
        "expose": (list, []),
    },
    "limits": {
        "max_turns": (int, 20),
        "max_children": (int, 8),
        "max_depth": (int, 3),
        # Unset (None) means no limit; a set one must be > 0 (profiles._POSITIVE).
        "budget_tokens": (int, None),
        "budget_usd": ((int, float), None),
        "max_run_seconds": ((int, float), None),
    },
    "onboarding": {"enabled": (bool, False), "max_rounds": (int, 3)},
    "command": {"argv": (list, []), "timeout": ((int, float), 600.0)},
}


def is_a(value: object, kind: Kind) -> bool:
    """``isinstance``, except that a bool is no number (TOML's ``true`` is not ``1``)."""
    return isinstance(value, kind) and (not isinstance(value, bool) or kind is bool)


@dataclass(frozen=True)
class Tools:
    allow: tuple[str, ...]  # the tools the agent has
    agents: tuple[str, ...]  # the profiles it may start
    write: tuple[str, ...]  # globs its file tools may write
    command: tuple[Mapping[str, Any], ...]  # command tools (jpfs.tools.command_spec)
    expose: tuple[str, ...]  # globs its file tools may read although hidden


@dataclass(frozen=True)
class Limits:
    max_turns: int
    max_children: int
    max_depth: int
    budget_tokens: int | None  # None: no limit
    budget_usd: float | None
    max_run_seconds: float | None


@dataclass(frozen=True)
class Onboarding:
    enabled: bool
    max_rounds: int


@dataclass(frozen=True)
class Command:
    """``provider = "command"``: the program that answers, and how long it may take."""

    argv: tuple[str, ...]
    timeout: float


@dataclass(frozen=True)
class AgentConfig:
    name: str
    model: str  # "" in a snapshot that names none (a conversation not adopted yet)
    provider: str
    description: str
    max_tokens: int
    timeout: float
    prompt_cache: bool
    workspace: str  # "shared" or "branch"
    overridable: tuple[str, ...]
    system: tuple[str, ...]  # the prompt's sections, in order
    tools: Tools
    limits: Limits
    onboarding: Onboarding
    command: Command
    script: Mapping[str, Any]  # provider = "script": its turns, as the profile wrote them
    base_url: str | None
    api_key_env: str | None
    thinking: str | int | None
    effort: str | None
    context_window: int | None
    raw: Mapping[str, Any]  # the table this was read from, as written

    def thinking_setting(self) -> models.ThinkingSetting:
        """The thinking it runs with: its own, else its model's default."""
        # A profile's is one of these (normalize checks it), a snapshot's too once admitted.
        return models.thinking_of(self.model, cast("models.ThinkingSetting | None", self.thinking))

    def window(self) -> int | None:
        """The context window its prompts must fit (None: unknown)."""
        return models.window_of(self.model, self.context_window)


def _get(table: Mapping[str, Any], key: str, spec: tuple[Kind, Any]) -> Any:
    value = table.get(key)
    return value if is_a(value, spec[0]) else spec[1]


def _table(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    table = data.get(name)
    given = table if isinstance(table, Mapping) else {}
    return {key: _get(given, key, spec) for key, spec in SUB[name].items()}


def _strings(items: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in items)


def _number(value: int | float | None) -> float | None:
    return None if value is None else float(value)


def view(data: Mapping[str, Any]) -> AgentConfig:
    """The typed view of a configuration (a normalized profile, a ``[config]`` snapshot):
    each key absent or of the wrong type read as its default (the module docstring)."""
    data = data if isinstance(data, Mapping) else {}
    top = {key: _get(data, key, spec) for key, spec in TOP.items()}
    tools, limits = _table(data, "tools"), _table(data, "limits")
    onboarding, command = _table(data, "onboarding"), _table(data, "command")
    return AgentConfig(
        name=top["name"],
        model=top["model"] or "",
        provider=top["provider"],
        description=top["description"],
        max_tokens=top["max_tokens"],
        timeout=float(top["timeout"]),
        prompt_cache=top["prompt_cache"],
        workspace=top["workspace"],
        overridable=_strings(top["overridable"]),
        system=tuple(str(s) for s in top["system"].values()),
        tools=Tools(
            allow=_strings(tools["allow"]),
            agents=_strings(tools["agents"]),
            write=_strings(tools["write"]),
            command=tuple(c for c in tools["command"] if isinstance(c, Mapping)),
            expose=_strings(tools["expose"]),
        ),
        limits=Limits(
            max_turns=limits["max_turns"],
            max_children=limits["max_children"],
            max_depth=limits["max_depth"],
            budget_tokens=limits["budget_tokens"],
            budget_usd=_number(limits["budget_usd"]),
            max_run_seconds=_number(limits["max_run_seconds"]),
        ),
        onboarding=Onboarding(onboarding["enabled"], onboarding["max_rounds"]),
        command=Command(_strings(command["argv"]), float(command["timeout"])),
        script=top["script"],
        base_url=top["base_url"],
        api_key_env=top["api_key_env"],
        thinking=top["thinking"],
        effort=top["effort"],
        context_window=top["context_window"],
        raw=data,
    )
