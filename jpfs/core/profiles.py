"""Agent profiles: ``.jpfs/agents/<name>.toml``. A profile *is* the security policy.

A sub-agent's configuration is built from its profile alone (the ``NONE``
boundary: nothing from the workspace config reaches it), plus the few keys its
caller may override (``overridable``, default only ``model``). The resolved
configuration is stored in the new conversation's ``[config]`` table and never
re-applied: a conversation keeps the configuration it was created with.
"""

from __future__ import annotations

import copy
import functools
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpfs.core import agentconfig, models
from jpfs.core.agentconfig import SUB, TOP, AgentConfig
from jpfs.core.config import parse_toml, parse_value, read_toml
from jpfs.errors import ProfileError, ScopeError

PROVIDERS = ("anthropic", "command", "script", "openai")
# Keys only the openai provider reads, absent unless given (refused for the others).
OPENAI_KEYS = ("base_url", "api_key_env")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Keys absent from a normalized profile unless given: a snapshot made before they
# existed, or of a profile that does not set them, stays as it was.
OPTIONAL_KEYS = (*OPENAI_KEYS, "thinking", "effort", "context_window")

# Limits that are absent unless set, and then bound something: 0 would stop every call.
_POSITIVE = ("budget_tokens", "budget_usd", "max_run_seconds")


def _typename(t: type | tuple[type, ...]) -> str:
    return "/".join(x.__name__ for x in t) if isinstance(t, tuple) else t.__name__


def _check(where: str, key: str, value: Any, t: type | tuple[type, ...]) -> None:
    if not agentconfig.is_a(value, t):
        raise ProfileError(f"{where}: {key!r} must be {_typename(t)}, got {value!r}")


