"""The shipped example profiles on an OpenAI-compatible server (``local-researcher``,
``openai-researcher``) are off until the user names them in ``agents.allowed``: the CLI
(``jpfs query``, ``jpfs conversation new``) and the library refuse them, with nothing
sent to the server and nothing created, and run them once named."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from jpfs import api
from jpfs.core.config import SCHEMA
from jpfs.errors import ProfileError
from tests.chat_server import ChatServer, chat_server, chat_text
from tests.conftest import Result

__all__ = ["chat_server"]  # the fixture

EXAMPLES = ("local-researcher", "openai-researcher")


@pytest.fixture
def served(ws: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> ChatServer:
    """Both examples pointed at the local server: local-researcher's Ollama URL moved
    to it (as a user whose server listens elsewhere would), openai-researcher through
    the SDK's OPENAI_BASE_URL."""
    profile = ws / ".jpfs" / "agents" / "local-researcher.toml"
    text = profile.read_text(encoding="utf-8")
    moved = re.sub(r'base_url = "[^"]*"', f'base_url = "{chat_server.url}"', text)
    assert moved != text
    profile.write_text(moved, encoding="utf-8")
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    chat_server.responder = lambda _: chat_text("found it")
    return chat_server


def conversations(ws: Path) -> list[str]:
    return sorted(p.name for p in (ws / "conversations").iterdir() if not p.name.startswith("."))


def allow(cli: Callable[..., Result], name: str) -> None:
    names = [*SCHEMA["agents.allowed"].default, name]
    done = cli("config", "set", "agents.allowed", json.dumps(names))
    assert done.code == 0, done.stderr


def refused(name: str, stderr: str) -> None:
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert f"agent {name!r} is not in agents.allowed" in stderr, stderr


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_cli_refuses_an_example_until_it_is_allowed(
    ws: Path, cli: Callable[..., Result], served: ChatServer, name: str
) -> None:
    before = conversations(ws)
    for argv in (
        ("query", "--new", "--agent", name, "hi"),
        ("query", "--new", "--agent", name, "--budget-tokens", "1000", "hi"),
        ("conversation", "new", "--agent", name),
    ):
        result = cli(*argv)
        assert result.code == 1, (argv, result.stdout)
        refused(name, result.stderr)
    assert served.requests == [] and conversations(ws) == before

    # The refusal names the command that allows it: run as written.
    command = shlex.split(result.stderr.split("`")[1])
    assert command[:4] == ["jpfs", "config", "set", "agents.allowed"], command
    done = cli(*command[1:])
    assert done.code == 0, done.stderr
    result = cli("query", "--new", "--agent", name, "hi")
    assert result.code == 0, result.stderr
    assert result.stdout.strip() == "found it"
    assert [r.body["model"] for r in served.requests] == [
        "qwen3:8b" if name == "local-researcher" else "gpt-4.1-mini"
    ]
    assert cli("conversation", "new", "--agent", name).code == 0


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_library_refuses_an_example_until_it_is_allowed(
    ws: Path, cli: Callable[..., Result], served: ChatServer, name: str
) -> None:
    before = conversations(ws)
    with pytest.raises(ProfileError, match=f"agent '{name}' is not in agents.allowed"):
        api.call(name, "hi", workspace_dir=ws)
    with pytest.raises(ProfileError, match=f"agent '{name}' is not in agents.allowed"):
        api.onboard(name, "Our service is slow.", workspace_dir=ws)
    assert served.requests == [] and conversations(ws) == before

    allow(cli, name)
    assert api.call(name, "hi", workspace_dir=ws).strip() == "found it"
    assert len(served.requests) == 1


LEAD = """\
description = "A lead that delegates to {name}."
model = "claude-test"
[onboarding]
enabled = false
[tools]
agents = ["{name}"]
"""


def test_a_child_the_user_starts_takes_an_agent_allowed_or_named_by_its_parent(
    ws: Path, cli: Callable[..., Result], served: ChatServer
) -> None:
    """Under a parent, the user (CLI, library) may start a profile in agents.allowed or
    in the parent profile's [tools] agents, and no other: a child is no way around a
    profile that is off. (A caller confined by --root-id is a tool script, whose own
    enum checked the profile: the seeds' jp_query.)"""
    name = "openai-researcher"
    parent = cli("conversation", "new", "--agent", "default", "--no-activate").stdout.strip()
    before = sorted(p.name for p in (ws / "conversations" / parent).iterdir())
    result = cli("conversation", "new", "--parent", parent, "--agent", name)
    assert result.code == 1, result.stdout
    assert result.stderr.count("\n") == 1, result.stderr
    listed = ", ".join(SCHEMA["agents.allowed"].default)  # the parent's are among them
    assert (
        f"agent {name!r} is not in agents.allowed or the agents {parent!r} may call"
        f" ({listed}): name one of those, or add it to agents.allowed or"
        f" to [tools] agents in the profile of {parent!r}"
    ) in result.stderr, result.stderr
    with pytest.raises(ProfileError, match=f"the agents '{parent}' may call"):
        api.onboard(name, "Our service is slow.", parent=parent, workspace_dir=ws)
    assert served.requests == []
    assert sorted(p.name for p in (ws / "conversations" / parent).iterdir()) == before
    made = cli("conversation", "new", "--parent", parent, "--agent", "researcher").stdout.strip()
    moved = cli("conversation", "set-agent", made, name)
    assert moved.code == 1 and f"the agents {parent!r} may call" in moved.stderr, moved.stderr

    # A tool script confined by --root-id checked the profile against its own enum.
    scoped = cli("conversation", "new", "--root-id", parent, "--agent", name, "--no-activate")
    assert scoped.code == 0 and scoped.stdout.strip().startswith(parent + "/"), scoped.stderr

    # A parent whose profile names it may have it started below.
    (ws / ".jpfs" / "agents" / "lead.toml").write_text(LEAD.format(name=name), encoding="utf-8")
    allow(cli, "lead")
    lead = cli("conversation", "new", "--agent", "lead", "--no-activate").stdout.strip()
    child = cli("conversation", "new", "--parent", lead, "--agent", name, "--no-activate")
    assert child.code == 0 and child.stdout.strip().startswith(lead + "/"), child.stderr
    made = cli("conversation", "new", "--parent", lead, "--agent", "researcher").stdout.strip()
    assert cli("conversation", "set-agent", made, name).code == 0
    result = cli("query", "--id", child.stdout.strip(), "hi")
    assert result.code == 0 and result.stdout.strip() == "found it", result.stderr
    assert len(served.requests) == 1
