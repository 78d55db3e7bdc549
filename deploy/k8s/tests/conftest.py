"""Fixtures for deploy/k8s's tests: a fake Kubernetes API server on 127.0.0.1 that allows
the adapter only what manifests/placement.yaml's Role allows, and the adapter, gate and boot
programs started as real processes against it."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
K8S_DIR = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(K8S_DIR, "adapter"))

import validate_manifests  # noqa: E402

ADAPTER = os.path.join(K8S_DIR, "adapter", "toolbox_k8s_adapter.py")
BOOT = os.path.join(K8S_DIR, "boot", "toolbox_k8s_boot.py")
GATE = os.path.join(K8S_DIR, "boot", "toolbox_k8s_gate.py")
FAKE_TOOLBOX = os.path.join(HERE, "fake_toolbox.py")
API_TOKEN = "fake-api-token"
NAMESPACE = "toolbox"
# Every wait in these tests is bounded in count and time.
POLL_TRIES = 150
POLL_SLEEP = 0.1

_COLLECTION = re.compile(
    r"^(?P<coll>/apis?/(?:[^/]+/)?v1(?:beta1)?/namespaces/(?P<ns>[^/]+)/"
    r"(?P<res>sandboxclaims|sandboxes|secrets|configmaps))(?:/(?P<name>[^/]+))?$")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_KINDS = {"sandboxclaims": ("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim"),
          "sandboxes": ("agents.x-k8s.io/v1beta1", "Sandbox"),
          "secrets": ("v1", "Secret"),
          "configmaps": ("v1", "ConfigMap")}
_GROUPS = {"sandboxclaims": "extensions.agents.x-k8s.io", "sandboxes": "agents.x-k8s.io",
           "secrets": "", "configmaps": ""}


def placement_role() -> dict:
    with open(os.path.join(K8S_DIR, "manifests", "placement.yaml"), encoding="utf-8") as f:
        return next(d for d in yaml.safe_load_all(f) if d and d["kind"] == "Role")


def role_allows(role: dict, verb: str, group: str, resource: str, name: str | None) -> bool:
    """RBAC's answer for one request: a rule matches when its apiGroups, resources and verbs
    do, and, if it lists resourceNames, the request names one of them (a list or a create
    names nothing, so such a rule never allows those)."""
    for rule in role["rules"]:
        if not ({group, "*"} & set(rule.get("apiGroups") or [])):
            continue
        if not ({resource, "*"} & set(rule.get("resources") or [])):
            continue
        if not ({verb, "*"} & set(rule.get("verbs") or [])):
            continue
        names = rule.get("resourceNames")
        if names and (name is None or name not in names):
            continue
        return True
    return False


class FakeKube:
    """Stores claims, sandboxes and secrets by collection path, as the API server would
    answer them; created SandboxClaims are checked against the vendored CRD's schema."""

    def __init__(self, role: dict | None = None):
        self.objects: dict[str, dict[str, dict]] = {}
        self.requests: list[tuple[str, str]] = []
        self.forbidden: list[tuple[str, str]] = []
        # The adapter's service account may do what this Role allows, nothing else.
        self.role = role if role is not None else placement_role()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, body = fake.handle(method, self.path, raw,
                                           self.headers.get("Authorization"),
                                           self.headers.get("Content-Type"))
                self._send(status, body)

            def do_GET(self):  # noqa: N802
                self._serve("GET")

            def do_POST(self):  # noqa: N802
                self._serve("POST")

            def do_PATCH(self):  # noqa: N802
                self._serve("PATCH")

            def do_DELETE(self):  # noqa: N802
                self._serve("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _status(code, reason, message):
        return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "reason": reason, "message": message, "code": code}

    def handle(self, method, raw_path, raw, auth, content_type):
        url = urllib.parse.urlsplit(raw_path)
        with self.lock:
            self.requests.append((method, url.path))
            if auth != f"Bearer {API_TOKEN}":
                return self._status(401, "Unauthorized", "no or wrong bearer token")
            m = _COLLECTION.match(url.path)
            if not m or m["ns"] != NAMESPACE:
                return self._status(404, "NotFound", f"no route {url.path}")
            expected_prefix = {"sandboxclaims": "/apis/extensions.agents.x-k8s.io/v1beta1/",
                               "sandboxes": "/apis/agents.x-k8s.io/v1beta1/",
                               "secrets": "/api/v1/", "configmaps": "/api/v1/"}[m["res"]]
            if not url.path.startswith(expected_prefix):
                return self._status(404, "NotFound", f"{m['res']} are not served at {url.path}")
            store = self.objects.setdefault(m["coll"], {})
            name = urllib.parse.unquote(m["name"]) if m["name"] else None
            verb = {"GET": "get" if name else "list", "POST": "create", "PATCH": "patch",
                    "DELETE": "delete", "PUT": "update"}.get(method, method.lower())
            if not role_allows(self.role, verb, _GROUPS[m["res"]], m["res"], name):
                self.forbidden.append((method, url.path))
                return self._status(403, "Forbidden",
                                    f"{verb} {m['res']} {name or ''} is not in the Role")
            if method == "GET" and name is None:
                query = urllib.parse.parse_qs(url.query)
                items = list(store.values())
                for sel in query.get("labelSelector", []):
                    key, _, value = sel.partition("=")
                    items = [o for o in items
                             if o["metadata"].get("labels", {}).get(key) == value]
                return 200, {"kind": "List", "items": items}
            if method == "GET":
                if name not in store:
                    return self._status(404, "NotFound", f"{m['res']} {name!r} not found")
                return 200, store[name]
            if method == "POST" and name is None:
                obj = json.loads(raw)
                new_name = obj.get("metadata", {}).get("name", "")
                if not _DNS_LABEL.fullmatch(new_name) or len(new_name) > 63:
                    return self._status(422, "Invalid", f"name {new_name!r} is not DNS-1123")
                api_version, kind = _KINDS[m["res"]]
                if (obj.get("apiVersion"), obj.get("kind")) != (api_version, kind):
                    return self._status(400, "BadRequest", "apiVersion/kind do not match")
                if kind not in ("Secret", "ConfigMap"):
                    errors = validate_manifests.validate_sandbox_kind(obj)
                    if errors:
                        return self._status(422, "Invalid", "; ".join(errors))
                if new_name in store:
                    return self._status(409, "AlreadyExists", f"{new_name} already exists")
                obj["metadata"].update(namespace=NAMESPACE, uid=str(uuid.uuid4()),
                                       creationTimestamp="2026-01-01T00:00:00Z")
                store[new_name] = obj
                return 201, obj
            if method == "PATCH" and name is not None:
                if content_type != "application/merge-patch+json":
                    return self._status(415, "UnsupportedMediaType", str(content_type))
                if name not in store:
                    return self._status(404, "NotFound", f"{name} not found")
                patch = json.loads(raw)
                ann = patch.get("metadata", {}).get("annotations", {})
                store[name]["metadata"].setdefault("annotations", {}).update(ann)
                return 200, store[name]
            if method == "DELETE" and name is not None:
                if name not in store:
                    return self._status(404, "NotFound", f"{name} not found")
                del store[name]
                return 200, self._status(200, "", "deleted")[1] | {"status": "Success"}
            return self._status(405, "MethodNotAllowed", method)

    # --- what the test does in the controller's place ------------------------------------

    def coll(self, res):
        prefix = {"sandboxclaims": "/apis/extensions.agents.x-k8s.io/v1beta1",
                  "sandboxes": "/apis/agents.x-k8s.io/v1beta1", "secrets": "/api/v1",
                  "configmaps": "/api/v1"}[res]
        return f"{prefix}/namespaces/{NAMESPACE}/{res}"

    def get(self, res, name):
        with self.lock:
            return json.loads(json.dumps(self.objects.get(self.coll(res), {}).get(name)))

    def names(self, res):
        with self.lock:
            return sorted(self.objects.get(self.coll(res), {}))

    def bind_claim(self, name, ip="127.0.0.1", ready=True, sandbox=None, node="node-a"):
        """What agent-sandbox's controller does: adopt a sandbox and report it ready."""
        sandbox = sandbox or f"toolbox-hosts-{name[-5:]}"
        with self.lock:
            claim = self.objects[self.coll("sandboxclaims")][name]
            claim["status"] = {
                "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                "reason": "SandboxReady" if ready else "Pending",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "sandbox": {"name": sandbox, "podIPs": [ip]},
            }
            self.objects.setdefault(self.coll("sandboxes"), {})[sandbox] = {
                "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                "metadata": {"name": sandbox, "namespace": NAMESPACE},
                "status": {"nodeName": node, "podIPs": [ip]},
            }


