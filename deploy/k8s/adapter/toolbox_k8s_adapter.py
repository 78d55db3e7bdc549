#!/usr/bin/env python3
"""The placement adapter for Kubernetes: the placement contract over agent-sandbox.

One `SandboxClaim` per session (kubernetes-sigs/agent-sandbox, extensions.agents.x-k8s.io/
v1beta1) owns the session's server: the claim takes a sandbox from the warm pool, whose pod
runs `toolbox-k8s-boot` waiting for an assignment; this adapter hands it the session id and
the session server's token, and the boot program turns into
`toolbox serve --session SID --epoch next ...`. The adapter keeps no state of its own: the
claim (and its annotations) says where a session runs, and a per-session record (a
ConfigMap) holds a random nonce and, once parked, the last epoch. Any replica can answer
any call, and a restart loses nothing.

The session server's token is not stored anywhere: it is an HMAC of the session id and the
record's nonce under a key mounted from a Secret (`--host-key-file`). So the adapter needs
no API access to Secrets at all (RBAC cannot narrow a Role by label, and per-session names
are not known in advance: a Role that lets it keep per-session Secrets lets it read every
Secret of the namespace). Deleting a session's record retires its token: the next record has
another nonce.

Endpoints (docs/scale-out.md, "Kubernetes"):
  POST /v1/sessions/{sid}:ensure   {} or {"stale_epoch": N}
  POST /v1/sessions/{sid}:park
  GET  /v1/sessions/{sid}
  GET  /v1/sessions

Standard library only: it talks to the API server over plain HTTPS with the pod's service
account, so the image needs nothing but Python.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CLAIMS_API = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxclaims"
SANDBOXES_API = "/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes"
RECORDS_API = "/api/v1/namespaces/{ns}/configmaps"

# Labels select what this adapter made; annotations carry what labels cannot (a session id
# may be 128 characters and contain '.' or '_' in places a label value may not).
MANAGED_BY = ("app.kubernetes.io/managed-by", "toolbox-placement")
ANN_SESSION = "toolbox.dev/session"
ANN_EPOCH = "toolbox.dev/epoch"
ANN_NODE = "toolbox.dev/node"

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MAX_BODY = 64 * 1024
# Seconds a caller should wait before asking again.
RETRY_PLACING = 2
RETRY_STARTING = 1

_SID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_NONCE = re.compile(r"[0-9a-f]{32}")
# The shortest key for session servers' tokens accepted: 32 characters of a random token
# (the README makes 43).
MIN_HOST_KEY = 32


class Fail(Exception):
    """An answer other than success: an HTTP status, a message, and maybe Retry-After."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def parse_sid(raw: str) -> str:
    """A session id as the contract allows it, or a 400 naming what was wrong."""
    if not _SID.fullmatch(raw):
        raise Fail(
            400,
            f"session id {raw[:140]!r} is not valid: 1-128 of A-Z a-z 0-9 . _ -",
        )
    if raw.startswith("."):
        raise Fail(400, f"session id {raw!r} is not valid: it may not start with '.'")
    return raw


