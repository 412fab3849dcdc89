"""Policy that does not flicker: which profile a run uses, whatever the user checks out.

Profiles (``.jpfs/agents/*.toml``) are committed on the user's branch, so a checkout,
a bisect, a stash or a half-done rebase can take one away, break it, or bring a version
this machine has not trusted. None of that may fail, cancel or re-run a conversation.
So a run takes a profile from the branch while that copy is *good* (it loads, and if
it runs programs, its exact content is trusted), keeping it in
``.jpfs/local/policy/agents/`` as the last good copy; while the branch's copy is
missing, invalid or untrusted, the kept copy stands in and ``jpfs daemon status``
says so. A valid change is taken up by the next run that reads it.

A conversation is *admitted* once per snapshot: its ``[config]`` is checked against
the profile in force when it first runs here (:func:`jpfs.core.profiles.admit`, so the
record never grants capabilities), and the snapshot's digest is remembered in
``.jpfs/local/admitted/`` (a directory per conversation, forgotten when a daemon starts
after the conversation is gone: :func:`keep_admitted`). A later run with the same
snapshot is not checked again, so a branch with other (narrower) profiles does not
fail work already under way: a conversation keeps the configuration it was created
with. A snapshot that changes (a peer rewrote ``conversation.toml``) is checked again.

The branch's ``config.toml`` has the same fallback (:func:`jpfs.core.workspace.policy_config`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jpfs.core import profiles
from jpfs.core.conversation import Conversation
from jpfs.core.profiles import Profile
from jpfs.core.workspace import Workspace, keep
from jpfs.errors import ProfileError, UntrustedProfile
from jpfs.services.workspace import trust

ADMITTED_DIR = "admitted"


def kept_agents(ws: Workspace) -> Path:
    return ws.kept_dir / "agents"


def load_profile(ws: Workspace, name: str, *, trusted: bool = True) -> Profile:
    """The profile ``name`` as a run uses it: the branch's if good, else the kept copy.

    Raises the branch's own error (:class:`ProfileError`, :class:`UntrustedProfile`)
    when there is no kept copy to stand in. With ``trusted=False`` (making a snapshot,
    which runs only once admitted), an untrusted profile without a stand-in is returned.
    """
    live = profiles.profile_path(ws.agents_dir, name)  # refuses a bad name first
    kept = profiles.profile_path(kept_agents(ws), name)
    note_key = f".jpfs/agents/{live.name}"
    try:
        # Read once: the bytes parsed and trusted are the bytes kept.
        content = live.read_bytes()
        profile = profiles.load(ws.agents_dir, name, content)
        trust.require(ws.agents_dir, ws.local_dir, profile, content)
    except (OSError, ProfileError) as exc:
        stand_in = _kept(ws, kept)
        if stand_in is not None:
            ws.notes[note_key] = _why(exc, live)
            return stand_in
        if isinstance(exc, UntrustedProfile) and not trusted:
            return profile
        if isinstance(exc, ProfileError):
            raise
        raise ProfileError(f"no agent profile {name!r} (expected {note_key})") from exc
    keep(content, kept)
    ws.notes.pop(note_key, None)
    return profile


def _kept(ws: Workspace, kept: Path) -> Profile | None:
    """The kept copy at ``kept``, if there is one that loads and is trusted."""
    if not kept.is_file():
        return None
    try:
        profile = profiles.load(kept.parent, kept.stem)
        trust.require(kept.parent, ws.local_dir, profile)
    except ProfileError:
        return None
    return profile


def keep_all(ws: Workspace) -> None:
    """Keep a copy of every good profile on the branch now (the daemon's start, `jpfs
    init`, `jpfs trust`), so that a checkout right after finds one to stand in."""
    for name in profiles.available(ws.agents_dir):
        try:
            load_profile(ws, name)
        except (OSError, ProfileError):
            continue


def _why(exc: Exception, live: Path) -> str:
    if isinstance(exc, FileNotFoundError) or not live.exists():
        return "missing on this branch"
    return str(exc)


def admit(ws: Workspace, conv_id: str, agent: str, snapshot: Mapping[str, Any]) -> None:
    """Refuse a conversation whose ``[config]`` grants more than its profile does, or
    whose profile runs programs untrusted; once admitted, a snapshot is not re-checked."""
    mark = _mark(ws, conv_id, snapshot)
    legacy = mark.parent.parent / mark.name  # a mark named by its digest alone (0.x)
    if mark.exists():
        return
    if not legacy.exists():
        profile = load_profile(ws, agent)
        profiles.admit(snapshot, profile)
    _touch(mark)
    # One mark per conversation: a snapshot it had before is checked again if it comes
    # back; and a conversation removed leaves one directory for keep_admitted.
    with contextlib.suppress(OSError):
        for older in os.scandir(mark.parent):
            if older.name != mark.name:
                os.unlink(older.path)
        legacy.unlink(missing_ok=True)


def keep_admitted(ws: Workspace, live: Iterable[str], before: float) -> int:
    """Forget the admission of conversations that no longer exist (``live``: those
    that do), unchanged since before ``before`` (a ``time.time()``: a mark made since
    may be a conversation's created after ``live`` was listed). Returns how many."""
    owners = {_owner(conv_id) for conv_id in live}
    try:
        entries = list(os.scandir(ws.local_dir / ADMITTED_DIR))
    except OSError:
        return 0  # none yet, or unreadable: a mark too many costs a check, never safety
    forgotten = 0
    for entry in entries:
        if entry.name in owners:
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False) and entry.stat().st_mtime < before:
                shutil.rmtree(entry.path)
                forgotten += 1
    return forgotten


def adopted(ws: Workspace, conv: Conversation, agent: str) -> None:
    """Admit ``conv``, just created here from the profile in force, if it may run now
    (an untrusted profile's waits for trust). The snapshot is read back, so that the
    digest is the one a run computes."""
    try:
        admit(ws, conv.id, agent, conv.config)
    except ProfileError:
        pass  # the run says why


def _mark(ws: Workspace, conv_id: str, snapshot: Mapping[str, Any]) -> Path:
    """``<conversation>/<snapshot>``, both digests: the directory says whose it is."""
    text = json.dumps([conv_id, snapshot], sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:40]
    return ws.local_dir / ADMITTED_DIR / _owner(conv_id) / digest


def _owner(conv_id: str) -> str:
    return hashlib.sha256(conv_id.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _touch(mark: Path) -> None:
    try:
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
    except OSError:
        pass  # checked again next time: slower, never less safe
