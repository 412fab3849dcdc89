"""Real network git remotes on 127.0.0.1, for tests and benchmarks.

* :class:`GitDaemon`: ``git daemon`` serving a directory of bare repositories over
  ``git://`` with pushes enabled.
* :class:`SmartHttp`: ``git http-backend`` (git's smart HTTP CGI program) behind a
  threaded HTTP server of the standard library, pushes enabled.

* :class:`Sshd`: OpenSSH's ``sshd`` with a host key, a client key and a config of its
  own, serving the bare repositories under a directory to the real ``ssh`` client
  (git runs ``git-upload-pack`` / ``git-receive-pack`` through it).

All are context managers; ``url(name)`` is the URL of ``root/name``. ``stop()`` ends
the server and everything it started and checks that it ended; ``pause()`` and
``resume()`` take the remote away and bring it back on the same port (a remote that
goes away, as a network does).
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import http.server
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

_READY_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_reachable(url: str, timeout: float = _READY_TIMEOUT, ca: Path | None = None) -> None:
    """Until ``git ls-remote url`` answers (the server is up), or fail at the deadline;
    ``ca``: the certificate an HTTPS server's is checked against."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    last = ""
    env = {**os.environ, **({"GIT_SSL_CAINFO": str(ca)} if ca else {})}
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["git", "ls-remote", url], capture_output=True, text=True, timeout=timeout, env=env
        )
        if done.returncode == 0:
            return
        last = done.stderr.strip()
        tick.wait(0.05)
    raise RuntimeError(f"git server at {url} did not come up: {last}")


