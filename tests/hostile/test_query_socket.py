"""Garbage on the daemon's query socket (``.jpfs/local/query.sock``): each bad
connection gets one error line or is dropped, and the daemon goes on serving
`jpfs query` to everyone else."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from jpfs.services.run import handoff
from tests.conftest import jpfs_subprocess
from tests.messages_server import MessagesServer


def exchange(ws: Path, payload: bytes, *, close_write: bool = True) -> list[dict[str, object]]:
    """Send ``payload`` on the socket; the JSON lines the daemon answers, until it closes."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(30)
    with handoff.socket_address(ws / ".jpfs" / "local") as address:
        sock.connect(address)
    try:
        try:
            sock.sendall(payload)
            if close_write:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # it may hang up mid-way through a flood: that is an answer too
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    finally:
        sock.close()
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def valid(**fields: object) -> bytes:
    request = {"v": handoff.VERSION, "text": "hi", "cfg": [], "env": "x", **fields}
    return json.dumps(request).encode() + b"\n"


def test_garbage_on_the_query_socket_is_refused_and_others_are_served(
    daemon: Path, api_env: MessagesServer
) -> None:
    cases = {
        "nothing": b"",
        "binary": b"\x00\xff\xfe garbage \x80\n",
        "not an object": b"[1, 2, 3]\n",
        "unknown key": valid(rm_rf=True),
        "wrong type": valid(text=42),
        "wrong version": valid(v=99),
        "bad onboard": valid(onboard=True),
        "no newline, then end": b'{"v": 1, "text": "hi"',
        "too long": b"x" * (handoff.MAX_LINE + 2),
    }
    for name, payload in cases.items():
        answers = exchange(daemon, payload)
        assert len(answers) <= 1, name
        if answers:
            assert answers[0]["type"] == "error" and answers[0]["exit"] == 2, (name, answers)
            assert str(answers[0]["message"]).startswith("bad request"), (name, answers)
    # An escape attempt in a valid request is the core's scope error, as in process.
    ours = handoff.env_digest(os.environ)
    escape = exchange(daemon, valid(conv_id="../../etc", env=ours), close_write=False)
    assert [a["type"] for a in escape] == ["error"] and escape[0]["exit"] == 1, escape
    assert exchange(daemon, valid(env="another"))[0]["type"] == "declined"
    done = jpfs_subprocess("query", "--new", "Still there?", cwd=daemon)
    assert done.returncode == 0 and done.stdout.startswith("echo: "), done.stderr
    log = (daemon / ".jpfs/local/daemon.log").read_text(encoding="utf-8")
    assert "query handed over by the CLI" in log and "Traceback" not in log