def normalize(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Fill defaults and check types; unknown keys are errors (typos are policy bugs)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in TOP:
            raise ProfileError(f"{where}: unknown key {key!r}")
        _check(where, key, value, TOP[key][0])
    for key, (_, default) in TOP.items():
        if key in OPTIONAL_KEYS and key not in data:
            continue  # no default: a snapshot of another provider's profile stays as it was
        out[key] = copy.deepcopy(data.get(key, default))
    if not out["model"]:
        raise ProfileError(f'{where}: a profile must name its model (add `model = "..."`)')
    if out["provider"] not in PROVIDERS:
        raise ProfileError(f"{where}: provider must be one of {', '.join(PROVIDERS)}")
    if out["workspace"] not in ("shared", "branch"):
        raise ProfileError(f'{where}: workspace must be "shared" or "branch"')
    for table, keys in SUB.items():
        given = out[table]
        for key, value in given.items():
            if key not in keys:
                raise ProfileError(f"{where}: unknown key {table}.{key}")
            _check(where, f"{table}.{key}", value, keys[key][0])
        for key, (_, default) in keys.items():
            if default is not None:
                given.setdefault(key, copy.deepcopy(default))
    for key in _POSITIVE:
        value = out["limits"].get(key)
        if value is not None and not value > 0:
            raise ProfileError(f"{where}: limits.{key} must be > 0 (leave it out for no limit)")
    for key, value in out["system"].items():
        _check(where, f"system.{key}", value, str)
    if out["provider"] == "command" and not out["command"]["argv"]:
        raise ProfileError(f'{where}: provider "command" needs command.argv')
    _check_openai(out, where)
    typed = agentconfig.view(out)
    models.check(
        where,
        model=typed.model,
        provider=typed.provider,
        max_tokens=typed.max_tokens,
        thinking=typed.thinking,
        effort=typed.effort,
        window=typed.context_window,
    )
    return out


def _check_openai(out: Mapping[str, Any], where: str) -> None:
    given = [key for key in OPENAI_KEYS if key in out]
    if given and out["provider"] != "openai":
        raise ProfileError(
            f'{where}: {given[0]!r} applies only to provider = "openai"'
            f" (this profile's provider is {out['provider']!r})"
        )
    url = out.get("base_url")
    if url is not None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProfileError(
                f"{where}: base_url must be an http(s) URL such as"
                f' "http://localhost:11434/v1", got {url!r}'
            )
    env = out.get("api_key_env")
    if env is not None and not _ENV_NAME.fullmatch(env):
        raise ProfileError(
            f"{where}: api_key_env must name an environment variable (such as"
            f' "OPENAI_API_KEY"), got {env!r}; the key itself never goes in a profile'
        )


@dataclass(frozen=True)
class Profile:
    name: str
    config: dict[str, Any]
    source: str

    @functools.cached_property
    def settings(self) -> AgentConfig:
        """:attr:`config`, typed."""
        return agentconfig.view(self.config)

    @property
    def model(self) -> str:
        return self.settings.model

    def system_prompt(self) -> str:
        return "\n\n".join(s.strip() for s in self.settings.system if s.strip())


def profile_path(agents_dir: Path, name: str) -> Path:
    if not name or "/" in name or name.startswith(".") or "\\" in name:
        raise ProfileError(f"bad profile name {name!r}")
    return agents_dir / f"{name}.toml"


def load(agents_dir: Path, name: str, content: bytes | None = None) -> Profile:
    """Profile ``name`` of ``agents_dir``; ``content``: its file's bytes, already read
    (so that what was parsed is exactly what a caller keeps or digests)."""
    path = profile_path(agents_dir, name)
    # Named as the user sees it (.jpfs/agents/NAME.toml): the message lands in error
    # events and the one-line `last` column of listings.
    shown = f"{agents_dir.parent.name}/{agents_dir.name}/{path.name}"
    if content is None:
        data = read_toml(path, ProfileError, shown)
    else:
        data = parse_toml(content, ProfileError, shown)
    if data is None:
        raise ProfileError(f"no agent profile {name!r} (expected {shown})")
    config = normalize(data, shown)
    config["name"] = name
    return Profile(name, config, str(path))


def available(agents_dir: Path) -> list[str]:
    try:
        return sorted(p.stem for p in agents_dir.glob("*.toml"))
    except FileNotFoundError:
        return []


def apply_overrides(profile: Profile, overrides: Sequence[str]) -> dict[str, Any]:
    """The configuration with caller overrides (``KEY=VALUE``) applied.

    Only keys the profile lists in ``overridable`` are accepted; anything else is a
    :class:`ScopeError`, because widening an agent's rights is the caller escaping
    the policy.
    """
    config = copy.deepcopy(profile.config)
    allowed = {k.removeprefix("assistant.") for k in profile.settings.overridable}
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip().removeprefix("assistant.")
        if not sep or not key:
            raise ProfileError(f"override {item!r}: expected KEY=VALUE")
        if key not in allowed:
            raise ScopeError(
                f"override {key!r} is not allowed by profile {profile.name!r}"
                f" (overridable: {', '.join(sorted(allowed)) or 'nothing'})"
            )
        value = parse_value(raw)
        *tables, leaf = key.split(".")
        node = config
        for t in tables:
            node = node.setdefault(t, {})
        node[leaf] = value
    return normalize(config, f"profile {profile.name!r} with overrides")


# Keys whose value is a capability: a conversation's snapshot may only narrow them.
# base_url and api_key_env too: a conversation's files must not send a request, and the
# key with it, to a server the profile does not name.
_EQUAL_KEYS = ("provider", "command", "script", "workspace", "base_url", "api_key_env")
_SUBSET_KEYS = ("allow", "agents", "write", "command", "expose")


def admit(snapshot: Mapping[str, Any], profile: Profile) -> dict[str, Any]:
    """The configuration a conversation runs with: its snapshot, if it only narrows what
    ``profile`` grants; :class:`ProfileError` naming the first widening otherwise.

    A conversation's files come from anyone who can write the record (a clone of
    someone else's repository, a peer sharing the remote), so they never grant a
    capability: the provider, command argv, scripted turns and workspace mode must be
    the profile's; tools, callable agents, writable paths and command tools a subset of
    the profile's; limits at most the profile's; the model the profile's unless the
    profile lets callers override it.
    """
    granted = profile.settings
    normalized = normalize(snapshot, f"the [config] snapshot of a conversation of {profile.name!r}")
    asked = agentconfig.view(normalized)
    overridable = {k.removeprefix("assistant.") for k in granted.overridable}
    where = f"conversation.toml asks for more than profile {profile.name!r} grants"
    for key in _EQUAL_KEYS:
        # Compared as written: these tables are the capability itself.
        mine, theirs = asked.raw.get(key), granted.raw.get(key)
        if key not in overridable and mine != theirs:
            raise ProfileError(f"{where}: {key} = {mine!r} (the profile has {theirs!r})")
    if "model" not in overridable and asked.model != granted.model:
        raise ProfileError(f"{where}: model {asked.model!r} (the profile has {granted.model!r})")
    for key in _SUBSET_KEYS:
        has = granted.raw["tools"][key]
        extra = [item for item in asked.raw["tools"][key] if item not in has]
        if extra:
            raise ProfileError(f"{where}: tools.{key} {extra!r}")
    for key, allows in granted.raw["limits"].items():
        value = asked.raw["limits"].get(key)
        if f"limits.{key}" in overridable or (value is not None and value <= allows):
            continue
        shown = "no limit" if value is None else str(value)
        raise ProfileError(f"{where}: limits.{key} = {shown} (the profile allows {allows})")
    extra_overridable = [k for k in asked.overridable if k not in granted.overridable]
    if extra_overridable:
        raise ProfileError(f"{where}: overridable {extra_overridable!r}")
    return normalized


def system_prompt(config: Mapping[str, Any] | AgentConfig) -> str:
    """The profile's sections, and what jpfs tells every agent. Nothing in it names the
    conversation: the prompt is the same for every conversation of a profile, so that a
    fork (whose transcript begins with its source's) and siblings read the same cached
    prefix (protocol/cost.md). A conversation's id travels as a request header."""
    settings = config if isinstance(config, AgentConfig) else agentconfig.view(config)
    sections = [s.strip() for s in settings.system if s.strip()]
    sections.append("(jpfs: your final reply is returned to your caller.)")
    return "\n\n".join(sections)
