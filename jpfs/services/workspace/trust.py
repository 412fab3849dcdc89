"""Trust: profiles that run programs on this machine run only once the user said so.

A profile with ``provider = "command"`` or command tools (``[[tools.command]]``) runs
local programs. Profiles are committed files: a fresh clone or a pull brings someone
else's. Like ``direnv allow`` or ``mise trust``, such a profile runs only after
``jpfs trust`` recorded its exact content (SHA-256 of the file) in
``.jpfs/local/trust.json``, which is machine-local and never committed. A changed
profile needs trusting again. Profiles that only talk to a model provider (or the
scripted one) run local programs through no path and need no trust.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpfs.core.agentconfig import AgentConfig
from jpfs.core.profiles import Profile, available, load, profile_path
from jpfs.errors import ProfileError, UntrustedProfile
from jpfs.infra import textfile

TRUST_FILE = "trust.json"


@dataclass(frozen=True)
class Standing:
    name: str
    runs_programs: bool
    trusted: bool  # False also when the profile changed since it was trusted
    changed: bool  # trusted once, with other content

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "runs_programs": self.runs_programs,
            "trusted": self.trusted,
            "changed": self.changed,
        }


def runs_programs(config: AgentConfig) -> str:
    """What in a profile runs local programs ("" if nothing does)."""
    if config.provider == "command":
        return 'provider = "command"'
    if config.tools.command:
        return "command tools"
    return ""


def require(
    agents_dir: Path, local_dir: Path, profile: Profile, content: bytes | None = None
) -> None:
    """Refuse ``profile`` if it runs programs and its current content (``content``,
    the bytes it was parsed from, or its file's) is not trusted."""
    what = runs_programs(profile.settings)
    if not what:
        return
    known = _load(local_dir).get(profile.name)
    if content is not None:
        digest = hashlib.sha256(content).hexdigest()
    else:
        digest = _digest(profile_path(agents_dir, profile.name))
    if known == digest:
        return
    why = "changed since it was trusted" if known else "is not trusted on this machine yet"
    raise UntrustedProfile(
        f"profile {profile.name!r} runs local programs ({what}) and {why}: review"
        f" {profile.source}, run `jpfs trust`, then give the conversation new input"
    )


def standing(agents_dir: Path, local_dir: Path) -> list[Standing]:
    known = _load(local_dir)
    out = []
    for name in available(agents_dir):
        try:
            what = runs_programs(load(agents_dir, name).settings)
        except ProfileError:
            what = "unreadable profile"
        digest = _digest(profile_path(agents_dir, name))
        out.append(
            Standing(
                name,
                bool(what),
                trusted=not what or known.get(name) == digest,
                changed=bool(what) and name in known and known[name] != digest,
            )
        )
    return out


def trust(agents_dir: Path, local_dir: Path, names: list[str] | None = None) -> list[str]:
    """Record the current content of ``names`` (default: every profile); returns them."""
    every = available(agents_dir)
    chosen = names or every
    unknown = [n for n in chosen if n not in every]
    if unknown:
        raise ProfileError(f"no agent profile {', '.join(map(repr, unknown))} in {agents_dir}")
    known = _load(local_dir)
    for name in chosen:
        known[name] = _digest(profile_path(agents_dir, name))
    _save(local_dir, known)
    return chosen


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _load(local_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((local_dir / TRUST_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    profiles = data.get("profiles", {}) if isinstance(data, dict) else {}
    return {str(k): str(v) for k, v in profiles.items()} if isinstance(profiles, dict) else {}


def _save(local_dir: Path, known: dict[str, str]) -> None:
    text = json.dumps({"profiles": known}, indent=1, sort_keys=True) + "\n"
    textfile.write_atomic(local_dir / TRUST_FILE, text)
