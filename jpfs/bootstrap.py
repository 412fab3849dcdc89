"""``jpfs init``: turn a git work tree into a jpfs workspace, in one commit."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from jpfs import config as config_mod
from jpfs import gitcli
from jpfs.errors import WorkspaceError
from jpfs.workspace import JPFS_DIR, LOCAL_DIR, Workspace, git_toplevel, open_workspace

IGNORE_LINE = f"/{LOCAL_DIR}/"
CONV_README = """# Conversations

Each directory here is a jpfs conversation; a sub-agent's conversation is a
subdirectory of its caller's. Write `task.md` in a new directory to start one.
See the jpfs protocol for the files and what they mean.
"""


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


def init_workspace(path: Path, *, git_init: bool = False) -> tuple[Workspace, str | None]:
    """Create (or complete) the workspace; returns it and the init commit (None if unchanged)."""
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
        gitcli.run(path, ["init", "-q"])
        top = path
    written: list[Path] = []
    jpfs_dir = top / JPFS_DIR
    _write_if_absent(jpfs_dir / config_mod.CONFIG_FILE, template_text("config.toml"), written)
    for name in template_agents():
        _write_if_absent(jpfs_dir / "agents" / name, template_text("agents", name), written)
    gitignore = top / ".gitignore"
    lines = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.exists() else []
    if not any(line.strip() in (IGNORE_LINE, IGNORE_LINE.lstrip("/"), LOCAL_DIR) for line in lines):
        lines.append(IGNORE_LINE)
        gitignore.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(gitignore)
    ws = open_workspace(top, search=False)
    _write_if_absent(ws.conv_root / "README.md", CONV_README, written)
    ws.ensure_local()
    if not written:
        return ws, None
    from jpfs.committer import Change, Committer

    owned = (JPFS_DIR, ".gitignore", ws.conv_root_rel)
    committer = Committer(top, owned=owned)
    try:
        sha = committer.commit(
            Change(
                paths=(f"{JPFS_DIR}/config.toml", f"{JPFS_DIR}/agents", ".gitignore",
                       f"{ws.conv_root_rel}/README.md"),
                subject="jpfs: init",
                trailers=(("Jpfs-Event", "init"),),
            )
        )  # fmt: skip
    finally:
        committer.close()
    return ws, sha
