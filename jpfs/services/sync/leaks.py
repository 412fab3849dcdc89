"""Secrets in the record's commits: the check before a push, and ``jpfs scan``.

jpfs redacts what it writes (:mod:`jpfs.core.secrets`), but a person's own edits
(``task.md``, ``answers.md``, a file dropped into a conversation) are committed as they
wrote them. Before the record leaves the machine (``jpfs sync``, the daemon's pushes),
the commits about to go are scanned, and a push holding a recognised secret is refused,
naming the conversation, the file and the line; ``jpfs scan`` reports what the record's
history already holds, with how to rewrite it. ``sync.scan = false`` turns the check off
(for a finding that is no secret).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jpfs.core import ids, secrets
from jpfs.errors import JpfsError
from jpfs.infra.git.treediff import Changes

# What a text file may be: larger contents and binary ones (a NUL early on) are skipped.
MAX_BYTES = 8 * 1024 * 1024


class SecretInRecord(JpfsError):
    """A commit about to be pushed holds a recognised secret."""


@dataclass(frozen=True)
class Leak:
    commit: str
    path: str  # in the record: a conversation's id, then the file
    kind: str
    line: int

    @property
    def conversation(self) -> str:
        parts = self.path.split("/")[:-1]
        for i, part in enumerate(parts):
            if part in ids.RESERVED:
                return "/".join(parts[:i])
        return "/".join(parts)

    def text(self) -> str:
        return f"{self.path}:{self.line}: {self.kind} (commit {self.commit[:12]})"


def find(repo: Path, old: str | None, new: str, seen: set[str] | None = None) -> list[Leak]:
    """The secrets the commits after ``old`` (all of ``new``'s history when None) bring.
    ``seen``: contents (by commit and path) already scanned, skipped and added to."""
    out: list[Leak] = []
    for commit, path, data in Changes(repo).contents(old, new):
        key = f"{commit}:{path}"
        if seen is not None:
            if key in seen:
                continue
            seen.add(key)
        if len(data) > MAX_BYTES or b"\0" in data[:8192]:
            continue
        text = data.decode("utf-8", "replace")
        out.extend(Leak(commit, path, f.kind, f.line) for f in secrets.scan(text))
    return out


def refusal(leaks: list[Leak], remote: str) -> SecretInRecord:
    shown = "; ".join(leak.text() for leak in leaks[:3])
    more = f" and {len(leaks) - 3} more" if len(leaks) > 3 else ""
    where = sorted({leak.conversation or "(the record's root)" for leak in leaks})
    return SecretInRecord(
        f"not pushing the record to {remote}: it holds {len(leaks)} secret(s) in"
        f" {', '.join(where)}: {shown}{more}. Remove them and rewrite the record's history"
        " (`jpfs scan` says how), or, if none is a secret, push once with"
        " `jpfs --cfg sync.scan=false sync`"
    )


REWRITE = """\
The record's history holds these; whoever fetched it has them. Rotate each key first.
Then rewrite the record branch without them, e.g. with git-filter-repo
(https://github.com/newren/git-filter-repo), in a fresh clone of this repository:

    git filter-repo --refs {branch} --replace-text <(printf '%s\\n' 'SECRET==>[removed]')

then push the branch with --force and have everyone sharing it fetch again
(`jpfs sync`). A file that should never have been shared can be dropped whole with
`git filter-repo --refs {branch} --invert-paths --path ID/FILE`."""
