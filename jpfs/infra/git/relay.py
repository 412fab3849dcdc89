"""A relay for ``git://`` connections, so that git daemon's answers are not held back.

``git daemon``'s ``upload-pack`` and ``receive-pack`` write an answer in several small
writes on a socket without ``TCP_NODELAY``: Nagle's algorithm holds each write after
the first until the client acknowledges the first, and the client (git, with nothing to
send meanwhile) delays that acknowledgement by up to 40 ms (Linux). Measured on
127.0.0.1 with git 2.39: a push 55 ms, a fetch of one new commit 95 ms, a look at the
refs 47 ms, nearly all of it that wait; through a relay that acknowledges every segment
at once (``TCP_QUICKACK``, which Linux clears after use, so it is set before every
read) and forwards without delay (``TCP_NODELAY``): 12, 12 and 4 ms.

git is sent through the relay by a URL rewrite given to each command
(``-c url.git://127.0.0.1:<port>/.insteadOf=git://<host>:<port>/``): the remote, its
configuration and the protocol are git's as ever, only the TCP path changes. Nothing is
relayed where that path is not ours to change (``core.gitProxy`` or
``GIT_PROXY_COMMAND`` set: the user's proxy must stay in the path; a URL the user's own
``insteadOf`` rewrites: git applies one rewrite, and ours would replace theirs) or where
the operating system cannot acknowledge at once (no ``TCP_QUICKACK``: a relay would
only add a hop).

Each connection is served by two threads, one per direction, so neither side's writes
ever wait on the other's reads. A remote that cannot be reached is answered in git's
own protocol (an ``ERR`` packet), so git reports ``remote error: cannot reach ...``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from jpfs.infra.git import runner

_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)
_CHUNK = 65536
# How long a connection to the remote may take to open (git itself waits on the
# operating system, minutes for a host that does not answer).
CONNECT_TIMEOUT = 60.0
_JOIN_TIMEOUT = 5.0


class Relay:
    """Forwards connections made to ``127.0.0.1:<port>`` to ``upstream``; thread-safe.

    :meth:`close` stops listening, ends the connections in flight and waits for their
    threads."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.upstream = (host, port)
        self.connect_timeout = connect_timeout
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self.served = 0  # connections accepted
        self._spawn(self._accept, f"jpfs-relay-{self.port}")

    @property
    def address(self) -> str:
        """The remote's ``host:port`` as a URL writes it (``[::1]:9418``)."""
        host, port = self.upstream
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live = list(self._sockets)
        # shutdown wakes a thread blocked in accept() or recv() on it; close alone may not.
        for sock in [self._listener, *live]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        while True:
            with self._lock:
                threads = [t for t in self._threads if t is not threading.current_thread()]
            if not threads:
                break
            for thread in threads:
                thread.join(_JOIN_TIMEOUT)
                with self._lock:
                    self._threads.discard(thread)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- threads ---------------------------------------------------------------------------
    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> bool:
        thread = threading.Thread(target=self._guard, args=(target, *args), name=name, daemon=True)
        with self._lock:
            if self._closed:
                return False
            self._threads.add(thread)
        thread.start()
        return True

    def _guard(self, target: Callable[..., None], *args: object) -> None:
        try:
            target(*args)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._track(client):
                client.close()
                return
            self.served += 1
            self._spawn(self._serve, f"jpfs-relay-{self.port}-conn", client)

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._sockets.add(sock)
            return True

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            self._sockets.difference_update(socks)
        for sock in socks:
            sock.close()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=self.connect_timeout)
        except OSError as exc:
            self._refuse(client, f"cannot reach {self.address}: {exc.strerror or exc}")
            return
        upstream.settimeout(None)
        if not self._track(upstream):
            self._forget(client, upstream)
            return
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Event()
        if not self._spawn(self._pump_back, f"jpfs-relay-{self.port}-back", upstream, client, back):
            self._forget(client, upstream)
            return
        try:
            _pump(client, upstream)
        finally:
            back.wait()
            self._forget(client, upstream)

    @staticmethod
    def _pump_back(src: socket.socket, dst: socket.socket, done: threading.Event) -> None:
        try:
            _pump(src, dst)
        finally:
            done.set()

    def _refuse(self, client: socket.socket, why: str) -> None:
        """Answer in git's protocol: git prints ``fatal: remote error: <why>``."""
        try:
            client.settimeout(1.0)
            with contextlib.suppress(OSError):
                client.recv(_CHUNK)  # its request: unread data would reset the connection
            client.sendall(pkt_line(f"ERR {why}\n".encode()))
            client.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            self._forget(client)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, acknowledging every segment at once."""
    try:
        while True:
            data = receive(src, _CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        # One side went away: end both directions (the other thread sees its end too).
        with contextlib.suppress(OSError):
            src.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def receive(sock: socket.socket, size: int) -> bytes:
    """One ``recv``, its segments acknowledged at once (where the system can)."""
    if _QUICKACK is not None:
        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)  # cleared after use: set each time
    return sock.recv(size)


def pkt_line(payload: bytes) -> bytes:
    """``payload`` as one of git's pkt-lines (four hex digits of length, then it)."""
    return b"%04x" % (len(payload) + 4) + payload


