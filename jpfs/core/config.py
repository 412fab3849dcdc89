"""Layered workspace configuration.

Layers, lowest first: built-in defaults, ``.jpfs/config.toml``, ``JPFS_*`` environment
variables (``JPFS_DAEMON__MAX_AGENTS=8``: a double underscore separates table and
key), then ``--cfg`` arguments in order. ``--cfg KEY=VALUE`` takes a TOML value
(a bare word that is not valid TOML is taken as a string), ``--cfg FILE.toml`` adds a
file layer, and ``--cfg NONE`` drops every layer below it except the built-in
defaults, which are the program's behaviour rather than anyone's configuration.

Every key is declared in :data:`SCHEMA`; unknown keys and wrong types are errors that
name the layer (file, variable or argument) and the key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpfs.core import prices
from jpfs.errors import ConfigError, FormatError, JpfsError
from jpfs.infra.textfile import decode


@dataclass(frozen=True)
class Key:
    type: type | tuple[type, ...]
    default: Any
    help: str
    # A check beyond the type (a table's inside), raising ConfigError naming ``where``.
    validate: Callable[[Any, str], object] | None = None


SCHEMA: dict[str, Key] = {
    "conversations.root": Key(str, "conversations", "directory of the conversation tree"),
    "record.branch": Key(str, "jpfs-record", "the branch that holds the record"),
    "conversations.default_agent": Key(str, "default", "profile used when none is named"),
    "agents.allowed": Key(
        list,
        ["default", "researcher", "planner", "implementer", "demo", "demo-helper"],
        "profiles a top-level caller (CLI, library, MCP) may run",
    ),
    "daemon.max_agents": Key(int, 4, "agents running at once in the daemon"),
    "daemon.scan_interval": Key((int, float), 30.0, "seconds between full rescans"),
    "daemon.debounce": Key((int, float), 0.05, "seconds to let a burst of events settle"),
    "daemon.settle": Key((int, float), 0.3, "a human edit is committed once unchanged this long"),
    "daemon.log_max_bytes": Key(int, 1_000_000, "daemon.log is rotated at this size"),
    "daemon.log_backups": Key(int, 3, "rotated daemon logs kept (daemon.log.1, ...)"),
    "git.maintenance_every": Key(int, 500, "commits between background git gc/commit-graph"),
    "query.lock_wait": Key((int, float), 0.0, "seconds jpfs query waits for a busy conversation"),
    "sync.remote": Key(str, "", "git remote that shares the record between machines (empty: none)"),
    "sync.interval": Key(
        (int, float), 2.0, "seconds from one fetch/push cycle's start to the next"
    ),
    "sync.lease": Key((int, float), 30.0, "seconds a lease lasts without renewal"),
    "sync.machine": Key(str, "", "this clone's name in leases and trailers (default: host-path)"),
    "sync.scan": Key(bool, True, "refuse to push a record that holds a recognised secret"),
    "prices": Key(
        dict,
        {},
        'USD per million tokens by model, over the shipped table ([prices."MODEL"])',
        prices.check_table,
    ),
}

CONFIG_FILE = "config.toml"


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping) and full not in SCHEMA:
            out.update(flatten(value, full + "."))
        else:
            out[full] = value
    return out


def _unwrap(value: Any) -> Any:
    """tomlkit items -> plain Python values."""
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def check(key: str, value: Any, where: str) -> Any:
    spec = SCHEMA.get(key)
    if spec is None:
        raise ConfigError(f"{where}: unknown key {key!r} (see `jpfs config show` for the keys)")
    value = _unwrap(value)
    ok = isinstance(value, spec.type) and not (isinstance(value, bool) and spec.type is not bool)
    if not ok:
        names = (
            "/".join(t.__name__ for t in spec.type)
            if isinstance(spec.type, tuple)
            else spec.type.__name__
        )
        raise ConfigError(
            f"{where}: key {key!r} must be {names}, got {type(value).__name__} {value!r}"
        )
    if spec.validate is not None:
        spec.validate(value, where)
    return value


def parse_value(raw: str) -> Any:
    """A TOML value (``8``, ``true``, ``"x"``, ``["a"]``); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def read_toml(
    path: Path, error: type[JpfsError], shown: str | None = None
) -> dict[str, Any] | None:
    """A TOML file as data (None if missing); ``error`` names the file (as ``shown``,
    default its path) and the problem, malformed TOML and text that is not UTF-8 alike."""
    name = shown or str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise error(f"{name}: cannot read it: {exc.strerror}") from exc
    return parse_toml(data, error, name)


