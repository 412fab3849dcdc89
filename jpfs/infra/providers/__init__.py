"""Model providers: one ``complete`` call per model turn; the tool loop lives in the runtime.

:func:`make` builds the provider a profile names; its SDK is imported then, not before
(most commands never call a model).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jpfs.infra.providers.base import Provider


def make(config: Mapping[str, Any]) -> Provider:
    """The provider of a profile's ``[config]`` (``provider``, default ``anthropic``)."""
    kind = config.get("provider", "anthropic")
    if kind == "script":
        from jpfs.infra.providers.script import ScriptProvider

        return ScriptProvider(config.get("script", {}))
    if kind == "command":
        from jpfs.infra.providers.command import CommandProvider

        cmd = config.get("command", {})
        return CommandProvider(list(cmd.get("argv", [])), timeout=float(cmd.get("timeout", 600)))
    if kind == "openai":
        from jpfs.infra.providers.openai import DEFAULT_KEY_ENV, OpenAIProvider

        return OpenAIProvider(
            base_url=config.get("base_url"),
            api_key_env=config.get("api_key_env") or DEFAULT_KEY_ENV,
        )
    from jpfs.infra.providers.anthropic import AnthropicProvider

    return AnthropicProvider()


def load_sdk(kind: str) -> bool:
    """Import the SDK of provider ``kind`` now (a daemon does once idle, so that the first
    query handed to it does not wait for the import). False: ``kind`` has none."""
    if kind == "anthropic":
        from jpfs.infra.providers import anthropic

        anthropic.load_sdk()
        return True
    if kind == "openai":
        from jpfs.infra.providers import openai

        openai.load_sdk()
        return True
    return False


def key(config: Mapping[str, Any]) -> str:
    """What a provider is built from: a profile edited while the daemon runs (a new argv,
    new script turns, another server) gets a new provider, never the stale one."""
    kind = str(config.get("provider"))
    built_from = [config.get(kind), config.get("base_url"), config.get("api_key_env")]
    return f"{kind}:{config.get('name')}:{json.dumps(built_from, sort_keys=True)}"