def free_port() -> int:
    return free_ports(1)[0]


_HANDED_OUT: set[int] = set()


def free_ports(n: int) -> list[int]:
    """n free ports on 127.0.0.1, none handed out before in this run. Every process of the
    tests listens on one of these, never on port 0: the kernel readily gives a port just
    released here to the next bind to port 0, which would take a port a test has planned
    for a later process."""
    held, ports = [], []
    try:
        for _ in range(n + 50):  # bounded: a port handed out before is skipped
            if len(ports) == n:
                break
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)  # held open, so the next bind gets another port
            port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                ports.append(port)
        if len(ports) < n:
            raise RuntimeError(f"found {len(ports)} of {n} free ports")
        _HANDED_OUT.update(ports)
        return ports
    finally:
        for s in held:
            s.close()


def call(url, method="GET", body=None, token=None, timeout=10):
    """(status, headers, JSON body) of one HTTP call."""
    headers = {}
    data = None
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, e.headers, json.loads(raw) if raw else {}


def handoff_name(port: int) -> str:
    """The abstract hand-off socket of the test pod on `port` (unique on this machine, as
    the tests share one network namespace)."""
    return f"@tbk8s-{os.getpid()}-{port}"


def wait_for_line(proc, needle, tries=POLL_TRIES * 2):
    """Reads the process's stderr until a line contains `needle` (bounded)."""
    seen = []
    for _ in range(tries):
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"no line with {needle!r} from {proc.args}: {seen!r}")


