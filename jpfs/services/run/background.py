"""Background runs: how a forked or mailed conversation gets started without a wait.

Who runs it: a thread of this process (tools and library; it shares the caller's
runner, so stopping that runner, e.g. a daemon stop, stops it too), or a detached
``python`` process (the CLI, which must return at once; its output goes to
``.jpfs/local/background.log``). A daemon running the same workspace may pick the
conversation up first: the per-conversation lock makes the loser give up quietly.
A daemon that wants such starts queued under its own ``max_agents`` gives its runners
an App with a starter (:attr:`jpfs.services.run.app.App.starter`).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from jpfs.core import locks
from jpfs.core.conversation import Conversation
from jpfs.errors import Cancelled, JpfsError, LockError

if TYPE_CHECKING:
    from jpfs.core.state import State
    from jpfs.core.workspace import Workspace
    from jpfs.services.run.runtime import Runner

log = logging.getLogger("jpfs.services.run.background")

# How long a background start waits for a conversation's lock: long enough to outlast
# another runner that is just releasing it (it delivers pending mail before it does).
START_LOCK_WAIT = 5.0


def start(
    ws: Workspace, conv_id: str, *, runner: Runner | None = None, detached: bool = False
) -> None:
    """Run ``conv_id`` in the background until its caller must act (by ``runner``'s
    App's starter, if it has one and takes it)."""
    starter = runner.app.starter if runner is not None else None
    if starter is not None and starter(ws, conv_id):
        return
    if detached:
        spawn(ws, conv_id)
        return
    from jpfs.services.run.runtime import Runner

    thread = threading.Thread(
        target=run_background,
        args=(runner or Runner(ws), conv_id),
        name=f"jpfs-run:{conv_id}",
    )
    thread.start()


def run_background(
    runner: Runner, conv_id: str, lock_wait: float = START_LOCK_WAIT
) -> State | None:
    """One background run; a conversation someone else runs is left to them."""
    ws = runner.ws
    try:
        with locks.conversation_lock(ws.local_dir, conv_id, wait=lock_wait, cancel=runner.cancel):
            return runner.run_locked(Conversation(ws.conv_root, conv_id))
    except LockError:
        log.info("%s is run by another process; leaving it to that one", conv_id)
    except Cancelled:
        log.info("background run of %s cancelled", conv_id)
    except JpfsError as exc:
        log.warning("background run of %s stopped: %s", conv_id, exc)
    except Exception:
        log.exception("background run of %s crashed", conv_id)
    return None


def spawn(ws: Workspace, conv_id: str) -> None:
    """Run ``conv_id`` in a detached process that outlives the caller (the CLI)."""
    logfile = ws.ensure_local() / "background.log"
    # The child is an entry point of its own: the library API builds its App.
    code = "import sys; from jpfs import api; sys.exit(api.run_detached(sys.argv[1:]))"
    with logfile.open("ab") as out:
        subprocess.Popen(
            [sys.executable, "-c", code, str(ws.root), conv_id],
            cwd=ws.root,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