def claim_name(sid: str) -> str:
    """The SandboxClaim (and record) name of a session: a DNS-1123 label, unique per sid.

    A readable slug of the id (lowercased, runs of anything else turned into one '-') is
    cut to 40 characters, and 12 hex digits of the SHA-256 of the exact id follow it, so ids
    that differ only in case or punctuation get different names. It starts with a letter
    (`tb-`), so it is a DNS-1035 label too, which Services need. At most 56 characters.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", sid.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(sid.encode()).hexdigest()[:12]
    return f"tb-{slug}-{digest}" if slug else f"tb-{digest}"


def host_token(key: str, sid: str, nonce: str) -> str:
    """A session server's token: HMAC-SHA256 under the adapter's key of the record's nonce
    and the session id (NUL cannot occur in either, so the pair is unambiguous), as 43
    characters of URL-safe base64."""
    message = b"toolbox host token v1\0" + nonce.encode() + b"\0" + sid.encode()
    digest = hmac.new(key.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def parse_ensure_body(raw: bytes) -> int | None:
    """The `:ensure` body: `{}` or `{"stale_epoch": N}`; returns N or None."""
    if not raw.strip():
        return None
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise Fail(400, f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise Fail(400, "the body must be a JSON object: {} or {\"stale_epoch\": N}")
    unknown = sorted(set(body) - {"stale_epoch"})
    if unknown:
        raise Fail(400, f"unknown field(s) in the body: {', '.join(unknown)}")
    stale = body.get("stale_epoch")
    if stale is None:
        return None
    if isinstance(stale, bool) or not isinstance(stale, int) or stale < 0:
        raise Fail(400, f"stale_epoch must be a non-negative integer, not {stale!r}")
    return stale


class Kube:
    """Just enough of a Kubernetes API client: JSON over HTTP(S), a bearer token."""

    def __init__(self, base: str, namespace: str, token_file: str | None, ca_file: str | None,
                 timeout: float):
        self.base = base.rstrip("/")
        self.namespace = namespace
        self.token_file = token_file
        self.timeout = timeout
        self.context = None
        if self.base.startswith("https://"):
            self.context = ssl.create_default_context(cafile=ca_file) if ca_file else \
                ssl.create_default_context()

    def path(self, template: str, name: str | None = None) -> str:
        p = template.format(ns=urllib.parse.quote(self.namespace, safe=""))
        return p if name is None else f"{p}/{urllib.parse.quote(name, safe='')}"

    def request(self, method: str, path: str, body=None,
                content_type: str = "application/json") -> tuple[int, dict]:
        headers = {"Accept": "application/json"}
        if self.token_file:
            # Read every time: projected service account tokens are rotated on disk.
            with open(self.token_file, encoding="utf-8") as f:
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout,
                                        context=self.context) as resp:
                return resp.status, _json_or_empty(resp.read(4 << 20))
        except urllib.error.HTTPError as e:
            return e.code, _json_or_empty(e.read(1 << 20))
        except (OSError, ValueError) as e:
            raise Fail(503, f"the Kubernetes API server did not answer: {e}",
                       RETRY_PLACING) from None

    def expect(self, what: str, status: int, obj: dict, *ok: int) -> dict:
        if status not in ok:
            reason = obj.get("message") or obj.get("reason") or f"HTTP {status}"
            raise Fail(502, f"Kubernetes refused to {what}: {reason}")
        return obj


def _json_or_empty(raw: bytes) -> dict:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _annotations(obj: dict) -> dict:
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    return ann if isinstance(ann, dict) else {}


def _epoch_of(obj: dict | None) -> int:
    if not obj:
        return 0
    raw = _annotations(obj).get(ANN_EPOCH, "0")
    return int(raw) if isinstance(raw, str) and raw.isdigit() else 0


def claim_ready(claim: dict) -> tuple[bool, str | None, str]:
    """Whether the claim's sandbox is Ready, its first pod IP, and the sandbox's name."""
    status = claim.get("status") or {}
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    sandbox = status.get("sandbox") or {}
    ips = [ip for ip in sandbox.get("podIPs") or [] if isinstance(ip, str)]
    ip = None
    for candidate in ips:
        try:
            ip = str(ipaddress.ip_address(candidate))
            break
        except ValueError:
            continue
    return ready, ip, str(sandbox.get("name") or "")


class Placement:
    """The contract's operations over claims and records."""

    def __init__(self, kube: Kube, warm_pool: str, host_port: int, assign_port: int,
                 pool_token_file: str, host_key: str, host_timeout: float):
        self.kube = kube
        self.warm_pool = warm_pool
        self.host_port = host_port
        self.assign_port = assign_port
        self.pool_token_file = pool_token_file
        self.host_key = host_key
        self.host_timeout = host_timeout

    # --- objects -------------------------------------------------------------------------

    def _get(self, api: str, name: str) -> dict | None:
        status, obj = self.kube.request("GET", self.kube.path(api, name))
        if status == 404:
            return None
        return self.kube.expect(f"read {name}", status, obj, 200)

    def _owned(self, obj: dict | None, sid: str, name: str) -> dict | None:
        if obj is not None and _annotations(obj).get(ANN_SESSION) != sid:
            # Twelve hex digits of SHA-256 make this a collision nobody will meet by
            # chance; say so rather than hand one session's server to another.
            raise Fail(409, f"{name} belongs to another session; refusing to share it")
        return obj

    def _record(self, sid: str, name: str, create: bool) -> tuple[dict | None, str | None]:
        """The session's record and its session server token (None, None when there is no
        record)."""
        record = self._owned(self._get(RECORDS_API, name), sid, name)
        if record is None and create:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "labels": dict([MANAGED_BY]),
                    "annotations": {ANN_SESSION: sid},
                },
                "data": {"nonce": secrets.token_hex(16)},
            }
            status, obj = self.kube.request("POST", self.kube.path(RECORDS_API), body)
            if status == 409:  # another call made it first: use theirs
                record = self._owned(self._get(RECORDS_API, name), sid, name)
            else:
                record = self.kube.expect(f"create the record {name}", status, obj, 201, 200)
        if record is None:
            return None, None
        nonce = (record.get("data") or {}).get("nonce")
        if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce):
            raise Fail(502, f"the record {name} has no usable nonce")
        return record, host_token(self.host_key, sid, nonce)

    def _annotate(self, api: str, name: str, values: dict) -> None:
        patch = {"metadata": {"annotations": values}}
        status, obj = self.kube.request("PATCH", self.kube.path(api, name), patch,
                                        "application/merge-patch+json")
        self.kube.expect(f"annotate {name}", status, obj, 200)

    def _delete_claim(self, name: str) -> None:
        status, obj = self.kube.request("DELETE", self.kube.path(CLAIMS_API, name))
        self.kube.expect(f"delete the claim {name}", status, obj, 200, 202, 404)

    # --- the session server --------------------------------------------------------------

    def host_url(self, ip: str, port: int | None = None) -> str:
        host = f"[{ip}]" if ":" in ip else ip
        return f"http://{host}:{port or self.host_port}"

    def _host_call(self, method: str, url: str, token: str | None, body=None):
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.host_timeout) as resp:
                return resp.status, _json_or_empty(resp.read(1 << 20))
        except urllib.error.HTTPError as e:
            return e.code, _json_or_empty(e.read(1 << 20))
        except (OSError, ValueError):
            return None, {}

    def probe(self, url: str, sid: str, token: str) -> tuple[str, int]:
        """What answers at `url`: ("host", epoch), ("waiting", 0) or ("down", 0)."""
        status, body = self._host_call("GET", f"{url}/api/health", token)
        if status is None:
            return "down", 0
        if status == 200:
            # `session_server`, or `host`, its old name, from a toolbox that predates it.
            server = body.get("session_server") or body.get("host") or {}
            epoch = server.get("epoch")
            if server.get("session") == sid and isinstance(epoch, int) and epoch > 0:
                return "host", epoch
            return "other", 0
        if body.get("status") == "waiting":
            return "waiting", 0
        return "other", 0

    def _assign(self, ip: str, sid: str, token: str) -> None:
        """Hands the session to the pod's gate (its second container, the only one that
        holds the pool token), which passes it to the waiting boot program."""
        with open(self.pool_token_file, encoding="utf-8") as f:
            pool_token = f.read().strip()
        gate = self.host_url(ip, self.assign_port)
        status, body = self._host_call("POST", f"{gate}/assign", pool_token,
                                       {"sid": sid, "token": token})
        if status not in (200, 202):
            why = body.get("error") or (f"HTTP {status}" if status else "no answer")
            raise Fail(503, f"the sandbox did not take the session: {why}", RETRY_STARTING)

    def _node(self, sandbox: str) -> str:
        if not sandbox:
            return ""
        try:
            obj = self._get(SANDBOXES_API, sandbox)
        except Fail:
            return sandbox
        node = ((obj or {}).get("status") or {}).get("nodeName")
        return node if isinstance(node, str) and node else sandbox

    # --- the contract --------------------------------------------------------------------

    def ensure(self, sid: str, stale_epoch: int | None) -> dict:
        name = claim_name(sid)
        _, token = self._record(sid, name, create=True)
        claim = self._owned(self._get(CLAIMS_API, name), sid, name)
        if claim is None:
            body = {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxClaim",
                "metadata": {
                    "name": name,
                    "labels": dict([MANAGED_BY]),
                    "annotations": {ANN_SESSION: sid},
                },
                "spec": {"warmPoolRef": {"name": self.warm_pool}},
            }
            status, obj = self.kube.request("POST", self.kube.path(CLAIMS_API), body)
            if status != 409:
                self.kube.expect(f"create the claim {name}", status, obj, 201, 200)
            raise Fail(503, f"placing session {sid}: claim {name} made, waiting for a sandbox",
                       RETRY_PLACING)
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            raise Fail(503, f"the previous sandbox of {sid} is being removed", RETRY_PLACING)
        ready, ip, sandbox = claim_ready(claim)
        if not ready or ip is None:
            raise Fail(503, f"placing session {sid}: waiting for claim {name}'s sandbox to be "
                            "ready (the warm pool may be empty)", RETRY_PLACING)
        url = self.host_url(ip)
        state, epoch = self.probe(url, sid, token)
        if state == "host":
            ann = _annotations(claim)
            node = ann.get(ANN_NODE) or self._node(sandbox)
            if ann.get(ANN_EPOCH) != str(epoch) or ann.get(ANN_NODE) != node:
                self._annotate(CLAIMS_API, name, {ANN_EPOCH: str(epoch), ANN_NODE: node})
            return {"sid": sid, "url": url, "token": token, "epoch": epoch, "node": node}
        if state == "waiting":
            self._assign(ip, sid, token)
            raise Fail(503, f"session {sid}: its session server is starting", RETRY_STARTING)
        recorded = _epoch_of(claim)
        if state == "down" and stale_epoch is not None and recorded and \
                stale_epoch >= recorded:
            # This claim's session server answered once at that epoch and now answers
            # neither the router nor us: a lost node, which Kubernetes may take minutes to
            # notice. A new claim gets a sandbox from the warm pool now; the epochs fence
            # the old session server if it was only cut off.
            self._delete_claim(name)
            raise Fail(503, f"the session server of {sid} (epoch {recorded}) is unreachable; "
                            "placing the session on a new sandbox", RETRY_PLACING)
        if state == "other":
            raise Fail(503, f"session {sid}: {url} answers, but not as this session's session "
                            "server (one being replaced, or the token does not match)",
                       RETRY_PLACING)
        raise Fail(503, f"session {sid}: its session server is not answering yet", RETRY_STARTING)

    def park(self, sid: str) -> dict:
        name = claim_name(sid)
        claim = self._owned(self._get(CLAIMS_API, name), sid, name)
        record, token = self._record(sid, name, create=False)
        if claim is None and record is None:
            raise Fail(404, f"no session {sid}")
        if claim is not None:
            ready, ip, _ = claim_ready(claim)
            if ready and ip is not None and token:
                # The session server syncs a last time and exits; deleting the claim after
                # this only removes an idle pod (and a SIGTERM makes a session server sync
                # too).
                self._host_call("POST", f"{self.host_url(ip)}/api/sessions/"
                                f"{urllib.parse.quote(sid, safe='')}/park", token, {})
            epoch = _epoch_of(claim)
            if record is not None and epoch:
                self._annotate(RECORDS_API, name, {ANN_EPOCH: str(epoch)})
            self._delete_claim(name)
        return {"sid": sid, "state": "parked"}

    def _describe(self, sid: str, claim: dict | None, record: dict | None) -> dict:
        if claim is not None:
            ready, ip, sandbox = claim_ready(claim)
            epoch = _epoch_of(claim)
            state = "running" if ready and ip and epoch else "placing"
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                state = "placing"
            node = _annotations(claim).get(ANN_NODE) or sandbox
            return {"sid": sid, "state": state, "epoch": epoch or _epoch_of(record),
                    "node": node}
        return {"sid": sid, "state": "parked", "epoch": _epoch_of(record), "node": ""}

    def status(self, sid: str) -> dict:
        name = claim_name(sid)
        claim = self._owned(self._get(CLAIMS_API, name), sid, name)
        record = self._owned(self._get(RECORDS_API, name), sid, name)
        if claim is None and record is None:
            raise Fail(404, f"no session {sid}")
        return self._describe(sid, claim, record)

    def _list(self, api: str) -> dict[str, dict]:
        selector = urllib.parse.quote(f"{MANAGED_BY[0]}={MANAGED_BY[1]}", safe="")
        status, obj = self.kube.request("GET", f"{self.kube.path(api)}?labelSelector={selector}")
        out = {}
        for item in self.kube.expect("list", status, obj, 200).get("items") or []:
            sid = _annotations(item).get(ANN_SESSION)
            if isinstance(sid, str) and _SID.fullmatch(sid) and \
                    (item.get("metadata") or {}).get("name") == claim_name(sid):
                out[sid] = item
        return out

    def sessions(self) -> dict:
        claims = self._list(CLAIMS_API)
        records = self._list(RECORDS_API)
        sids = sorted(set(claims) | set(records))
        return {"sessions": [self._describe(s, claims.get(s), records.get(s)) for s in sids]}


