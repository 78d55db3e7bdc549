"""The adapter's configuration, parsed once, and the session id rule.

Everything here comes from an operator (a file, flags) or from a client (a session id in a
URL): it is checked once, with errors naming what was wrong, and passed on as plain data so
the actors on other nodes get exactly what the adapter checked.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
from typing import Any, Mapping

NAMESPACE = "toolbox"
"""The Ray namespace every session actor (and the registry) lives in."""

ACTOR_PREFIX = "toolbox:session:"
"""A session's actor is named this plus its session id: Ray's name uniqueness is the directory."""

SLOT = "toolbox_slot"
"""The custom resource one session server takes. A node offers as many as it can hold."""

_SID = re.compile(r"[A-Za-z0-9._-]{1,128}")


class ConfigError(ValueError):
    """A configuration value that is not acceptable; the message names it."""


def parse_sid(text: str) -> str | None:
    """The session id when `text` is one (1-128 of ``A-Z a-z 0-9 . _ -``, not starting with
    '.'), else None."""
    if not isinstance(text, str) or not _SID.fullmatch(text) or text.startswith("."):
        return None
    return text


def inside(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or beneath it (both absolute)."""
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def is_loopback(host: str) -> bool:
    """Whether a listen address is loopback only (``0.0.0.0`` and ``::`` are every address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token_file(path: str, what: str = "placement_token_file") -> str:
    """The token in `path` (its first line, trimmed, as ``toolbox router
    --placement-token-file`` reads it); errors name `what`."""
    try:
        with open(path, "rb") as f:
            raw = f.read(4096)
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror or e}") from None
    lines = raw.decode("utf-8", "replace").splitlines()
    token = lines[0].strip() if lines else ""
    if len(token) < 16:
        raise ConfigError(f"{what} {path}: the token must be 16 characters or more (a random one, e.g. `openssl rand -hex 24`)")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"{what} {path}: the token has spaces or control characters")
    return token


def actor_name(sid: str) -> str:
    """The name of the actor that owns session `sid`."""
    return ACTOR_PREFIX + sid


@dataclasses.dataclass(frozen=True)
class Config:
    """What the adapter and every session actor run with."""

    toolbox_bin: str
    """The toolbox binary each node runs (an absolute path on every node)."""
    state_store: str
    """``file:///absolute/folder`` (a folder every node shares) or ``s3://bucket/prefix``."""
    work_root: str = "/tmp/toolbox-ray"
    """Where a session server's workspace folder is made on its node (one per session and epoch)."""
    idle_park_s: float = 900.0
    """A session with no turn running, no approval waiting and nothing changed for this long
    is parked: its session server syncs and exits, its actor ends, its slot is freed."""
    idle_check_s: float = 5.0
    """How often a session actor looks for activity."""
    place_timeout_s: float = 5.0
    """How long ``:ensure`` waits for a slot before answering 503."""
    start_timeout_s: float = 120.0
    """How long a session server may take to listen (a restore of a large workspace included)."""
    park_timeout_s: float = 60.0
    """How long a parked session server may take to sync and exit before it is killed."""
    retry_after_s: int = 2
    """The ``Retry-After`` of a 503."""
    listen_ip: str | None = None
    """The address session servers listen on [default: the node's IP as Ray knows it]."""
    host_args: tuple[str, ...] = ()
    """More arguments for ``toolbox serve`` (e.g. ``--mode``, ``--sync-every``)."""
    host_env: tuple[tuple[str, str], ...] = ()
    """More environment for the session servers (the model's settings, AWS_* for an S3 store)."""
    placement_token_file: str | None = None
    """A file (its first line) holding the bearer token every request to the adapter must
    carry. Read by the adapter's replicas themselves, on the node they run on: a value in
    this configuration would travel through Ray (Serve keeps a deployment's arguments in
    the GCS, which any Ray client can read). Required when the adapter listens beyond
    loopback; session server tokens are derived from it (see ``adapter.HostKeys``)."""
    isolate_hosts: bool = True
    """Model code in a session server must not reach Ray: the session server runs in a mount
    namespace of its own where Ray's temp dir (its Unix sockets, ``ray_current_cluster``) and
    the other sessions' folders under ``work_root`` are empty read-only folders, and its shell
    commands run under ``--sandbox workspace-write`` (no network sockets). Turn off only where
    namespaces cannot be made and session servers are trusted."""

    def __post_init__(self) -> None:
        if not self.toolbox_bin or not os.path.isabs(self.toolbox_bin):
            raise ConfigError(f"toolbox_bin must be an absolute path, got {self.toolbox_bin!r}")
        store = self.state_store
        if store.startswith("file://"):
            if not store[len("file://") :].startswith("/"):
                raise ConfigError(f"state_store: a file:// URL needs an absolute path, got {store!r}")
        elif not store.startswith("s3://") or len(store) <= len("s3://"):
            raise ConfigError(f"state_store must be file:///folder or s3://bucket/prefix, got {store!r}")
        if not os.path.isabs(self.work_root):
            raise ConfigError(f"work_root must be an absolute path, got {self.work_root!r}")
        for name in (
            "idle_park_s",
            "idle_check_s",
            "place_timeout_s",
            "start_timeout_s",
            "park_timeout_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value <= 30 * 86400:
                raise ConfigError(f"{name} must be a number of seconds above 0, got {value!r}")
        if not isinstance(self.retry_after_s, int) or not 0 < self.retry_after_s <= 3600:
            raise ConfigError(f"retry_after_s must be 1-3600 seconds, got {self.retry_after_s!r}")
        if self.placement_token_file is not None and (
            not isinstance(self.placement_token_file, str) or not os.path.isabs(self.placement_token_file)
        ):
            raise ConfigError(f"placement_token_file must be an absolute path, got {self.placement_token_file!r}")
        if not isinstance(self.isolate_hosts, bool):
            raise ConfigError(f"isolate_hosts must be true or false, got {self.isolate_hosts!r}")
        if self.isolate_hosts:
            for name, path in (("state_store", self.store_folder), ("toolbox_bin", self.toolbox_bin)):
                if path is not None and inside(path, self.work_root):
                    raise ConfigError(
                        f"{name} {path!r} is inside work_root {self.work_root!r}: an isolated session "
                        "server sees only its own session's folder there"
                    )
        for i, arg in enumerate(self.host_args):
            if not isinstance(arg, str):
                raise ConfigError(f"host_args must be strings, got {arg!r}")
            name = arg.split("=")[0]
            if name in (
                "--session",
                "--epoch",
                "--state-store",
                "--listen",
                "--token",
                "--token-file",
                "--token-fd",
                "--token-sha256",
                "--workspace",
                "-w",
            ):
                raise ConfigError(f"host_args may not set {arg}: the session actor sets it")
            if name == "--sandbox" and self.isolate_hosts:
                value = arg.partition("=")[2] if "=" in arg else (self.host_args[i + 1 : i + 2] or [""])[0]
                if value not in ("read-only", "workspace-write"):
                    raise ConfigError(
                        f"host_args: --sandbox {value or '(no value)'} would let shell commands open "
                        "network sockets, and so reach Ray; use read-only or workspace-write, or set "
                        "isolate_hosts to false"
                    )

    @property
    def sandbox_arg(self) -> list[str]:
        """``--sandbox workspace-write`` when session servers are isolated and host_args
        picks no sandbox."""
        if not self.isolate_hosts or any(a.split("=")[0] == "--sandbox" for a in self.host_args):
            return []
        return ["--sandbox", "workspace-write"]

    @property
    def store_folder(self) -> str | None:
        """The store's folder when it is a local (file://) store."""
        if self.state_store.startswith("file://"):
            return self.state_store[len("file://") :]
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for an actor's constructor."""
        out = dataclasses.asdict(self)
        out["host_args"] = list(self.host_args)
        out["host_env"] = dict(self.host_env)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Config":
        """The configuration `data` describes; unknown keys are refused, naming the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        if "placement_token" in data:
            raise ConfigError(
                "placement_token: a token written in the configuration would travel through Ray "
                "(Serve keeps a deployment's arguments in the GCS, which any Ray client can read); "
                "put it in a file on the head node and name that file with placement_token_file"
            )
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys {unknown}; known: {sorted(known)}")
        data = dict(data)
        data["host_args"] = tuple(data.get("host_args", ()))
        env = data.get("host_env", {})
        if isinstance(env, Mapping):
            env = env.items()
        data["host_env"] = tuple((str(k), str(v)) for k, v in env)
        try:
            return cls(**data)
        except TypeError as e:
            raise ConfigError(str(e)) from None

    @classmethod
    def from_file(cls, path: str) -> "Config":
        """The configuration in a JSON file."""
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}: not JSON: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a JSON object expected")
        return cls.from_dict(data)