class Relays:
    """The relays of one remote's ``git://`` URLs, and the git settings that use them."""

    def __init__(self, urls: Iterable[str]) -> None:
        self._relays: list[Relay] = []
        settings: list[str] = []
        seen: set[str] = set()
        try:
            for url in urls:
                base = git_base(url)
                if base is None or base in seen:
                    continue
                seen.add(base)
                parts = urlsplit(base)
                relay = Relay(parts.hostname or "localhost", parts.port or 9418)
                self._relays.append(relay)
                settings.append(f"url.git://127.0.0.1:{relay.port}/.insteadOf={base}")
        except BaseException:
            self.close()
            raise
        self.settings = tuple(settings)

    @property
    def upstreams(self) -> list[str]:
        return [relay.address for relay in self._relays]

    def connections(self) -> int:
        """Connections relayed so far."""
        return sum(relay.served for relay in self._relays)

    def close(self) -> None:
        for relay in self._relays:
            relay.close()

    def __enter__(self) -> Relays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def git_base(url: str) -> str | None:
    """``git://host[:port]/`` of a ``git://`` URL (None: another transport)."""
    if not url.startswith("git://"):
        return None
    parts = urlsplit(url)
    if not parts.netloc or parts.hostname is None:
        return None
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return None
    return f"git://{parts.netloc}/"


def for_remote(repo: Path, remote: str, direct: list[tuple[str, str]] | None = None) -> Relays:
    """Relays for ``remote``'s ``git://`` fetch and push URLs; none where the TCP path is
    the user's to choose (see :func:`direct_urls`; ``direct``: its answer, when the
    caller has it) or where acknowledging at once is not possible (see the module's
    docstring)."""
    if _QUICKACK is None:
        return Relays(())
    return Relays(url for _, url in (direct_urls(repo, remote) if direct is None else direct))


def direct_urls(repo: Path, remote: str) -> list[tuple[str, str]]:
    """``remote``'s URLs that git connects to as written: ``("url" | "pushurl", url)``
    in git's order; none where the TCP path is the user's to choose: a proxy
    (``core.gitProxy``, ``GIT_PROXY_COMMAND``) must stay in it, and a URL the user's own
    ``insteadOf`` rewrites goes where they said (git applies one rewrite, and ours would
    replace theirs)."""
    if os.environ.get("GIT_PROXY_COMMAND"):
        return []
    listed = runner.run(
        repo, ["config", "-z", "--get-regexp", r"^(remote|url|core)\."], check=False
    )
    urls: list[tuple[str, str]] = []
    rewritten: list[str] = []
    for entry in listed.stdout.split("\0"):
        key, _, value = entry.partition("\n")
        section, _, rest = key.partition(".")
        name, _, variable = rest.rpartition(".")
        if key == "core.gitproxy":
            return []
        if section == "remote" and name == remote and variable in ("url", "pushurl"):
            urls.append((variable, value))
        elif section == "url" and variable in ("insteadof", "pushinsteadof"):
            rewritten.append(value)
    return [(v, url) for v, url in urls if not any(url.startswith(old) for old in rewritten)]
