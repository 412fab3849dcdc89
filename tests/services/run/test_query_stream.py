"""`jpfs query` shows the answer as it arrives: the real SDK streaming from the local
Messages API server, the real CLI in its own process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jpfs.infra.providers.anthropic import AnthropicProvider
from jpfs.infra.providers.base import Request, ToolSpec
from tests.conftest import use_only_agent, wait_until
from tests.messages_server import (
    MessagesServer,
    gated_text_stream,
    text_reply,
    tool_use,
    tool_use_reply,
)

AGENT = """
model = "claude-streaming"
provider = "anthropic"
[onboarding]
enabled = false
"""


@pytest.fixture
def streaming_ws(ws: Path, api_env: MessagesServer) -> Path:
    use_only_agent(ws, "talker", AGENT)
    api_env.streaming = True
    return ws


def test_a_streamed_reply_is_the_reply_a_plain_request_gets(api_env: MessagesServer) -> None:
    api_env.streaming = True
    provider = AnthropicProvider()
    spec = ToolSpec("lookup", "Look up.", {"type": "object"})
    api_env.enqueue(
        tool_use_reply(tool_use("lookup", {"q": "ß", "n": [1, 2]}), text="Looking… "),
        tool_use_reply(tool_use("lookup", {"q": "ß", "n": [1, 2]}), text="Looking… "),
    )
    pieces: list[str] = []
    request = Request(model="m", system="", messages=[{"role": "user", "content": "hi"}])
    streamed = provider.complete(
        Request(**{**request.__dict__, "tools": (spec,), "on_text": pieces.append}),
        threading.Event(),
    )
    api_env.streaming = False
    plain = provider.complete(Request(**{**request.__dict__, "tools": (spec,)}), threading.Event())
    assert pieces == ["Looking… "]
    assert api_env.bodies[0].get("stream") is True and "stream" not in api_env.bodies[1]
    assert (streamed.text, streamed.stop_reason) == (plain.text, plain.stop_reason)
    assert [(c.name, c.input) for c in streamed.tool_calls] == [
        (c.name, c.input) for c in plain.tool_calls
    ]
    assert streamed.usage == plain.usage


def test_jpfs_query_prints_the_answer_as_it_arrives(
    streaming_ws: Path, api_env: MessagesServer
) -> None:
    gate = threading.Event()
    api_env.enqueue(gated_text_stream("The first words, ", "then the rest.", gate))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jpfs", "query", "--stream", "Tell me."],
        cwd=streaming_ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ},
    )  # fmt: skip
    seen = bytearray()
    assert proc.stdout is not None

    def read() -> None:
        assert proc.stdout is not None
        while chunk := os.read(proc.stdout.fileno(), 4096):
            seen.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # The first words are on stdout while the server still holds back the rest.
        wait_until(lambda: b"The first words, " in seen, timeout=30, message="streamed text")
        assert b"then the rest." not in seen
    finally:
        gate.set()
        proc.wait(timeout=30)
        reader.join(timeout=10)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert seen.decode() == "The first words, then the rest.\n"  # shown once, whole


def test_a_pipe_gets_the_answer_once_at_the_end(
    streaming_ws: Path, api_env: MessagesServer
) -> None:
    api_env.enqueue(text_reply("Just the answer."))
    done = subprocess.run(
        [sys.executable, "-m", "jpfs", "query", "Tell me."],
        cwd=streaming_ws, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Just the answer.\n"
    assert "stream" not in api_env.bodies[-1]


def test_turns_with_tool_calls_stream_too_and_the_answer_is_not_repeated(
    streaming_ws: Path, api_env: MessagesServer
) -> None:
    (streaming_ws / ".jpfs" / "agents" / "talker.toml").write_text(
        AGENT + '[tools]\nallow = ["fs_list_files"]\n', encoding="utf-8"
    )
    api_env.enqueue(
        tool_use_reply(tool_use("fs_list_files", {}), text="Let me look."),
        text_reply("There is a README."),
    )
    done = subprocess.run(
        [sys.executable, "-m", "jpfs", "query", "--stream", "What is here?"],
        cwd=streaming_ws, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Let me look.\n\nThere is a README.\n"
