from __future__ import annotations

from pathlib import Path

import pytest

from jpfs.core import config
from jpfs.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.toml").write_text(text, encoding="utf-8")
    return path


def test_layers_in_order(tmp_path: Path) -> None:
    jdir = write(tmp_path / ".jpfs", "[daemon]\nmax_agents = 2\nscan_interval = 5\n")
    extra = tmp_path / "extra.toml"
    extra.write_text("[daemon]\nscan_interval = 7.5\n", encoding="utf-8")
    cfg = config.load(
        jdir,
        ["daemon.debounce=0.2", str(extra)],
        {"JPFS_DAEMON__MAX_AGENTS": "6", "JPFS_UNRELATED": "x"},
    )
    assert cfg["daemon.max_agents"] == 6
    assert cfg.sources["daemon.max_agents"] == "environment"
    assert cfg["daemon.scan_interval"] == 7.5
    assert cfg["daemon.debounce"] == 0.2
    assert cfg["conversations.root"] == "conversations"
    assert cfg.sources["conversations.root"] == "default"


def test_none_drops_every_layer_below(tmp_path: Path) -> None:
    jdir = write(tmp_path / ".jpfs", "[daemon]\nmax_agents = 2\n")
    cfg = config.load(jdir, ["daemon.scan_interval=3", "NONE", "daemon.debounce=1"], {})
    assert cfg["daemon.max_agents"] == 4  # built-in default, file dropped
    assert cfg["daemon.scan_interval"] == 30.0
    assert cfg["daemon.debounce"] == 1


def test_unknown_key_and_wrong_type_name_file_and_key(tmp_path: Path) -> None:
    jdir = write(tmp_path / ".jpfs", "[daemon]\nmax_agent = 2\n")
    with pytest.raises(ConfigError, match=r"config\.toml: unknown key 'daemon\.max_agent'"):
        config.load(jdir, [], {})
    jdir = write(tmp_path / "b" / ".jpfs", '[daemon]\nmax_agents = "many"\n')
    with pytest.raises(ConfigError, match=r"'daemon\.max_agents' must be int"):
        config.load(jdir, [], {})
    with pytest.raises(ConfigError, match="JPFS_DAEMON__MAX_AGENTS"):
        config.load(None, [], {"JPFS_DAEMON__MAX_AGENTS": "true"})


def test_malformed_toml_is_a_clear_error(tmp_path: Path) -> None:
    jdir = write(tmp_path / ".jpfs", "[daemon\n")
    with pytest.raises(ConfigError, match="malformed TOML"):
        config.load(jdir, [], {})


def test_set_in_file_keeps_comments(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("# top comment\n[daemon]\n# how many\nmax_agents = 2  # inline\n", "utf-8")
    config.set_in_file(path, "daemon.max_agents", "9")
    config.set_in_file(path, "conversations.root", "convs")
    text = path.read_text("utf-8")
    assert "# top comment" in text and "# how many" in text and "# inline" in text
    assert "max_agents = 9" in text and 'root = "convs"' in text
    with pytest.raises(ConfigError):
        config.set_in_file(path, "daemon.nope", "1")


def test_every_key_is_read_typed_as_its_layers_set_it(tmp_path: Path) -> None:
    given = {
        "conversations.root": ("'talks'", lambda c: c.conversations_root, "talks"),
        "record.branch": ("rec", lambda c: c.record_branch, "rec"),
        "conversations.default_agent": ("lead", lambda c: c.default_agent, "lead"),
        "agents.allowed": ("['lead']", lambda c: c.agents_allowed, ("lead",)),
        "daemon.max_agents": ("2", lambda c: c.daemon.max_agents, 2),
        "daemon.scan_interval": ("5", lambda c: c.daemon.scan_interval, 5.0),
        "daemon.debounce": ("0.5", lambda c: c.daemon.debounce, 0.5),
        "daemon.settle": ("1", lambda c: c.daemon.settle, 1.0),
        "daemon.log_max_bytes": ("10", lambda c: c.daemon.log_max_bytes, 10),
        "daemon.log_backups": ("1", lambda c: c.daemon.log_backups, 1),
        "git.maintenance_every": ("9", lambda c: c.maintenance_every, 9),
        "query.lock_wait": ("3", lambda c: c.query_lock_wait, 3.0),
        "sync.remote": ("origin", lambda c: c.sync.remote, "origin"),
        "sync.interval": ("4", lambda c: c.sync.interval, 4.0),
        "sync.lease": ("60", lambda c: c.sync.lease, 60.0),
        "sync.machine": ("m1", lambda c: c.sync.machine, "m1"),
        "sync.scan": ("false", lambda c: c.sync.scan, False),
        "prices": (
            "{m = {input = 1.0, output = 2.0, cache_read = 0.1, cache_creation = 1.5}}",
            lambda c: c.prices,
            {"m": {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_creation": 1.5}},
        ),
    }
    assert set(given) == set(config.SCHEMA), "a key without a typed read: add one to Config"
    defaults = config.load(None, [], {})
    for key, (_, read, _) in given.items():
        assert read(defaults) == (
            tuple(config.SCHEMA[key].default)
            if key == "agents.allowed"
            else config.SCHEMA[key].default
        ), key
    cfg = config.load(None, [f"{k}={raw}" for k, (raw, _, _) in given.items()], {})
    for key, (_, read, want) in given.items():
        got = read(cfg)
        assert got == want and type(got) is type(want), key
    cfg.values["daemon.max_agents"] = 7  # a daemon taking an edit of config.toml
    assert cfg.daemon.max_agents == 7
