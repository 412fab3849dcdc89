"""The daemon as the benches drive it: a real ``jpfs daemon run`` process, a local
Messages API that notes each conversation's first request, scripted profiles, and
waiting for conversations to finish. Used by ``bench_daemon.py``.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HTTP_AGENT = """\
model = "bench-model"
provider = "anthropic"
[onboarding]
enabled = false
"""

ZERO_AGENT = """\
model = "script-zero"
provider = "script"
[onboarding]
enabled = false
[[script.turns]]
text = "ok"
"""


def slow_agent(turn: float) -> str:
    """The zero agent with a model turn of ``turn`` seconds (a scripted delay)."""
    return ZERO_AGENT.replace('text = "ok"', f'text = "ok"\ndelay = {turn}')


# -- a Messages API that records when each conversation's first request arrives --------


class Arrivals:
    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.cond = threading.Condition()

    def record(self, conv_id: str) -> None:
        with self.cond:
            self.first.setdefault(conv_id, time.time())
            self.cond.notify_all()

    def wait(self, conv_id: str, timeout: float = 30.0) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: conv_id in self.first, timeout):
                raise RuntimeError(f"no provider request for {conv_id} within {timeout}s")
            return self.first[conv_id]


@contextmanager
def messages_api(arrivals: Arrivals) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            conversation = self.headers.get("x-jpfs-conversation")  # jpfs names it there
            if conversation:
                arrivals.record(conversation)
            reply = json.dumps(
                {
                    "id": "msg_bench", "type": "message", "role": "assistant",
                    "model": body.get("model", ""), "stop_reason": "end_turn",
                    "stop_sequence": None, "content": [{"type": "text", "text": "ok"}],
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                }
            ).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# -- the daemon process ---------------------------------------------------------------------


class Daemon:
    def __init__(self, ws: Path, env: dict[str, str] | None = None) -> None:
        self.ws = ws
        out = (ws / ".jpfs" / "local" / "bench-daemon.out").open("ab")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jpfs", "daemon", "run", "--detached"],
            cwd=ws, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        out.close()
        self.wait(lambda s: s.get("pid") == self.proc.pid and s.get("ready"), 600, "ready")
        self.startup = time.monotonic() - started
        # Ready once watching; the catch-up (recovery, first scan) follows: time it too,
        # and let it finish before anything else is measured.
        self.wait(lambda s: s.get("catching_up") is False, 600, "caught up")
        self.caught_up = time.monotonic() - started

    def status(self) -> dict[str, Any]:
        try:
            data = json.loads((self.ws / ".jpfs/local/daemon.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def wait(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while not predicate(self.status()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited ({self.proc.returncode}) waiting for {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"daemon not {what} after {timeout}s")
            pause.wait(0.005)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def rescan_seconds(self) -> float:
        before = int(self.status().get("scans", 0))
        started = time.monotonic()
        self.proc.send_signal(signal.SIGHUP)
        self.wait(lambda s: int(s.get("scans", 0)) > before, 600, "rescanned")
        return time.monotonic() - started

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)


def wait_idle(ws: Path, ids: list[str], timeout: float) -> None:
    """Until every one of ``ids`` is idle, looking every 10 ms. Only a conversation with
    a ``result.md`` (written last by a run: idle needs it) has its state derived: a
    derivation parses its record, and doing that for 60 conversations every 10 ms would
    take a core from the daemon being measured."""
    from jpfs.core import tree
    from jpfs.core.conversation import RESULT, Conversation

    root = ws / "conversations"
    deadline = time.monotonic() + timeout
    pending = list(ids)
    pause = threading.Event()
    while pending:
        pending = [
            c
            for c in pending
            if not (root / c / RESULT).exists()
            or str(tree.state_of(Conversation(root, c))) != "idle"
        ]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} conversation(s) not idle after {timeout}s")
        if pending:
            pause.wait(0.01)


def save(path: Path, text: str) -> float:
    """Write in place, as most editors save; returns the time just before the write."""
    t0 = time.time()
    with path.open("w", encoding="utf-8") as fh:
        fh.write(text)
    return t0
