"""``jpfs init``: turn a git work tree into a jpfs workspace with its record branch."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from jpfs.core import config as config_mod
from jpfs.core.workspace import JPFS_DIR, LOCAL_DIR, Workspace, git_toplevel, open_workspace
from jpfs.errors import WorkspaceError
from jpfs.infra import git
from jpfs.services.workspace import policy

IGNORE_LINE = f"/{LOCAL_DIR}/"


def template_text(*parts: str) -> str:
    node = resources.files("jpfs") / "templates"
    for part in parts:
        node = node / part
    return node.read_text(encoding="utf-8")


def template_agents() -> list[str]:
    folder = resources.files("jpfs") / "templates" / "agents"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".toml"))


def _write_if_absent(path: Path, text: str, written: list[Path]) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    written.append(path)


def init_workspace(
    path: Path, *, git_init: bool = False, cfg: Sequence[str] = ()
) -> tuple[Workspace, list[Path]]:
    """Create (or complete) the workspace; returns it and the files written.

    The project files (``.jpfs/``, the ``.gitignore`` lines) are written into the work
    tree for the user to commit; nothing is staged or committed on the user's branch.
    The record branch and its worktree are created (or re-attached) here.
    """
    path = path.resolve()
    if not path.is_dir():
        raise WorkspaceError(f"{path} is not a directory")
    top = git_toplevel(path)
    if top is None:
        if not git_init:
            raise WorkspaceError(
                f"{path} is not inside a git repository; run `git init` first"
                " or use `jpfs init --git-init`"
            )
        git.run(path, ["init", "-q"])
        top = path
    written: list[Path] = []
    jpfs_dir = top / JPFS_DIR
    _write_if_absent(jpfs_dir / config_mod.CONFIG_FILE, template_text("config.toml"), written)
    for name in template_agents():
        _write_if_absent(jpfs_dir / "agents" / name, template_text("agents", name), written)
    ws = open_workspace(top, cfg, search=False)
    if ws.config.sources.get("record.branch", "default") != "default":
        # A record branch chosen for init (--cfg, JPFS_RECORD__BRANCH) is where the
        # record lives from now on: every later command must find the same one.
        path = jpfs_dir / config_mod.CONFIG_FILE
        if config_mod.load_file(path).get("record.branch") != ws.record_branch:
            config_mod.set_in_file(path, "record.branch", f'"{ws.record_branch}"')
            ws = open_workspace(top, cfg, search=False)
    if add_ignore_lines(top, [IGNORE_LINE, f"/{ws.conv_root_rel}/"]):
        written.append(top / ".gitignore")
    ws.ensure_local()
    ws.ensure_record()
    policy.keep_all(ws)
    return ws, written


def add_ignore_lines(top: Path, wanted: list[str]) -> bool:
    gitignore = top / ".gitignore"
    text = gitignore.read_text(encoding="utf-8") if gitignore.exists() else ""
    have = {line.strip().strip("/") for line in text.splitlines()}
    missing = [line for line in wanted if line.strip("/") not in have]
    if not missing:
        return False
    sep = "" if not text or text.endswith("\n") else "\n"
    gitignore.write_text(text + sep + "\n".join(missing) + "\n", encoding="utf-8")
    return True
