"""A provider's ``load_sdk`` (what a daemon runs once idle) loads what the SDK's first
call would otherwise load on a run's path (jpfs.infra.providers.attempts.warm_transport):
after it, a first call against a real local server imports nothing more of note.

Each case runs in a fresh interpreter, the only place where "first" means first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import json, os, sys, threading
from tests.{server_module} import {server_class}, {reply}
from jpfs.infra import providers
from jpfs.infra.providers.base import Request

with {server_class}() as server:
    server.responder = lambda request: {reply}("Done.")
    os.environ["{key_env}"] = "key-for-the-test"
    os.environ["{url_env}"] = server.url
    warm = sys.argv[1] == "warm"
    if warm:
        assert providers.load_sdk("{kind}")
    provider = providers.make({{"provider": "{kind}", "name": "x"}})
    request = Request(model="m", system="s", messages=[{{"role": "user", "content": "hi"}}])
    before = set(sys.modules)
    reply = provider.complete(request, threading.Event())
    assert reply.text.strip() == "Done.", reply
    print(json.dumps(sorted(set(sys.modules) - before)))
"""

CASES = {
    "anthropic": dict(
        server_module="messages_server",
        server_class="MessagesServer",
        key_env="ANTHROPIC_API_KEY",
        url_env="ANTHROPIC_BASE_URL",
        kind="anthropic",
        reply="text_reply",
    ),
    "openai": dict(
        server_module="chat_server",
        server_class="ChatServer",
        key_env="OPENAI_API_KEY",
        url_env="OPENAI_BASE_URL",
        kind="openai",
        reply="chat_text",
    ),
}


def first_call_imports(kind: str, mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(**CASES[kind]), mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("kind", sorted(CASES))
def test_after_load_sdk_a_first_call_imports_nothing_of_note(kind: str) -> None:
    cold = first_call_imports(kind, "cold")
    warm = first_call_imports(kind, "warm")
    # Cold, the first call loads the HTTP transport (httpcore2, h11...): the test
    # would otherwise pass for nothing.
    assert any(name.startswith("httpcore2") for name in cold), cold
    assert [name for name in warm if "." not in name or name.startswith("httpcore2")] == [], warm
