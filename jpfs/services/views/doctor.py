"""``jpfs doctor``: what stands between this workspace and a working agent, and what to
do about each. Reads only; repairs nothing (each fix is a command the user runs)."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jpfs.core import agentconfig, failures, profiles, recordbranch
from jpfs.core import workspace as workspace_mod
from jpfs.core.agentconfig import AgentConfig
from jpfs.errors import JpfsError
from jpfs.infra import git

MIN_GIT = (2, 38)  # merge-tree --write-tree (protocol/branches.md)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "warn" (works, with a caveat) or "fail" (something will not work)
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def examine(start: Path | None, cfg: list[str]) -> list[Check]:
    """Every check, in the order a user fixes things: git, the workspace, its record,
    the configuration and profiles, trust, the model provider's key, the daemon, and
    conversations failed where their own files could not say so."""
    checks = [_git()]
    try:
        ws = workspace_mod.open_workspace(start, cfg)
    except JpfsError as exc:
        fix = "run `jpfs init` in your git repository"
        if workspace_mod.is_workspace(Path(start or Path.cwd())):
            fix = "mend .jpfs/config.toml (`jpfs config show` names the keys)"
        return [*checks, Check("workspace", "fail", str(exc), fix)]
    checks.append(Check("workspace", "ok", str(ws.root)))
    checks.append(_record(ws))
    checks.append(_config(ws))
    checks += _profiles(ws)
    checks.append(_api_key(ws))
    checks.append(_daemon(ws))
    checks += _unrecorded(ws)
    return checks


def _git() -> Check:
    try:
        text = git.run(Path.cwd(), ["--version"]).stdout.strip()
    except (JpfsError, OSError) as exc:
        return Check("git", "fail", f"git does not run: {exc}", "install git 2.38 or later")
    found = re.search(r"(\d+)\.(\d+)", text)
    version = (int(found[1]), int(found[2])) if found else (0, 0)
    if version < MIN_GIT:
        return Check("git", "fail", text, "install git 2.38 or later (jpfs merges with it)")
    return Check("git", "ok", text)


def _record(ws: workspace_mod.Workspace) -> Check:
    path = recordbranch.locate(ws.root, ws.conv_root_rel, ws.record_branch)
    if not recordbranch.is_record(path, ws.record_branch):
        return Check(
            "record", "fail", f"branch {ws.record_branch} is not checked out at {path}",
            "run `jpfs init` (it re-attaches the record, or makes it)",
        )  # fmt: skip
    dirty = git.run(path, ["status", "--porcelain", "--untracked-files=no"], check=False)
    detail = (
        f"branch {ws.record_branch} at {ws.rel(path) if path.is_relative_to(ws.root) else path}"
    )
    if dirty.returncode != 0:
        return Check("record", "fail", f"{detail}: {dirty.stderr.strip()}", "run `git fsck`")
    return Check("record", "ok", detail)


def _config(ws: workspace_mod.Workspace) -> Check:
    config = ".jpfs/config.toml"
    if config in ws.notes:
        return Check(
            "config", "warn", f"{config}: {ws.notes[config]}; the last good copy stands in",
            "check out a branch with .jpfs/, or `jpfs init` to write one",
        )  # fmt: skip
    return Check("config", "ok", f"{config} loads")


def _profiles(ws: workspace_mod.Workspace) -> list[Check]:
    from jpfs.services.workspace import policy, trust

    out = []
    allowed = list(ws.config.agents_allowed)
    for name in sorted(set(profiles.available(ws.agents_dir)) | set(allowed)):
        try:
            policy.load_profile(ws, name)
        except JpfsError as exc:
            fix = "review it, then `jpfs trust`" if "trust" in str(exc) else "mend the file"
            out.append(Check(f"profile {name}", "fail", str(exc), fix))
            continue
        shown = f".jpfs/agents/{name}.toml"
        if shown in ws.notes:
            out.append(
                Check(
                    f"profile {name}",
                    "warn",
                    f"{ws.notes[shown]}; the last good copy runs",
                    "mend it, or `jpfs trust` it if you changed it on purpose",
                )
            )
        else:
            out.append(Check(f"profile {name}", "ok", shown))
    waiting = [r.name for r in trust.standing(ws.agents_dir, ws.local_dir) if not r.trusted]
    if waiting:
        out.append(
            Check(
                "trust",
                "warn",
                f"{', '.join(waiting)} run local programs and wait for trust",
                "review them in .jpfs/agents/, then `jpfs trust`",
            )
        )
    return out


def _api_key(ws: workspace_mod.Workspace) -> Check:
    from jpfs.services.workspace import policy

    default = ws.config.default_agent
    try:
        config = policy.load_profile(ws, default, trusted=False).settings
    except JpfsError:
        config = agentconfig.view({})
    provider = config.provider or "anthropic"
    if provider == "openai":
        return _openai_key(default, config)
    if os.environ.get("ANTHROPIC_API_KEY", "").strip():
        return Check("api key", "ok", "ANTHROPIC_API_KEY is set")
    if provider != "anthropic":
        return Check("api key", "ok", f"not needed by the default agent ({default}: {provider})")
    return Check(
        "api key", "warn", f"ANTHROPIC_API_KEY is not set, and the default agent ({default})"
        " needs it",
        "export ANTHROPIC_API_KEY=..., or try the offline demo agent: `jpfs query --agent demo`",
    )  # fmt: skip


def _openai_key(default: str, config: AgentConfig) -> Check:
    """An OpenAI-compatible default agent: its key variable, unless a local server (a
    ``base_url``, its own or ``OPENAI_BASE_URL``) needs none."""
    name = config.api_key_env or "OPENAI_API_KEY"
    if os.environ.get(name, "").strip():
        return Check("api key", "ok", f"{name} is set (default agent {default}: openai)")
    if config.base_url or os.environ.get("OPENAI_BASE_URL", "").strip():
        return Check("api key", "ok", f"not needed: {default} talks to a server of its own")
    return Check(
        "api key", "warn", f"{name} is not set, and the default agent ({default}) needs it",
        f"export {name}=..., or give the profile a base_url (a local server needs no key)",
    )  # fmt: skip


def _unrecorded(ws: workspace_mod.Workspace) -> list[Check]:
    """Conversations failed though their own files refused the error (a link where a
    directory should be, a full disk): kept on this machine, :mod:`jpfs.core.failures`."""
    kept = sorted(failures.every(ws.local_dir, ws.conv_root).items())
    fix = "mend its files, then `jpfs retry {}`"
    return [
        Check(f"conversation {c}", "fail", f"failed: {f.shown}", fix.format(c)) for c, f in kept
    ]


def _daemon(ws: workspace_mod.Workspace) -> Check:
    from jpfs.services.daemon import process

    data = process.status(process.Files(ws.local_dir))
    if not data.get("running"):
        return Check(
            "daemon", "warn", "not running: saving task.md or answers.md starts nothing",
            "`jpfs daemon start` (or `jpfs query` runs agents without it)",
        )  # fmt: skip
    error = data.get("last_error")
    if error:
        return Check(
            "daemon", "warn", f"pid {data['pid']}; last error: {error.get('message', '')}",
            "see `jpfs daemon status` and .jpfs/local/daemon.log",
        )  # fmt: skip
    return Check("daemon", "ok", f"pid {data['pid']}, {data.get('agents_running', 0)} running")
