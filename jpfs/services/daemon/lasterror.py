"""The daemon's last error, as ``jpfs daemon status`` shows it.

One error at a time, the newest. One that names a conversation is that conversation's
to clear: it goes once the conversation runs to its end, is removed, or, for a
failure, is no longer failed (mended and retried by whoever ran it, this daemon or a
CLI; a failure kept on this machine, :mod:`jpfs.core.failures`, counts as failed), so
status never keeps showing a problem the user has fixed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from jpfs.core import failures, tree
from jpfs.core.conversation import Conversation
from jpfs.core.state import State
from jpfs.errors import JpfsError
from jpfs.services.daemon import process


class LastError:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # runs in the pool's threads record errors
        self._error: dict[str, Any] | None = None
        self._failed = False  # it is a conversation's failure (cleared once not failed)

    def record(
        self, message: str, conversation: str | None = None, *, failed: bool = False
    ) -> None:
        error: dict[str, Any] = {"time": process.iso(time.time()), "message": message}
        if conversation is not None:
            error["conversation"] = conversation
        with self._lock:
            self._error, self._failed = error, failed

    def clear_ending(self, suffix: str) -> None:
        """What the last error ending in ``suffix`` said is mended: it is over."""
        with self._lock:
            if self._error is not None and str(self._error["message"]).endswith(suffix):
                self._error = None

    def clear_of(self, conv_id: str) -> None:
        """``conv_id`` ran to its end, or is gone: its error, if the last, is over."""
        with self._lock:
            if self._error is not None and self._error.get("conversation") == conv_id:
                self._error = None

    def shown(self, conv_root: Path, local_dir: Path) -> dict[str, Any] | None:
        """The last error, unless it is over (see the module docstring)."""
        with self._lock:
            error, failed = self._error, self._failed
        conv_id = error.get("conversation") if error is not None else None
        if conv_id is None:
            return error
        conv = Conversation(conv_root, conv_id)
        try:
            # Failed by its files, or kept failed here because they refused the error.
            over = not conv.exists() or (
                failed
                and tree.state_of(conv) is not State.FAILED
                and failures.of(local_dir, conv) is None
            )
        except (OSError, JpfsError):
            over = False
        if over:
            with self._lock:
                if self._error is error:
                    self._error = None
            return None
        return error
