"""`jpfs query` with a daemon running hands its run to the daemon (jpfs.services.run.handoff,
jpfs.services.daemon.queryserver): real daemon process, real socket, the real SDK
against the local Messages API server, the real CLI in its own process."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpfs.services.run import handoff
from tests.conftest import (
    git,
    jpfs_subprocess,
    rgit,
    running_daemon,
    use_only_agent,
    wait_until,
)
from tests.messages_server import MessagesServer, gated_text_stream, text_reply

AGENT = """
model = "claude-handoff"
provider = "anthropic"
[onboarding]
enabled = false
"""

SCRIPTED = """
model = "script-zero"
provider = "script"
[onboarding]
enabled = false
[[script.turns]]
text = "ok: {input}"
"""


def daemon_log(ws: Path) -> str:
    return (ws / ".jpfs/local/daemon.log").read_text(encoding="utf-8")


def handed_over(ws: Path) -> list[str]:
    """The conversations the daemon ran for a `jpfs query`, from its log."""
    return re.findall(r"(\S+): query handed over by the CLI", daemon_log(ws))


@pytest.fixture
def talker_ws(ws: Path, api_env: MessagesServer) -> Path:
    use_only_agent(ws, "talker", AGENT)
    api_env.streaming = True
    return ws


@pytest.fixture
def daemon(talker_ws: Path) -> Iterator[Path]:
    with running_daemon(talker_ws):
        yield talker_ws


class Client:
    """`jpfs query` in its own process, its stdout read as it comes."""

    def __init__(self, ws: Path, *args: str, importtime: bool = False) -> None:
        flags = ["-X", "importtime"] if importtime else []
        self.proc = subprocess.Popen(
            [sys.executable, *flags, "-m", "jpfs", "query", *args],
            cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ},
        )  # fmt: skip
        self.seen = bytearray()
        self.err = bytearray()
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.seen), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _read(stream: object, into: bytearray) -> None:
        fd = stream.fileno()  # type: ignore[attr-defined]
        while chunk := os.read(fd, 4096):
            into.extend(chunk)

    def wait(self) -> int:
        code = self.proc.wait(timeout=60)
        for thread in self._threads:
            thread.join(timeout=10)
        return code


def test_a_query_is_run_by_the_daemon_streamed_and_the_client_loads_no_sdk(
    daemon: Path, api_env: MessagesServer
) -> None:
    gate = threading.Event()
    api_env.enqueue(gated_text_stream("The first words, ", "then the rest.", gate))
    client = Client(daemon, "--stream", "Tell me.", importtime=True)
    try:
        # The first words are on stdout while the server still holds back the rest.
        wait_until(lambda: b"The first words, " in client.seen, timeout=30, message="text")
        assert b"then the rest." not in client.seen
    finally:
        gate.set()
    assert client.wait() == 0, client.err.decode()
    assert client.seen.decode() == "The first words, then the rest.\n"
    conv = re.search(r"conversation (\S+)", client.err.decode())
    assert conv is not None and handed_over(daemon) == [conv.group(1)]
    # What the client imported (-X importtime): none of the run's heavy parts.
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in client.err.decode().splitlines()
        if line.startswith("import time:")
    }
    roots = {name.split(".")[0] for name in imported}
    assert imported and not {"anthropic", "httpx2", "openai", "pygit2"} & roots
    assert not {"jpfs.services.daemon", "jpfs.services.run.runtime"} & imported
    # The daemon loads the SDK its profiles use, not one no allowed profile uses (the
    # shipped openai examples are off).
    wait_until(lambda: "SDKs loaded" in daemon_log(daemon), message="the SDK warm-up")
    assert "SDKs loaded for handed-over queries: anthropic\n" in daemon_log(daemon)
    # Warm, the daemon's process took what it had loaded out of the garbage collector's
    # sight (each full collection walked it all with every thread stopped).
    settled = re.search(r"heap settled: (\d+) objects", daemon_log(daemon))
    assert settled and int(settled.group(1)) > 50_000, daemon_log(daemon)[-2000:]


def _history(ws: Path, conv: str) -> list[str]:
    """Subjects and trailers of the commits touching ``conv``, with its id made neutral."""
    log = rgit(ws, "log", "--reverse", "--format=%s%n%(trailers:only)%n--", "--", conv)
    return [
        line.replace(conv, "ID")
        for line in log.splitlines()
        if line.strip() and not line.startswith(("Jpfs-Time", "Jpfs-Duration"))
    ]


def test_the_daemons_run_is_the_run_the_cli_would_have_made(
    talker_ws: Path, api_env: MessagesServer
) -> None:
    api_env.responder = lambda request: text_reply("Here it is.")
    with running_daemon(talker_ws):
        by_daemon = jpfs_subprocess("query", "--new", "--hidden", "Do it.", cwd=talker_ws)
    by_cli = jpfs_subprocess("query", "--new", "--hidden", "Do it.", cwd=talker_ws)
    assert (by_daemon.returncode, by_daemon.stdout) == (0, "Here it is.\n"), by_daemon.stderr
    assert (by_cli.returncode, by_cli.stdout) == (0, "Here it is.\n"), by_cli.stderr
    first = re.findall(r"conversation (\S+)", by_daemon.stderr)[-1]
    second = re.findall(r"conversation (\S+)", by_cli.stderr)[-1]
    assert handed_over(talker_ws) == [first]
    assert by_daemon.stderr.replace(first, "ID") == by_cli.stderr.replace(second, "ID")
    # The run's usage comes back from the daemon too (the server's 10 + 5 tokens).
    assert f"conversation {first} · 15 tokens, $?" in by_daemon.stderr
    assert _history(talker_ws, first) == _history(talker_ws, second)
    requests = api_env.bodies
    assert len(requests) == 2 and requests[0]["messages"] == requests[1]["messages"]
    # Continuing the first one (the active conversation) goes to the daemon too.
    with running_daemon(talker_ws):
        again = jpfs_subprocess("query", "--id", first, "And again?", cwd=talker_ws)
    assert again.returncode == 0 and again.stdout == "Here it is.\n", again.stderr
    assert handed_over(talker_ws) == [first, first]


def test_errors_from_the_daemon_are_the_cli_errors(daemon: Path) -> None:
    missing = jpfs_subprocess("query", "--id", "no-such-one", "Hello?", cwd=daemon)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1, missing.stderr
    assert "no-such-one" in missing.stderr and "Traceback" not in missing.stderr
    bad = jpfs_subprocess("query", "--new", "--agent", "nobody", "Hi.", cwd=daemon)
    assert bad.returncode == 1 and "nobody" in bad.stderr, bad.stderr
    assert "query not taken" not in daemon_log(daemon)  # both were the daemon's answers


def test_ctrl_c_on_the_client_cancels_the_daemons_run(
    daemon: Path, api_env: MessagesServer
) -> None:
    gate = threading.Event()
    api_env.enqueue(gated_text_stream("Thinking, ", "never sent.", gate))
    client = Client(daemon, "--stream", "Take your time.")
    try:
        wait_until(lambda: b"Thinking, " in client.seen, timeout=30, message="first words")
        client.proc.send_signal(signal.SIGINT)
        assert client.wait() == 130
        wait_until(
            lambda: "handed-over run cancelled: the client went away" in daemon_log(daemon),
            timeout=20,
            message="the daemon to cancel the run",
        )
    finally:
        gate.set()
    assert b"never sent." not in client.seen


def test_a_stale_socket_without_a_daemon_falls_back_at_once(
    ws: Path, api_env: MessagesServer
) -> None:
    use_only_agent(ws, "zero", SCRIPTED)
    local = ws / ".jpfs" / "local"
    stale = socket.socket(socket.AF_UNIX)
    with handoff.socket_address(local) as address:
        stale.bind(address)  # a socket file nobody listens on: what a killed daemon leaves
    stale.close()
    started = time.monotonic()
    assert handoff.hand_over(local, handoff.QueryRequest("hi"), []) is None
    assert (
        time.monotonic() - started < 3.0
    )  # at once: no wait for an answer (bound for a loaded machine)
    done = jpfs_subprocess("query", "Hello.", cwd=ws)
    assert (done.returncode, done.stdout) == (0, "ok: Hello.\n"), done.stderr


def test_another_environment_is_run_in_process(ws: Path) -> None:
    use_only_agent(ws, "zero", SCRIPTED)
    with running_daemon(ws):
        other = jpfs_subprocess("query", "Hi.", cwd=ws, env={"JPFS_QUERY__LOCK_WAIT": "1"})
        same = jpfs_subprocess("query", "Hi again.", cwd=ws)
    assert (other.returncode, other.stdout) == (0, "ok: Hi.\n"), other.stderr
    assert (same.returncode, same.stdout) == (0, "ok: Hi again.\n"), same.stderr
    assert "query not taken (another environment than the daemon's)" in daemon_log(ws)
    assert len(handed_over(ws)) == 1


def test_a_workspace_deeper_than_sun_path_still_hands_over(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    git(deep, "init", "-q", "-b", "main")
    git(deep, "commit", "-q", "--allow-empty", "-m", "initial")
    assert jpfs_subprocess("init", cwd=deep).returncode == 0
    use_only_agent(deep, "zero", SCRIPTED)
    assert len(os.fsencode(deep / ".jpfs/local" / handoff.SOCKET)) > 108
    with running_daemon(deep):
        done = jpfs_subprocess("query", "Deep.", cwd=deep)
    assert (done.returncode, done.stdout) == (0, "ok: Deep.\n"), done.stderr
    assert len(handed_over(deep)) == 1


ASKER = """
model = "m"
provider = "script"
[onboarding]
enabled = true
[[script.onboarding]]
questions = ["Which database?"]
[[script.onboarding]]
questions = ["Any deadline?"]
[[script.turns]]
text = "WORKED ON: {input}"
"""


def test_questions_come_back_from_the_daemon_as_from_the_cli(ws: Path) -> None:
    use_only_agent(ws, "asker", ASKER)
    with running_daemon(ws):
        first = jpfs_subprocess("query", "--new", "--non-interactive", "Migrate the DB", cwd=ws)
        conv = re.findall(r"(\S+): query handed over by the CLI", daemon_log(ws))
        assert first.returncode == 4, first.stderr
        assert first.stdout.startswith(f'<questions conversation_id="{conv[0]}">')
        assert "Which database?" in first.stdout
        assert f"answer with: jpfs answer {conv[0]}" in first.stderr
        second = jpfs_subprocess("query", "--id", conv[0], "Postgres", cwd=ws)
    assert second.returncode == 4 and "Any deadline?" in second.stdout, second.stderr
    assert handed_over(ws) == [conv[0], conv[0]]


def test_queries_in_a_row_on_one_conversation_never_fail_as_busy(
    talker_ws: Path, api_env: MessagesServer
) -> None:
    """The daemon looks at a conversation once its run ended (the run's own commits wake
    it): a query right after another waits for that look instead of failing."""
    api_env.responder = lambda request: text_reply("Here it is.")
    with running_daemon(talker_ws):
        first = jpfs_subprocess("query", "--new", "Go.", cwd=talker_ws)
        assert first.returncode == 0, first.stderr
        conv = re.findall(r"conversation (\S+)", first.stderr)[-1]
        for n in range(6):
            again = jpfs_subprocess("query", "--id", conv, f"Again {n}.", cwd=talker_ws)
            assert (again.returncode, again.stdout) == (0, "Here it is.\n"), again.stderr
    assert len(api_env.requests) == 7