def drain(proc):
    """Keeps reading the process's stderr so it never blocks on a full pipe; the lines are
    kept on `proc.lines` for failure messages."""
    proc.lines = []

    def run():
        for line in proc.stderr:
            proc.lines.append(line)

    threading.Thread(target=run, daemon=True).start()


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def fake_kube():
    fake = FakeKube()
    yield fake
    fake.close()


@pytest.fixture
def tokens(tmp_path):
    paths = {}
    for name, value in [("api", API_TOKEN), ("pool", "pool-token-0123456789"),
                        ("placement", "placement-token-0123456789"),
                        ("host-key", "host-key-0123456789abcdefghijklmnopqrstuvwxyz")]:
        p = tmp_path / f"{name}-token"
        p.write_text(value + "\n")
        paths[name] = (str(p), value)
    return paths


class Adapter:
    def __init__(self, proc, url, token):
        self.proc, self.url, self.token = proc, url, token

    def call(self, path, method="GET", body=None, token="default"):
        return call(self.url + path, method, body,
                    self.token if token == "default" else token)

    def ensure(self, sid, body=None):
        return self.call(f"/v1/sessions/{sid}:ensure", "POST", body if body is not None else {})


@pytest.fixture
def start_adapter(fake_kube, tokens):
    procs = []

    def start(host_port: int, gate_port: int) -> Adapter:
        proc = subprocess.Popen(
            [sys.executable, ADAPTER, "--listen", f"127.0.0.1:{free_port()}",
             "--api-server", fake_kube.url, "--namespace", NAMESPACE,
             "--api-token-file", tokens["api"][0], "--pool-token-file", tokens["pool"][0],
             "--host-key-file", tokens["host-key"][0],
             "--token-file", tokens["placement"][0], "--warm-pool", "toolbox-hosts",
             "--host-port", str(host_port), "--assign-port", str(gate_port),
             "--timeout", "3"],
            stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        line = wait_for_line(proc, "listening on")
        drain(proc)
        url = re.search(r"http://\S+", line).group(0)
        return Adapter(proc, url, tokens["placement"][1])

    yield start
    for p in procs:
        stop(p)


@pytest.fixture
def start_boot(tmp_path, tokens):
    """Starts a warm pod's two containers on 127.0.0.1: toolbox-k8s-gate on `gate_port` (the
    pool token's only holder) and toolbox-k8s-boot on `port` with `toolbox` (default: the
    fake session server of fake_toolbox.py). A later start on the same ports is a restart of
    the `host` container: the gate keeps running, as it does in the pod. Returns the boot
    process; its gate is `start_boot.gates[gate_port]`."""
    procs = []
    gates: dict[int, subprocess.Popen] = {}
    # What the gate's container gets from the toolbox-store Secret (envFrom).
    store_env = {"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIATESTTESTTEST",
                 "AWS_SECRET_ACCESS_KEY": "store-secret-" + os.urandom(12).hex()}

    def start(port: int, gate_port: int, toolbox: str | None = None, epoch: str = "next",
              store: str | None = None, workspace: str | None = None):
        if toolbox is None:
            toolbox = str(tmp_path / "fake-toolbox")
            with open(toolbox, "w") as f:
                f.write(f"#!/bin/sh\nexec {sys.executable} {FAKE_TOOLBOX} \"$@\"\n")
            os.chmod(toolbox, 0o755)
        workspace = workspace or str(tmp_path / f"ws-{port}")
        os.makedirs(workspace, exist_ok=True)
        store = store or f"file://{tmp_path / 'store'}"
        handoff = handoff_name(port)
        if gate_port not in gates:
            gate = subprocess.Popen(
                [sys.executable, GATE, "--listen", f"127.0.0.1:{gate_port}",
                 "--pool-token-file", tokens["pool"][0], "--handoff-socket", handoff,
                 "--host-port", str(port)],
                stderr=subprocess.PIPE, text=True, env=os.environ | store_env)
            procs.append(gate)
            wait_for_line(gate, "listening on")
            drain(gate)
            gates[gate_port] = gate
        proc = subprocess.Popen(
            [sys.executable, BOOT, "--listen", f"127.0.0.1:{port}",
             "--handoff-socket", handoff, "--state-store", store,
             "--workspace", workspace, "--toolbox", toolbox, "--epoch", epoch,
             "--wipe-workspace"],
            stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        wait_for_line(proc, "waiting for a session")
        drain(proc)
        return proc

    start.gates = gates
    start.store_env = store_env
    yield start
    for p in reversed(procs):
        stop(p)


def poll(fn, until, what):
    """Calls fn until `until(result)` (bounded); returns the last result."""
    result = None
    for _ in range(POLL_TRIES):
        result = fn()
        if until(result):
            return result
        time.sleep(POLL_SLEEP)
    raise AssertionError(f"{what}: still {result!r} after {POLL_TRIES} tries")
