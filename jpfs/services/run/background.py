"""Background runs: how a forked or mailed conversation gets started without a wait.

Who runs it: a thread of this process (tools and library; it shares the caller's
runner, so stopping that runner, e.g. a daemon stop, stops it too), or a detached
``python`` process (the CLI, which must return at once; its output goes to
``.jpfs/local/background.log``). A daemon running the same workspace may pick the
conversation up first: the per-conversation lock makes the loser give up quietly.
A daemon that wants such starts queued under its own ``max_agents`` registers a
starter with :func:`set_starter`.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
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

Starter = Callable[["Workspace", str], bool]
_starters: dict[str, Starter] = {}


def set_starter(root: Path, starter: Starter | None) -> None:
    """Route background starts of workspace ``root`` to ``starter`` (e.g. a daemon queue).

    ``starter(ws, conv_id)`` returns True when it took the conversation.
    """
    if starter is None:
        _starters.pop(str(root), None)
    else:
        _starters[str(root)] = starter


def start(
    ws: Workspace, conv_id: str, *, runner: Runner | None = None, detached: bool = False
) -> None:
    """Run ``conv_id`` in the background until its caller must act."""
    starter = _starters.get(str(ws.root))
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
    # An entry point like the CLI: it installs the tools before it runs anything.
    code = (
        "import sys; import jpfs.tools.registry; from jpfs.services.run import background;"
        " sys.exit(background.main(sys.argv[1:]))"
    )
    with logfile.open("ab") as out:
        subprocess.Popen(
            [sys.executable, "-c", code, str(ws.root), conv_id],
            cwd=ws.root,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def main(argv: Sequence[str]) -> int:
    """Entry point of a detached run: ``ROOT CONV_ID``."""
    from jpfs.core.workspace import open_workspace
    from jpfs.services.run.runtime import Runner

    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [{argv[1]}] %(message)s")
    ws = open_workspace(Path(argv[0]), search=False)
    state = run_background(Runner(ws, progress=log.info), argv[1])
    return 0 if state is not None else 1
