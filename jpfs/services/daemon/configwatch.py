"""A running daemon takes up edits of ``.jpfs/config.toml``.

The file is checked by stat on each pass of the daemon's loop (about once a second)
and read once it has held still for ``daemon.settle`` seconds: an editor writing in
place truncates first, and an empty file read then is a valid config of defaults
that would silently replace the user's. A broken file is reported and the previous
configuration kept, so one typo never stops the daemon; a file missing on the branch
now checked out is not a new policy either (the last good copy stands in,
:func:`jpfs.core.workspace.policy_config`). Keys the daemon cannot change under itself
wait for the next start. Once a good file is taken up, a config error status showed is
over (``on_mended``).

Profiles and trust are read per run, but what ``daemon status`` says of them must not
wait for a run: :class:`NotesWatch` checks a profile's note again as soon as that
profile or the trust file changes (a mended profile's note goes within a second).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from jpfs.core import config as config_mod
from jpfs.core.workspace import JPFS_DIR, Workspace, policy_config
from jpfs.errors import ConfigError, JpfsError
from jpfs.services.conversations import runs
from jpfs.services.conversations.runs import Stamp
from jpfs.services.workspace import policy, trust

log = logging.getLogger("jpfs.services.daemon")

# Keys a running daemon does not change under itself: they apply at its next start.
RESTART_KEYS = (
    "conversations.root",
    "record.branch",
    "daemon.log_max_bytes",
    "daemon.log_backups",
    "sync.remote",
    "sync.interval",
    "sync.lease",
    "sync.machine",
)
SHOWN = f"{JPFS_DIR}/{config_mod.CONFIG_FILE}"
KEPT = "(the previous configuration stays in force)"  # a broken file's error ends so
AGENTS = f"{JPFS_DIR}/agents/"  # the notes of profiles (jpfs.services.workspace.policy)


class ConfigWatch:
    def __init__(
        self,
        ws: Workspace,
        cfg: Sequence[str],
        on_error: Callable[[str], None],
        on_mended: Callable[[], None] = lambda: None,
    ) -> None:
        self.ws = ws
        self.cfg = tuple(cfg)  # the --cfg layers the daemon was started with, kept
        self.on_error = on_error
        self.on_mended = on_mended
        self._stamp = runs.file_stamp(self.file)
        # (stamp, since when) of a change not yet taken up
        self._seen: tuple[tuple[int, int, int] | None, float] | None = None

    @property
    def file(self) -> Path:
        return self.ws.jpfs_dir / config_mod.CONFIG_FILE

    def poll(self) -> list[str] | None:
        """Take up a settled edit into ``ws.config``; the keys changed now, or None
        when nothing was taken up."""
        stamp = runs.file_stamp(self.file)
        if stamp == self._stamp:
            self._seen = None
            return None
        now = time.monotonic()
        if self._seen is None or self._seen[0] != stamp:
            self._seen = (stamp, now)
            return None
        if now - self._seen[1] < self.ws.config.daemon.settle:
            return None
        self._stamp, self._seen = stamp, None
        notes: dict[str, str] = {}
        try:
            where, values = policy_config(self.ws.root, notes)
            fresh = config_mod.load(where, self.cfg, file_values=values)
        except ConfigError as exc:
            log.error("config not reloaded, the previous one stays in force: %s", exc)
            self.on_error(f"config: {exc} {KEPT}")
            return None
        if SHOWN in notes:
            self.ws.notes[SHOWN] = notes[SHOWN]
            log.warning("%s: %s; the previous configuration stays in force", SHOWN, notes[SHOWN])
            return None
        self.ws.notes.pop(SHOWN, None)
        self.on_mended()
        current = self.ws.config
        changed = sorted(k for k, v in fresh.values.items() if current.values.get(k) != v)
        later = [k for k in changed if k in RESTART_KEYS]
        now_keys = [k for k in changed if k not in later]
        for key in now_keys:
            current.values[key] = fresh.values[key]
            current.sources[key] = fresh.sources[key]
        if now_keys:
            log.info("config reloaded: %s", ", ".join(now_keys))
        if later:
            log.warning("%s change(s) at the next daemon start", ", ".join(later))
            self.on_error(f"config: {', '.join(later)} change(s) at the next daemon start")
        return now_keys


class NotesWatch:
    """Checks each profile note of ``ws.notes`` again when its file or the trust file
    changes (a stat per note on each pass of the daemon's loop; most passes, none)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self._stamps: dict[str, tuple[Stamp | None, Stamp | None]] = {}

    def poll(self) -> None:
        trusted = runs.file_stamp(self.ws.local_dir / trust.TRUST_FILE)
        noted = [k for k in list(self.ws.notes) if k.startswith(AGENTS)]
        for key in noted:
            stamp = (runs.file_stamp(self.ws.root / key), trusted)
            if self._stamps.get(key) == stamp:
                continue
            self._stamps[key] = stamp
            try:
                # As a run would take it: a good profile ends its note (and is kept).
                policy.load_profile(self.ws, key.removeprefix(AGENTS).removesuffix(".toml"))
            except (OSError, JpfsError):
                continue  # not good yet: its note says why, as load_profile left it
            if key not in self.ws.notes:
                log.info("%s: good again; its note is over", key)
        for key in set(self._stamps) - set(noted):
            del self._stamps[key]
