"""A simulated Ray cluster for tests and benchmarks: a head (Serve and the adapter, no slots)
and worker nodes with ``toolbox_slot`` resources, all on 127.0.0.1, plus small bounded HTTP
and SSE clients and a process finder. Not used in production."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.parse
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
from ray import serve  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from .adapter import deploy  # noqa: E402
from .config import Config, read_token_file  # noqa: E402

TIGHT = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
"""Health checks tightened to 500 ms x 3 (Ray's defaults: 3 s x 5)."""

LIMIT = 90.0
"""The longest any wait lasts (a hang detector on a loaded machine, never a measurement)."""


# -- HTTP ---------------------------------------------------------------------------------


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<{self.status} {self.body[:500]!r}>"


def request(
    method: str,
    url: str,
    body: Any = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> Response:
    """One request (a new connection each time); connection errors raise OSError."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    hdrs = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, u.path + (f"?{u.query}" if u.query else ""), body=data, headers=hdrs)
        r = conn.getresponse()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


class Sse:
    """Events of one SSE stream, read on a thread; every wait is bounded."""

    def __init__(self, url: str, token: str | None = None, last_event_id: str | None = None) -> None:
        u = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=LIMIT)
        hdrs = {"Accept": "text/event-stream"}
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        if last_event_id is not None:
            hdrs["Last-Event-ID"] = last_event_id
        self.conn.request("GET", u.path, headers=hdrs)
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, (self.resp.status, self.resp.read(2000))
        self.events: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        ident, data = None, []
        try:
            for raw in self.resp:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if line.startswith("id:"):
                    ident = line[3:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                elif line == "" and data:
                    event = {"id": ident, "data": json.loads("\n".join(data))}
                    with self.cond:
                        self.events.append(event)
                        self.cond.notify_all()
                    ident, data = None, []
        except (OSError, ValueError, http.client.HTTPException, AttributeError):
            # A stream cut mid-chunk (its node killed); AttributeError is http.client's own
            # when the response is closed from another thread while this one reads.
            pass
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def until(self, kind: str, after: int = 0) -> int:
        """The index of the first event of type `kind` at or after index `after`."""
        deadline = time.monotonic() + LIMIT
        with self.cond:
            while True:
                for i in range(after, len(self.events)):
                    if self.events[i]["data"].get("type") == kind:
                        return i
                left = deadline - time.monotonic()
                assert left > 0 and not self.closed, (
                    f"no {kind} event; got {[e['data'].get('type') for e in self.events]}"
                )
                self.cond.wait(min(left, 1.0))

    def kinds(self) -> list[str]:
        with self.cond:
            return [e["data"].get("type") for e in self.events]

    def close(self) -> None:
        try:
            self.conn.sock and self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def wait_until(what: str, check, limit: float = LIMIT, every: float = 0.1):
    """Polls `check` (bounded) until it returns something truthy, and returns that."""
    deadline = time.monotonic() + limit
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(every)


# -- processes ----------------------------------------------------------------------------


def host_pids(work_root: str) -> list[int]:
    """The `toolbox serve` processes whose workspace is under `work_root`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z" or b"serve" not in argv:
            continue
        for i, a in enumerate(argv[:-1]):
            if a == b"--workspace" and argv[i + 1].decode(errors="replace").startswith(work_root + "/"):
                out.append(int(pid))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the cluster --------------------------------------------------------------------------


class SimCluster:
    """A head (where Serve and the adapter run, with no slots) and worker nodes with slots."""

    def __init__(
        self,
        tmp: str,
        toolbox_bin: str,
        slots: int,
        nodes: int,
        system_config: dict[str, Any] | None,
        **cfg: Any,
    ) -> None:
        self.tmp = tmp
        self.store = os.path.join(tmp, "store")
        self.work_root = os.path.join(tmp, "work")
        self.slots = slots
        head_args: dict[str, Any] = dict(
            num_cpus=2,
            node_ip_address="127.0.0.1",
            resources={"toolbox_control": 1},
            include_dashboard=False,
        )
        if system_config:
            head_args["_system_config"] = system_config
        # Every node's workers import toolbox_ray from this checkout (a real cluster installs it).
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if package_root not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([package_root, *paths])
        self.cluster = Cluster(initialize_head=True, head_node_args=head_args)
        self.workers = [self.add_node(wait=False) for _ in range(nodes)]
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, namespace="toolbox", log_to_driver=False)
        env = {"XDG_CONFIG_HOME": os.path.join(tmp, "xdg")}
        env.update(cfg.pop("host_env", {}))
        defaults: dict[str, Any] = dict(
            toolbox_bin=toolbox_bin,
            state_store=f"file://{self.store}",
            work_root=self.work_root,
            host_env=env,
            host_args=["--mode", "full", "--sync-every", "300ms"],
            place_timeout_s=20.0,
        )
        defaults.update(cfg)
        self.config = Config.from_dict(defaults)
        # The placement token, when the configuration names its file: what a router sends.
        self.token = read_token_file(self.config.placement_token_file) if self.config.placement_token_file else None
        self.url = deploy(
            self.config,
            port=free_port(),
            actor_options_={"resources": {"toolbox_control": 0.01}},
        )

    def add_node(self, wait: bool = True):
        node = self.cluster.add_node(
            num_cpus=1, node_ip_address="127.0.0.1", resources={"toolbox_slot": self.slots}
        )
        if wait:
            self.cluster.wait_for_nodes()
        return node

    def worker(self, node_id: str):
        return next(n for n in self.workers if n.node_id == node_id)

    def kill_node(self, node_id: str) -> None:
        """Kills a worker node at once (its raylet and every process of it), as a lost machine."""
        node = self.worker(node_id)
        self.workers.remove(node)
        self.cluster.remove_node(node, allow_graceful=False)

    def ensure(self, sid: str, stale_epoch: int | None = None, timeout: float = LIMIT) -> Response:
        body = {} if stale_epoch is None else {"stale_epoch": stale_epoch}
        return request("POST", f"{self.url}/v1/sessions/{sid}:ensure", body, token=self.token, timeout=timeout)

    def ensured(self, sid: str, stale_epoch: int | None = None) -> dict[str, Any]:
        r = self.ensure(sid, stale_epoch)
        assert r.status == 200, r
        return r.json()

    def shutdown(self) -> None:
        try:
            serve.shutdown()
        except Exception:  # noqa: BLE001 - the cluster goes anyway
            pass
        ray.shutdown()
        self.cluster.shutdown()



def start_router(binary: str, placement_url: str, token: str) -> tuple[subprocess.Popen, str, list[str]]:
    """``toolbox router`` on 127.0.0.1 in front of the adapter; its process, URL and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBOX_")}
    env["TOOLBOX_ROUTER_TOKEN"] = token
    proc = subprocess.Popen(
        [binary, "router", "--listen", "127.0.0.1:0", "--placement", placement_url],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            m = re.search(r"toolbox router: listening on (http://\S+)", line)
            if m and not ready.is_set():
                found.append(m.group(1).rstrip("/"))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60) or not found:
        proc.kill()
        proc.wait()
        raise AssertionError(f"toolbox router did not start: {lines}")
    return proc, found[0], lines
