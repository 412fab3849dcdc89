"""Handlers for the blocks of protocol/agents.md's "Thinking" and "What the model sees
and what the record keeps" (registered in ``tests/docs/test_docs.py``'s ``DOCS``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.conftest import git
from tests.docs.docblocks import Block

BIN = Path(sys.executable).parent


class HasTmp(Protocol):
    tmp: Path


def _profile(env: HasTmp, text: str, name: str) -> Any:
    from jpfs.core import profiles

    agents = env.tmp / "agents"
    agents.mkdir(exist_ok=True)
    (agents / f"{name}.toml").write_text(text, encoding="utf-8")
    return profiles.load(agents, name)


def fable_effort(block: Block, env: HasTmp) -> None:
    """It loads, thinks adaptively without saying so, and "off" is refused for it."""
    from jpfs.core import models
    from jpfs.errors import ProfileError

    config = _profile(env, block.text, "fable").config
    assert config["effort"] == "medium" and "thinking" not in config
    assert models.thinking_param(config["model"], models.setting(config)) == {"type": "adaptive"}
    with pytest.raises(ProfileError, match="always thinks"):
        _profile(env, block.text + 'thinking = "off"\n', "fable-off")


def sonnet_adaptive(block: Block, env: HasTmp) -> None:
    """Thinking on when asked, at the effort asked; off (nothing sent) when left out."""
    from jpfs.core import models

    config = _profile(env, block.text, "sonnet").config
    assert models.thinking_param(config["model"], models.setting(config)) == {"type": "adaptive"}
    assert config["effort"] == "high"
    plain = _profile(env, 'model = "claude-sonnet-4-6"\nprovider = "anthropic"\n', "plain")
    assert models.thinking_param("claude-sonnet-4-6", models.setting(plain.config)) is None


def local_window(block: Block, env: HasTmp) -> None:
    """The window is the profile's; a 12-file read on it is fitted within it."""
    from jpfs.core import models
    from jpfs.core.conversation import create
    from jpfs.core.view import Frame, fit

    config = _profile(env, block.text, "local").config
    assert models.context_window(config) == 8192 and config["max_tokens"] == 1024
    conv = create(env.tmp / "root", "c", agent="local")
    conv.append_event("user", "Read the twelve files.")
    for n in range(12):
        call = {"id": f"t{n}", "name": "fs_read_file", "input": {"path": f"f{n}"}}
        conv.append_event("assistant", "", {"tool_calls": [call]})
        conv.append_event("tool", "x" * 6000, {"tool_call_id": f"t{n}"})
    view = fit(conv.events(), Frame(8192, 1024, 1000), lambda ev: ev.path.name)
    assert view.tokens + view.max_tokens <= 8192 and view.notes > 0


def folded_thinking(block: Block, env: HasTmp) -> None:
    """``jpfs conversation print`` shows an assistant event with thinking as the block
    does; ``--format json`` keeps the thinking whole."""
    import json

    ws = env.tmp / "ws"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    (ws / "README.md").write_text("x\n", encoding="utf-8")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "init")
    _jpfs(ws, "init")
    from jpfs.core.conversation import create

    conv = create(ws / "conversations", "c", agent="default")
    conv.append_event("user", "Do the three files agree?")
    text = block.text.split("\n\n", 2)[2].strip()
    thinking = {"type": "thinking", "thinking": "t" * 1024, "signature": "c2lnbmF0dXJl"}
    meta = {
        "model": "claude-fable-5-1",
        "usage": {"input_tokens": 1210, "output_tokens": 342},
        "thinking": [thinking],
    }
    conv.append_event("assistant", text, meta)
    shown = _jpfs(ws, "conversation", "print", "c").stdout
    assert block.text.strip() in shown
    assert "t" * 100 not in shown
    data = json.loads(_jpfs(ws, "conversation", "print", "c", "--format", "json").stdout)
    assert data["events"][1]["meta"]["thinking"] == [thinking]


def trimmed_note(block: Block, env: HasTmp) -> None:
    """The note is what jpfs sends in place of a 6,000-character result."""
    from jpfs.core.conversation import create
    from jpfs.core.view import note

    conv = create(env.tmp / "notes", "c", agent="a")
    conv.append_event("user", "u")
    conv.append_event("assistant", "a")
    ev = conv.append_event("tool", "x" * 5999 + "\n", {"tool_call_id": "t"})
    written = note(ev, "conversations/c-01jh.../events/0003-tool.md")
    assert written == block.text.strip()
    assert re.search(r"\(6,000 characters\)", written)


def _jpfs(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(BIN / "jpfs"), *args], cwd=cwd, capture_output=True, text=True, check=False,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"jpfs {' '.join(args)}: {done.stderr}"
    return done


def thinking_usage(block: Block, env: HasTmp) -> None:
    """The usage block is what jpfs records for such a call: its cost at the shipped
    price of claude-fable-5-1, output tokens (thinking included) at the output price."""
    import tomllib

    from jpfs.core import prices, usage
    from jpfs.infra.providers.base import Usage

    shown = tomllib.loads(block.text)["usage"]
    counts = Usage(**{k: shown[k] for k in Usage().counts()})
    recorded = usage.record(counts, "claude-fable-5-1", prices.PRICES)
    assert recorded == shown