class Handler(BaseHTTPRequestHandler):
    """Routes the contract's four endpoints; every answer is JSON."""

    server_version = "toolbox-k8s-adapter"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # one line per request on stderr, no client data
        sys.stderr.write("toolbox-k8s-adapter: %s %s\n" % (self.command,
                                                            self.path.split("?")[0][:200]))

    def _send(self, status: int, body: dict, retry_after: int | None = None) -> None:
        data = json.dumps(body).encode()
        if status >= 400:
            # A refused request's body may be unread: never reuse the connection after it.
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        expected = self.server.placement_token
        if expected is None:
            return True
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), expected.encode())

    def _body(self) -> bytes:
        raw_len = self.headers.get("Content-Length") or "0"
        if not raw_len.isdigit():
            raise Fail(400, "Content-Length is not a number")
        length = int(raw_len)
        if length > MAX_BODY:
            if length <= 16 * MAX_BODY:
                # Read it (bounded) so the client gets the answer, not a reset connection.
                self.rfile.read(length)
            raise Fail(413, f"the body is over {MAX_BODY} bytes")
        return self.rfile.read(length)

    def _handle(self, method: str) -> None:
        try:
            body = self._body() if method == "POST" else b""
            if not self._authorized():
                raise Fail(401, "this adapter needs Authorization: Bearer <placement token>")
            path = urllib.parse.urlsplit(self.path).path
            placement: Placement = self.server.placement
            if path == "/v1/sessions" and method == "GET":
                return self._send(200, placement.sessions())
            if not path.startswith("/v1/sessions/"):
                raise Fail(404, f"no such endpoint: {method} {path[:200]}")
            rest = urllib.parse.unquote(path[len("/v1/sessions/"):])
            action = None
            if method == "POST":
                rest, sep, action = rest.rpartition(":")
                if not sep or action not in ("ensure", "park"):
                    raise Fail(404, "POST /v1/sessions/{sid}:ensure or :park")
            elif method != "GET":
                raise Fail(405, f"{method} is not allowed here")
            sid = parse_sid(rest)
            if action == "ensure":
                stale = parse_ensure_body(body)
                return self._send(200, placement.ensure(sid, stale))
            if action == "park":
                return self._send(202, placement.park(sid))
            return self._send(200, placement.status(sid))
        except Fail as e:
            self._send(e.status, {"error": e.message}, e.retry_after)
        except Exception as e:  # noqa: BLE001 - an answer beats a dropped connection
            sys.stderr.write(f"toolbox-k8s-adapter: internal error: {e!r}\n")
            self._send(500, {"error": f"internal error: {type(e).__name__}"})

    def do_GET(self):  # noqa: N802
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")