class GitDaemon:
    """``git daemon`` on 127.0.0.1 serving the bare repositories under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def start(self, probe: str | None = None) -> GitDaemon:
        self._proc = subprocess.Popen(
            [
                "git", "daemon", "--reuseaddr", "--export-all", "--informative-errors",
                "--enable=receive-pack", f"--base-path={self.root}", "--listen=127.0.0.1",
                f"--port={self.port}", str(self.root),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its per-connection children go with it (killpg)
        )  # fmt: skip
        if probe is not None:
            wait_reachable(self.url(probe))
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.poll() is not None, "git daemon did not stop"

    pause = stop

    def resume(self, probe: str | None = None) -> None:
        self.start(probe)

    def __enter__(self) -> GitDaemon:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _CgiHandler(http.server.BaseHTTPRequestHandler):
    """One request to ``git http-backend``: CGI variables in, its headers and body out."""

    server: _GitHttpServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._backend()

    def do_POST(self) -> None:
        self._backend()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: a test's output is its own

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _backend(self) -> None:
        path, _, query = self.path.partition("?")
        body = self._body()
        if self.server.auth is not None and self.headers.get("Authorization") != self.server.auth:
            # As a git host does: 401 and a Basic challenge, which git answers from a
            # credential helper, or by a prompt (never, for jpfs: GIT_TERMINAL_PROMPT=0).
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "jpfs-test",  # lets http-backend accept pushes
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
        }
        for header, var in (
            ("Content-Encoding", "HTTP_CONTENT_ENCODING"),
            ("Git-Protocol", "HTTP_GIT_PROTOCOL"),
        ):
            if self.headers.get(header):
                env[var] = self.headers[header]
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=120
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        if done.returncode != 0 and not head:
            status, payload = 500, done.stderr
        self.send_response(status)
        for name, value in headers:
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _GitHttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    root: Path
    auth: str | None = None  # the Authorization header a request must carry


class SmartHttp:
    """``git http-backend`` behind an HTTP server on 127.0.0.1, for the repos under ``root``.

    ``tls``: a directory for a self-signed certificate of 127.0.0.1, made here: served
    over HTTPS, which clients trust through ``GIT_SSL_CAINFO`` = :attr:`ca` (git's
    ``http.sslCAInfo``). ``auth``: a user and password every request must give (HTTP
    Basic), as a git host asks for them."""

    def __init__(
        self, root: Path, tls: Path | None = None, auth: tuple[str, str] | None = None
    ) -> None:
        self.root = root
        self.auth = auth
        self.port = free_port()
        self._httpd: _GitHttpServer | None = None
        self._thread: threading.Thread | None = None
        self.ca: Path | None = None
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            tls.mkdir(parents=True, exist_ok=True)
            self.ca, key = tls / "cert.pem", tls / "key.pem"
            subprocess.run(
                [
                    "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(self.ca),
                ],
                check=True, capture_output=True,
            )  # fmt: skip
            self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._tls.load_cert_chain(self.ca, key)

    def url(self, name: str) -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}/{name}"

    def start(self, probe: str | None = None) -> SmartHttp:
        httpd = _GitHttpServer(("127.0.0.1", self.port), _CgiHandler)
        httpd.root = self.root
        if self.auth is not None:
            pair = f"{self.auth[0]}:{self.auth[1]}".encode()
            httpd.auth = "Basic " + base64.b64encode(pair).decode("ascii")
        if self._tls is not None:
            httpd.socket = self._tls.wrap_socket(httpd.socket, server_side=True)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        if probe is not None:
            url = self.url(probe)
            if self.auth is not None:
                url = url.replace("://", f"://{self.auth[0]}:{self.auth[1]}@", 1)
            wait_reachable(url, ca=self.ca)
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(10)
            assert not self._thread.is_alive(), "the HTTP git server did not stop"

    pause = stop

    def resume(self, probe: str | None = None) -> None:
        self.start(probe)

    def __enter__(self) -> SmartHttp:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


SSHD = Path("/usr/sbin/sshd")


def sshd_missing() -> str:
    """Why the SSH tests cannot run here ("" when they can)."""
    if not SSHD.exists() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return (
            f"OpenSSH's server is not installed ({SSHD}, ssh, ssh-keygen):"
            " apt-get install openssh-server (make test installs it in CI)"
        )
    return ""


class Sshd:
    """``sshd -D`` on 127.0.0.1 serving the bare repositories under ``root`` over SSH,
    with its keys and config in ``state``. The client's side: :meth:`command` (an SSH
    command with the client key, as a user puts in ``core.sshCommand``), :meth:`url`
    (scp-like or ``ssh://``), and :meth:`host_entry` (a ``Host`` block for an ssh
    config file). Nothing reads or writes the real ``~/.ssh``: every client option
    names its file, and ``-F`` a config of its own (ssh reads the home directory of
    the passwd entry, not ``$HOME``)."""

    def __init__(self, root: Path, state: Path) -> None:
        self.root = root
        self.state = state
        self.port = free_port()
        self.user = getpass.getuser()
        self.key = state / "client_ed25519"
        self.known_hosts = state / "known_hosts"
        self.log = state / "sshd.log"
        self._proc: subprocess.Popen[bytes] | None = None
        (state / "home").mkdir(parents=True, exist_ok=True)
        host_key = state / "host_ed25519"
        for key in (host_key, self.key):
            if not key.exists():
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "jpfs-test", "-f", str(key)],
                    check=True, capture_output=True,
                )  # fmt: skip
        (state / "authorized_keys").write_bytes(self.key.with_suffix(".pub").read_bytes())
        host_public = host_key.with_suffix(".pub").read_text(encoding="utf-8").split()
        self.known_hosts.write_text(
            f"[127.0.0.1]:{self.port} {host_public[0]} {host_public[1]}\n", encoding="utf-8"
        )
        self.config = state / "sshd_config"
        self.config.write_text(
            "\n".join([
                f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
                "PidFile none", f"AuthorizedKeysFile {state / 'authorized_keys'}",
                "StrictModes no", "PubkeyAuthentication yes", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "UsePAM no",
                "PermitRootLogin prohibit-password", "AcceptEnv GIT_PROTOCOL",
                # Daemons open connections in bursts and share them (many sessions each).
                "MaxStartups 200", "MaxSessions 200", "LogLevel VERBOSE",
                # The session's shell runs with a home of its own: Debian's bash reads
                # ~/.bashrc for ssh commands, and a user's (pyenv init: ~0.3 s here)
                # would be timed in every fetch; a git host runs git-shell, no rc.
                f"SetEnv HOME={state / 'home'}", "",
            ]),
            encoding="utf-8",
        )  # fmt: skip

    def command(self, *, key: bool = True) -> str:
        """An SSH command that reaches this server (``key=False``: offers no key)."""
        options = [
            "-F", "/dev/null", "-p", str(self.port), "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
        ]  # fmt: skip
        options += ["-i", str(self.key)] if key else ["-o", "IdentityFile=/dev/null"]
        return f"ssh {shlex.join(options)}"

    def url(self, name: str, *, host: str = "", style: str = "scp") -> str:
        """``[user@]host:path`` (``style="ssh"``: ``ssh://host/path``) of ``root/name``;
        ``host`` defaults to ``user@127.0.0.1`` (reached with :meth:`command`, whose
        ``-p`` names the port), a ``Host`` alias when given."""
        where = host or f"{self.user}@127.0.0.1"
        path = self.root / name
        return f"ssh://{where}{path}" if style == "ssh" else f"{where}:{path}"

    def host_entry(self, alias: str) -> str:
        """A ``Host`` block of an ssh config naming this server ``alias``."""
        return (
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {self.port}\n  User {self.user}\n"
            f"  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking yes\n"
        )

    def start(self, probe: str | None = None) -> Sshd:
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation
        with self.log.open("ab") as log:
            self._proc = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # its per-connection children go with it (killpg)
            )
        if probe is not None:
            self.wait_up(probe)
        return self

    def wait_up(self, name: str) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT
        tick = threading.Event()
        last = ""
        env = {**os.environ, "GIT_SSH_COMMAND": self.command()}
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                break
            done = subprocess.run(
                ["git", "ls-remote", self.url(name)], capture_output=True, text=True,
                timeout=_READY_TIMEOUT, env=env,
            )  # fmt: skip
            if done.returncode == 0:
                return
            last = done.stderr.strip()
            tick.wait(0.05)
        said = self.log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"sshd on port {self.port} did not come up: {last}\n{said}")

    def stop(self) -> None:
        """Stop the server and end every connection it serves (a shared connection
        outlives the listener otherwise: each is a session of its own), checked."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        connections = _children(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        for pid in connections:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)  # its session: the connection's processes
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.poll() is not None, "sshd did not stop"
        deadline = time.monotonic() + 10
        tick = threading.Event()
        while any(Path(f"/proc/{pid}").exists() for pid in connections):
            assert time.monotonic() < deadline, f"sshd's connections {connections} did not end"
            tick.wait(0.02)

    pause = stop

    def resume(self, probe: str | None = None) -> None:
        self.start(probe)

    def __enter__(self) -> Sshd:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc; none elsewhere)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = entry.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so read after the last ")".
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.parent.name))
    return found
