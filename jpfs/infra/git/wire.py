"""A remote's refs listed over ``git://`` in the process: git's ``ls-refs``.

A sharing daemon looks at the remote before each cycle's fetch and, when idle,
between cycles (:mod:`jpfs.services.sync.looks`). ``git fetch`` with nothing to fetch
costs 7.2 ms and 4.8 ms of CPU here (a program and its connectivity check); a look
2.7 ms and 0.3 ms of CPU (``bench/bench_sync.py``, first tables).

This speaks a format git owns, so only the part needed: protocol version 2's
``ls-refs`` with ``ref-prefix`` arguments, and version 0's advertisement from a server
that does not speak version 2 (filtered here by the same prefixes). The plain
reference is ``git ls-remote``: ``tests/infra/git/test_wire.py`` checks that both list the
same refs from a real ``git daemon``, for generated ref sets. Only where git itself
would connect to the URL's host directly is it used (:func:`jpfs.infra.git.relay.direct_urls`).
"""

from __future__ import annotations

import contextlib
import re
import socket
from urllib.parse import urlsplit

from jpfs.errors import GitError
from jpfs.infra.git import relay

_OID = re.compile(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_MAX_PKT = 65520  # git's LARGE_PACKET_MAX


class Target:
    """Where a ``git://`` URL's ``upload-pack`` is: host, port and the path git sends."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "git" or not parts.hostname or not parts.path:
            raise ValueError(f"not a git:// URL with a path: {url}")
        if "%" in parts.path or "\0" in url:
            # git sends a git:// path as written; one we would have to decode is not ours.
            raise ValueError(f"a git:// path with escapes: {url}")
        self.host, self.port = parts.hostname, parts.port or 9418
        self.netloc, self.path = parts.netloc, parts.path

    def __repr__(self) -> str:
        return f"git://{self.netloc}{self.path}"


def url_for(direct: list[tuple[str, str]], fetched_from: str) -> str | None:
    """``fetched_from`` (the URL git fetches the remote from: ``git remote get-url``,
    rewrites applied) when it is a ``git://`` URL git connects to as written
    (``direct``: :func:`jpfs.infra.git.relay.direct_urls`' answer, no proxy, no rewrite
    of the user's); None otherwise."""
    if fetched_from not in [url for kind, url in direct if kind == "url"]:
        return None
    try:
        Target(fetched_from)
    except ValueError:
        return None
    return fetched_from


class _Reader:
    """pkt-lines from a socket; ``None`` for a flush (or delimiter) packet."""

    def __init__(self, sock: socket.socket, where: Target) -> None:
        self.sock, self.where, self.buffer = sock, where, b""

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            # Acknowledged at once: git daemon writes an answer in pieces, and TCP holds
            # each after the first until the first is acknowledged.
            data = relay.receive(self.sock, _MAX_PKT)
            if not data:
                raise GitError(f"{self.where} hung up in the middle of its answer")
            self.buffer += data
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out

    def read(self) -> bytes | None:
        head = self._take(4)
        try:
            size = int(head, 16)
        except ValueError:
            raise GitError(f"{self.where} answered outside git's protocol") from None
        if size < 4:
            return None
        payload = self._take(size - 4)
        if payload.startswith(b"ERR "):
            text = payload[4:].decode("utf-8", "replace").strip()
            raise GitError(f"remote error from {self.where}: {text}")
        return payload


def list_refs(url: str, prefixes: list[str], *, timeout: float = 10.0) -> dict[str, str]:
    """The refs of the ``git://`` remote at ``url`` whose names start with one of
    ``prefixes``: name -> object id, as ``git ls-remote`` lists them. GitError: it could
    not be reached, refused, or answered outside the protocol."""
    where = Target(url)
    try:
        with socket.create_connection((where.host, where.port), timeout=timeout) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return _converse(sock, where, [p.encode() for p in prefixes])
    except OSError as exc:
        raise GitError(f"cannot reach {where}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise GitError(f"{where} answered outside git's protocol ({exc})") from exc


def _converse(sock: socket.socket, where: Target, prefixes: list[bytes]) -> dict[str, str]:
    request = f"git-upload-pack {where.path}\0host={where.netloc}\0\0version=2\0"
    sock.sendall(relay.pkt_line(request.encode()))
    reader = _Reader(sock, where)
    first = reader.read()
    if first is None:
        return {}  # version 0 with no refs at all: an empty repository
    if first.rstrip(b"\n") == b"version 1":  # version 0 follows, in version 1's envelope
        first = reader.read()
        if first is None:
            return {}
    if first.rstrip(b"\n") != b"version 2":
        advertised = _advertised(first, reader, prefixes)
        with contextlib.suppress(OSError):
            sock.sendall(b"0000")  # no wants: done
        return advertised
    capabilities = []
    while (line := reader.read()) is not None:
        capabilities.append(line.rstrip(b"\n"))
    if not any(c == b"ls-refs" or c.startswith(b"ls-refs=") for c in capabilities):
        raise GitError(f"{where} does not list refs (no ls-refs)")
    command = [relay.pkt_line(b"command=ls-refs\n")]
    command += [relay.pkt_line(c + b"\n") for c in capabilities if c.startswith(b"object-format=")]
    command += [b"0001", *(relay.pkt_line(b"ref-prefix " + p + b"\n") for p in prefixes), b"0000"]
    sock.sendall(b"".join(command))
    refs: dict[str, str] = {}
    while (line := reader.read()) is not None:
        fields = line.rstrip(b"\n").split(b" ")[:2]  # attributes follow only if asked
        _check(fields, where)
        refs[fields[1].decode()] = fields[0].decode()
    with contextlib.suppress(OSError):
        sock.sendall(b"0000")  # end of the session
    return refs


def _advertised(first: bytes, reader: _Reader, prefixes: list[bytes]) -> dict[str, str]:
    """A version 0 advertisement (``<oid> <name>\\0<capabilities>`` first, then
    ``<oid> <name>``, peeled tags as ``<name>^{}``), filtered by ``prefixes``."""
    refs: dict[str, str] = {}
    line: bytes | None = first.split(b"\0", 1)[0]
    while line is not None:
        fields = line.rstrip(b"\n").split(b" ")
        _check(fields, reader.where)
        if not fields[1].endswith(b"^{}") and any(fields[1].startswith(p) for p in prefixes):
            refs[fields[1].decode()] = fields[0].decode()
        line = reader.read()
    return refs


def _check(fields: list[bytes], where: Target) -> None:
    if len(fields) != 2 or not _OID.fullmatch(fields[0]):
        raise GitError(f"{where} listed a ref outside git's protocol: {b' '.join(fields)[:80]!r}")