def parse_listen(raw: str) -> tuple[str, int]:
    host, sep, port = raw.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise SystemExit(f"--listen {raw!r}: expected IP:PORT")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise SystemExit(f"--listen {raw!r}: {host!r} is not an IP address") from None
    return host, int(port)


def read_token(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as e:
        raise SystemExit(f"{flag} {path}: {e}") from None
    if not token:
        raise SystemExit(f"{flag} {path}: the file is empty")
    return token


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="toolbox-k8s-adapter", description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:8080", help="IP:PORT to serve the contract on")
    p.add_argument("--token-file", help="the placement token callers must send (required "
                                        "beyond loopback)")
    p.add_argument("--pool-token-file", required=True,
                   help="the token the warm pool's boot program takes assignments with")
    p.add_argument("--warm-pool", default="toolbox-hosts", help="the SandboxWarmPool's name")
    p.add_argument("--host-key-file", required=True,
                   help="the key session server tokens are derived from (first line, at least "
                        f"{MIN_HOST_KEY} characters)")
    p.add_argument("--host-port", type=int, default=7878, help="the port session servers listen on")
    p.add_argument("--assign-port", type=int, default=7879,
                   help="the port of the session server pods' gate, which takes assignments")
    p.add_argument("--namespace", help="default: the service account's namespace")
    p.add_argument("--api-server", help="default: https://$KUBERNETES_SERVICE_HOST:PORT")
    p.add_argument("--api-token-file", help=f"default: {SA_DIR}/token")
    p.add_argument("--api-ca-file", help=f"default: {SA_DIR}/ca.crt")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per API/session server call")
    a = p.parse_args(argv)

    host, port = parse_listen(a.listen)
    token = read_token(a.token_file, "--token-file") if a.token_file else None
    if token is None and not ipaddress.ip_address(host).is_loopback:
        raise SystemExit("--listen beyond loopback needs --token-file")
    read_token(a.pool_token_file, "--pool-token-file")  # fail at start, not on first call
    # Read once: every replica must derive the same tokens, so a new key means parking the
    # sessions and restarting the adapters together.
    host_key = read_token(a.host_key_file, "--host-key-file")
    if len(host_key) < MIN_HOST_KEY:
        raise SystemExit(f"--host-key-file {a.host_key_file}: the key is {len(host_key)} "
                         f"characters; at least {MIN_HOST_KEY}")
    namespace = a.namespace
    if namespace is None:
        try:
            with open(f"{SA_DIR}/namespace", encoding="utf-8") as f:
                namespace = f.read().strip()
        except OSError:
            raise SystemExit("--namespace is needed outside a pod") from None
    api = a.api_server
    if api is None:
        h, pt = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
            "KUBERNETES_SERVICE_PORT", "443")
        if not h:
            raise SystemExit("--api-server is needed outside a pod")
        api = f"https://{'[' + h + ']' if ':' in h else h}:{pt}"
    in_pod = os.path.exists(f"{SA_DIR}/token")
    api_token = a.api_token_file or (f"{SA_DIR}/token" if in_pod else None)
    api_ca = a.api_ca_file or (f"{SA_DIR}/ca.crt" if in_pod else None)
    for flag, value in (("--host-port", a.host_port), ("--assign-port", a.assign_port)):
        if not 0 < value < 65536:
            raise SystemExit(f"{flag} {value}: must be 1-65535")

    kube = Kube(api, namespace, api_token, api_ca, a.timeout)
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.placement = Placement(kube, a.warm_pool, a.host_port, a.assign_port,
                                 a.pool_token_file, host_key, a.timeout)
    server.placement_token = token
    bound = server.server_address
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    print(f"toolbox-k8s-adapter: listening on http://{shown}:{bound[1]} (namespace {namespace}, "
          f"warm pool {a.warm_pool})", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