def parse_toml(data: bytes, error: type[JpfsError], name: str) -> dict[str, Any]:
    """TOML bytes as data, or ``error`` naming ``name`` and the problem."""
    try:
        return tomllib.loads(decode(data, Path(name)))
    except FormatError as exc:
        raise error(str(exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{name}: malformed TOML: {exc}") from exc
    except RecursionError:
        raise error(f"{name}: malformed TOML: nested too deeply") from None


def load_file(path: Path) -> dict[str, Any]:
    data = read_toml(path, ConfigError)
    if data is None:
        return {}
    return checked(data, str(path))


def checked(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A config file's data as checked keys and values (:class:`ConfigError` if not)."""
    return {k: check(k, v, where) for k, v in flatten(data).items()}


@dataclass(frozen=True)
class DaemonSettings:
    max_agents: int
    scan_interval: float
    debounce: float
    settle: float
    log_max_bytes: int
    log_backups: int


@dataclass(frozen=True)
class SyncSettings:
    remote: str  # "": no remote, one machine
    interval: float
    lease: float
    machine: str  # "": record.machine_name's default
    scan: bool


@dataclass
class Config:
    """The layered values of the :data:`SCHEMA` keys, and where each came from.

    Read them typed, through the properties (``ws.config.daemon.max_agents``): each
    reads ``values`` when it is used, as a daemon takes edits of config.toml into them
    (``services/daemon/configwatch.py``)."""

    values: dict[str, Any]
    sources: dict[str, str]

    @property
    def conversations_root(self) -> str:
        return str(self.values["conversations.root"])

    @property
    def record_branch(self) -> str:
        return str(self.values["record.branch"])

    @property
    def default_agent(self) -> str:
        return str(self.values["conversations.default_agent"])

    @property
    def agents_allowed(self) -> tuple[str, ...]:
        return tuple(str(name) for name in self.values["agents.allowed"])

    @property
    def daemon(self) -> DaemonSettings:
        v = self.values
        return DaemonSettings(
            max_agents=int(v["daemon.max_agents"]),
            scan_interval=float(v["daemon.scan_interval"]),
            debounce=float(v["daemon.debounce"]),
            settle=float(v["daemon.settle"]),
            log_max_bytes=int(v["daemon.log_max_bytes"]),
            log_backups=int(v["daemon.log_backups"]),
        )

    @property
    def maintenance_every(self) -> int:
        return int(self.values["git.maintenance_every"])

    @property
    def query_lock_wait(self) -> float:
        return float(self.values["query.lock_wait"])

    @property
    def sync(self) -> SyncSettings:
        v = self.values
        return SyncSettings(
            remote=str(v["sync.remote"]),
            interval=float(v["sync.interval"]),
            lease=float(v["sync.lease"]),
            machine=str(v["sync.machine"]),
            scan=bool(v["sync.scan"]),
        )

    @property
    def prices(self) -> Mapping[str, Any]:
        """``[prices."MODEL"]`` tables: open-ended, checked by ``prices.check_table``."""
        return dict(self.values["prices"])

    def get(self, key: str) -> Any:
        if key not in SCHEMA:
            raise ConfigError(f"unknown key {key!r} (see `jpfs config show` for the keys)")
        return self.values[key]

    def __getitem__(self, key: str) -> Any:
        return self.get(key)

    def items(self) -> Iterable[tuple[str, Any, str]]:
        for key in sorted(self.values):
            yield key, self.values[key], self.sources[key]


def load(
    jpfs_dir: Path | None,
    cfg: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    *,
    file_values: dict[str, Any] | None = None,
) -> Config:
    """The layered configuration; ``file_values``: ``jpfs_dir``'s file, already read
    and checked (so that a command's start-up parses it once)."""
    environ = os.environ if environ is None else environ
    # Each layer is (source name, values); NONE clears the list built so far.
    layers: list[tuple[str, dict[str, Any]]] = []
    if jpfs_dir is not None:
        path = jpfs_dir / CONFIG_FILE
        layers.append((str(path), load_file(path) if file_values is None else file_values))
    env_layer: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith("JPFS_") or "__" not in name:
            continue
        key = name[5:].lower().replace("__", ".")
        env_layer[key] = check(key, parse_value(raw), f"environment variable {name}")
    if env_layer:
        layers.append(("environment", env_layer))
    for arg in cfg:
        if arg == "NONE":
            layers.clear()
        elif "=" in arg:
            key, _, raw = arg.partition("=")
            key = key.strip()
            layers.append((f"--cfg {arg}", {key: check(key, parse_value(raw), f"--cfg {arg}")}))
        elif arg.endswith(".toml"):
            path = Path(arg)
            if not path.is_file():
                raise ConfigError(f"--cfg {arg}: no such file")
            layers.append((str(path), load_file(path)))
        else:
            raise ConfigError(f"--cfg {arg!r}: expected KEY=VALUE, a FILE.toml or NONE")
    values = {k: spec.default for k, spec in SCHEMA.items()}
    sources = dict.fromkeys(SCHEMA, "default")
    for source, layer in layers:
        for key, value in layer.items():
            values[key] = value
            sources[key] = source
    return Config(values, sources)


def set_in_file(path: Path, key: str, raw: str) -> Any:
    """Set ``key`` in a config file, keeping its comments and order (tomlkit)."""
    import tomlkit
    import tomlkit.exceptions

    value = check(key, parse_value(raw), f"{path}")
    try:
        doc = (
            tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
        )
    except tomlkit.exceptions.TOMLKitError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from exc
    *tables, leaf = key.split(".")
    node: Any = doc
    for name in tables:
        if name not in node:
            node[name] = tomlkit.table()
        node = node[name]
    node[leaf] = value
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")
    return value
