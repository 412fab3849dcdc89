"""Single keys from a terminal, for the live view: ``q`` quits ``jpfs top``.

While a :func:`keys` block runs, a terminal on stdin is in cbreak mode (keys arrive
one by one, unechoed; Ctrl-C still interrupts) and is restored after, whatever
happens. Without a terminal there are no keys: the waits are plain timeouts.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import threading
import tty
from collections.abc import Callable, Iterator

# Waits up to the given seconds for a key; returns it, or None after the timeout.
KeyWait = Callable[[float], "str | None"]


@contextlib.contextmanager
def keys() -> Iterator[KeyWait]:
    fd = sys.stdin.fileno() if _is_tty(sys.stdin) else None
    if fd is None:
        pause = threading.Event()

        def no_key(timeout: float) -> str | None:
            pause.wait(timeout)
            return None

        yield no_key
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield lambda timeout: _read_key(fd, timeout)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _read_key(fd: int, timeout: float) -> str | None:
    ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
    if not ready:
        return None
    data = os.read(fd, 32)
    return data.decode("utf-8", "replace")[:1] if data else None


def _is_tty(stream: object) -> bool:
    try:
        return bool(stream.isatty()) and stream.fileno() >= 0  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False
