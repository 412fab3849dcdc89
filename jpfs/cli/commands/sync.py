"""``jpfs sync``."""

from __future__ import annotations

from jpfs.cli.context import note, out, out_json, state
from jpfs.cli.options import Format


def sync(fmt: Format = "text") -> None:
    """Commit edits made here, take the remote's record, push ours (sync.remote)."""
    from jpfs.services.sync.manual import sync_by_hand

    done = sync_by_hand(state.ws())
    if fmt == "json":
        out_json(done.to_json())
        return
    if done.committed:
        note(f"committed your edits: {done.committed[:12]}")
    for path in done.conflicts:
        note(f"conflict: both sides changed {path.rsplit('.conflict-', 1)[0]}; theirs is {path}")
    note(f"record {done.integrated} with {done.remote}; pushed as {done.machine}")
    out(done.head or "")
