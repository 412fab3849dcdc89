"""``jpfs tree`` / ``jpfs top``: the conversation tree with what each one is doing.

Everything comes from the files and the run locks, so the view is right whoever runs
the agents (the daemon, ``jpfs query``, a library call):

    state     waiting (for its caller's answers), running (its run lock is held),
              pending (the agent must act but nobody runs it yet), idle, failed,
              killed, empty, broken (unreadable files)
    elapsed   running: since the run took the lock (the lock file's mtime);
              otherwise since the last change
    tokens    every token its model calls processed (the four usage counts summed)
    cost      what they cost in USD (None when a model has no price); ``subtree_*``:
              the same summed over the conversation and all its descendants
    last      the question that waits, or the first line of the agent's last reply or error
              (or of a failure kept on this machine: jpfs.core.failures)

Usage is read through the workspace's :class:`jpfs.core.usage.Book`, which reads only
new event files on each refresh, so ``top`` stays cheap on long transcripts.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

from jpfs.core import failures, frontmatter, ids, locks, tree
from jpfs.core.conversation import Conversation
from jpfs.core.state import AGENT_ACTS, State, derive
from jpfs.core.summaries import Summaries
from jpfs.core.transcript import waiting_mail
from jpfs.core.usage import Spend
from jpfs.core.workspace import Workspace
from jpfs.errors import FormatError
from jpfs.services.conversations import onboarding
from jpfs.services.daemon import process

LAST_WIDTH = 60


@dataclass(frozen=True)
class Row:
    id: str
    depth: int
    state: str
    agent: str
    model: str
    elapsed: float
    tokens: int
    cost_usd: float | None
    subtree_tokens: int
    subtree_cost_usd: float | None
    last: str
    title: str
    hidden: bool
    mail_waiting: int  # its caller's messages not delivered yet (the MAIL column)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _last_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line and line != "+++":
            return _fit(line)
    return ""


# A line that says nothing of its own (its heading marks taken off first): a wrapper
# tag (<response ...>), a code fence, front matter's fence, a rule.
_EMPTY_LINE = re.compile(r"^(</?[a-z_]+(\s[^>]*)?>|```\w*|\+\+\+|[-*=_]{3,})$")


def _first_line(text: str) -> str:
    """The first line that says something: what a reply, an answer or a list of
    questions leads with (a listing shows it, as a mail client shows a subject)."""
    for line in text.strip().splitlines():
        line = line.strip().lstrip("#").strip()
        if line and not _EMPTY_LINE.match(line):
            return _fit(line)
    return ""


def _fit(line: str) -> str:
    return line if len(line) <= LAST_WIDTH else line[: LAST_WIDTH - 1] + "…"


# The tree's own cache of what the files say (jpfs.core.summaries), beside ls's.
FILE = "tree-summaries.bin"
# Bumped when what facts() derives changes: older cached facts are derived again.
FACTS_VERSION = 3
_AGENT_ACTS = frozenset(str(s) for s in AGENT_ACTS)


class TreeView:
    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self._notes: dict[str, str] = {}  # id -> what its daemon run is doing now
        self.left_out: list[str] = []  # what the last rows() could not list (tree.left_out_note)
        # Each directory the last rows() walked -> its children (for the short ids).
        self.levels: dict[str, list[str]] = {}
        # The run locks held, one look per rows() (not one per row).
        self._locks: locks.LockTable | None = None

    def load_notes(self) -> None:
        """What the daemon's runs are doing this moment (``daemon.json``): a model turn,
        a tool, a wait before a retry. A running row shows it instead of its last line."""
        data = process.read_status(process.Files.of(self.ws))
        notes: dict[str, str] = {}
        for agent in data.get("agents") or []:
            if isinstance(agent, dict) and agent.get("note"):
                conv_id, note = str(agent.get("id", "")), str(agent["note"])
                notes[conv_id] = note.removeprefix(f"[{conv_id}] ")
        self._notes = notes

    def facts(self, conv_id: str) -> dict[str, Any]:
        """What the files say of a conversation: all of a row but what moves by itself
        (running or not, the time since); cached by the files' signature in rows()."""
        conv = Conversation(self.ws.conv_root, conv_id)
        names = conv.event_names()
        try:
            meta = conv.meta()
            state = str(derive(tree.snapshot(conv, meta)))
            last = self.last(conv, State(state), names)
        except FormatError as exc:
            meta, state = {}, "broken"
            last = _last_line(str(exc).replace(f"{conv.path}{os.sep}", ""))
        config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
        changed = [conv.toml_path, *(conv.events_dir / n for _, _, n in names[-1:])]
        return {
            "v": FACTS_VERSION,
            "state": state,
            "agent": str(meta.get("agent", "")),
            "model": str(config.get("model", "")) if config else "",
            **_spent(self.ws.spending.of(conv_id)),
            "last": last,
            "title": str(meta.get("title", "")),
            "hidden": bool(meta.get("hidden", False)),
            # Its caller's mail not delivered yet, which its next model call (or run)
            # delivers; a child's message to it is the agent's to read, not input.
            "mail": len(waiting_mail(conv)),
            "updated": max((_mtime(p) for p in changed), default=time.time()),
        }

    def row(
        self, conv_id: str, base_depth: int, facts: dict[str, Any], subtree: tuple[int, float]
    ) -> Row:
        now = time.time()
        last = str(facts["last"])
        if locks.is_locked(self.ws.local_dir, conv_id, self._locks):
            shown = "running"
            elapsed = now - _mtime(locks.lock_path(self.ws.local_dir, conv_id))
            last = _last_line(self._notes.get(conv_id, "")) or last
        else:
            shown = "pending" if facts["state"] in _AGENT_ACTS else str(facts["state"])
            elapsed = now - float(facts["updated"])
        return Row(
            id=conv_id,
            depth=ids.depth(conv_id) - base_depth - 1,
            state=shown,
            agent=str(facts["agent"]),
            model=str(facts["model"]),
            elapsed=round(max(elapsed, 0.0), 1),
            tokens=int(facts["tokens"]),
            cost_usd=facts["cost"],
            subtree_tokens=subtree[0],
            subtree_cost_usd=None if math.isnan(subtree[1]) else round(subtree[1], 6),
            last=last,
            title=str(facts["title"]),
            hidden=bool(facts["hidden"]),
            mail_waiting=int(facts["mail"]),
        )

    def last(self, conv: Conversation, state: State, names: list[tuple[int, str, str]]) -> str:
        """The question that waits, else the first line of the last reply or error."""
        if state is State.WAITING:
            return _first_line(onboarding.questions_of_round(conv))
        for _seq, role, name in reversed(names[-5:]):
            if role in ("assistant", "error"):
                try:
                    _, body = frontmatter.read(conv.events_dir / name, conv.root)
                except (FormatError, OSError):
                    return ""
                line = _first_line(body)
                if line:
                    return line
        return ""

    def rows(self, under: str | None = None, *, include_hidden: bool = False) -> list[Row]:
        base = ids.depth(under) if under else 0
        self.load_notes()
        self._locks = locks.lock_table()
        cache = Summaries(self.ws.local_dir, FILE)
        found: list[tuple[str, dict[str, Any]]] = []
        for conv_id, sig, facts in cache.walk(self.ws.conv_root, under):
            if not isinstance(facts, dict) or facts.get("v") != FACTS_VERSION:
                facts = self.facts(conv_id)
                cache.put(conv_id, sig, facts)
            found.append((conv_id, facts))
        cache.save()
        self.left_out = list(cache.left_out)
        self.levels = cache.levels  # for the ids' short forms (jpfs.core.shortids)
        # Subtree sums take every descendant, hidden ones too: what they spent was spent.
        # NaN marks a sum with an unpriced call in it (the cost is then unknown).
        sums: dict[str, tuple[int, float]] = {}
        for conv_id, facts in reversed(found):
            cost = facts["cost"]
            tokens, dollars = sums.get(conv_id, (0, 0.0))
            mine = (tokens + int(facts["tokens"]), dollars + (math.nan if cost is None else cost))
            sums[conv_id] = mine
            parent = ids.parent(conv_id)
            if parent is not None and (under is None or ids.is_descendant(parent, under)):
                t, d = sums.get(parent, (0, 0.0))
                sums[parent] = (t + mine[0], d + mine[1])
        out = []
        hidden: list[str] = []
        # Failed, though their files could not say so: not cached, as the files are the
        # same (jpfs.core.failures).
        kept = failures.every(self.ws.local_dir, self.ws.conv_root)
        for conv_id, facts in found:
            if hidden and any(ids.is_descendant(conv_id, h) for h in hidden):
                continue
            if conv_id in kept:
                here = f"{self.ws.conv_root.joinpath(*conv_id.split('/'))}{os.sep}"
                last = _fit(kept[conv_id].shown.replace(here, ""))
                facts = {**facts, "state": "failed", "last": last}
            row = self.row(conv_id, base, facts, sums[conv_id])
            if row.hidden and not include_hidden:
                hidden.append(conv_id)
                continue
            out.append(row)
        return out


def _spent(spend: Spend) -> dict[str, Any]:
    """A conversation's own usage as the tree's cached facts keep it."""
    return {"tokens": spend.tokens, "cost": spend.cost}


def _mtime(path: os.PathLike[str] | str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def tokens_text(n: int) -> str:
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def daemon_line(ws: Workspace) -> str:
    from jpfs.services.daemon import process

    data = process.status(process.Files.of(ws))
    if not data.get("running"):
        return "daemon: not running"
    return (
        f"daemon: pid {data['pid']}, {data.get('agents_running', 0)}/"
        f"{data.get('max_agents', '?')} agents, {data.get('queue', 0)} queued"
    )
