"""Start-up chores that make a restart after SIGKILL safe.

* :func:`sweep_debris`: temporary files and directories of writers killed mid-way.

git's lock files are never removed here: one that looks abandoned may belong to a
``git commit`` whose editor is open. The committer's own lock files appear already
registered as its own and are broken only when their creator is provably dead (see
:mod:`jpfs.infra.committer.lockfile`). Editors' swap files are ignored by the record's own
``.gitignore`` (written with the record's first commit, :mod:`jpfs.core.recordbranch`).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from jpfs.core.workspace import Workspace
from jpfs.services.daemon import process

log = logging.getLogger("jpfs.services.daemon")

_TMP_RE = re.compile(r"^\..*\.(\d+)\.jpfs-tmp$")
_GENERATED_RE = re.compile(r"^[a-z]{1,8}-[0-9a-hjkmnp-tv-z]{26}$")


def sweep_debris(ws: Workspace) -> int:
    """Delete what writers killed mid-way left under the root; returns how many.

    ``.NAME.THREAD.PID.jpfs-tmp`` files whose writer is dead, and empty directories with a
    generated id (``c-01jh...``): a conversation killed between its ``mkdir`` and its
    ``conversation.toml``. A human never names a directory like that.
    """
    count = 0
    for top, _dirs, names in os.walk(ws.conv_root, topdown=False):
        for name in names:
            m = _TMP_RE.match(name)
            if m and not process.running(int(m.group(1))):
                try:
                    os.unlink(os.path.join(top, name))
                    count += 1
                except FileNotFoundError:
                    pass
        path = Path(top)
        # No age check: a creator still between mkdir and its first write recreates the
        # directory (writes make their parent directories), so removing it is harmless.
        if path != ws.conv_root and _GENERATED_RE.match(path.name) and not os.listdir(path):
            try:
                path.rmdir()
                count += 1
            except OSError:
                pass
    return count
