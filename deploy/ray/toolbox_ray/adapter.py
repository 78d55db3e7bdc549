"""The placement adapter: the placement contract (docs/scale-out.md) as a Ray Serve app.

- ``POST /v1/sessions/{sid}:ensure`` gets the session's actor by name or creates it; Ray's
  name uniqueness makes this the directory, and a lost create race is a get. 503 with
  ``Retry-After`` when no ``toolbox_slot`` is free within ``place_timeout_s``.
- ``POST /v1/sessions/{sid}:park``: the session server syncs a last time and exits, the
  actor ends.
- ``GET /v1/sessions/{sid}``, ``GET /v1/sessions``: running, placing or parked.
- ``POST /v1/nodes/{node_id}:drain`` (beyond the contract): Ray stops placing on the node,
  and every session on it is parked, to be resumed elsewhere by its next ``:ensure``.

Serve's model multiplexing is not used: it is cache affinity and falls back to any replica,
which could start a second live copy of a session. Every replica here asks Ray for the one
named actor instead, so replicas hold no state and any number of them agree.

Session server tokens never leave the adapter's replicas. Ray has no caller authentication,
so whatever an actor holds or answers, any Ray client can read: a session server's actor
knows only a nonce and the SHA-256 of the token, which the replica derives from the nonce
with a key of its own (:class:`HostKeys`) and hands to the router alone. The key comes from the
placement token's file, read on the replica's node, or from a key file the replicas make in
their node's Ray session dir; neither travels through Ray.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import secrets
from typing import Any

import ray
from ray import serve
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from starlette.requests import Request
from starlette.responses import JSONResponse

from .config import (
    ACTOR_PREFIX,
    NAMESPACE,
    SLOT,
    Config,
    ConfigError,
    actor_name,
    is_loopback,
    parse_sid,
    read_token_file,
)
from .host import NONCE, REGISTRY_NAME, Registry, SessionHost

SessionHostActor = ray.remote(SessionHost)
RegistryActor = ray.remote(Registry)

_MAX_BODY = 64 * 1024
_PROBE_S = 0.2
"""How long one look at an actor waits before asking again (see ``ensure``)."""


def actor_options(sid: str) -> dict[str, Any]:
    """How a session's actor is created: named and detached (the directory), restarted
    forever on another node, calls never retried, one slot, spread over the nodes."""
    return {
        "name": actor_name(sid),
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "max_restarts": -1,
        "max_task_retries": 0,
        "num_cpus": 0,
        "resources": {SLOT: 1},
        "scheduling_strategy": "SPREAD",
        # Threads: info() and park() answer while the session server starts or syncs.
        "max_concurrency": 8,
    }


class HostKeys:
    """Session server tokens: ``HMAC-SHA256(key, sid + NUL + nonce)`` in hex, where the nonce
    is the session server's own (its actor made it) and the key is this adapter's.
    Deterministic, so every replica, before and after a restart, answers the same token for
    the same session server; and a new nonce (a new session server) makes a new token."""

    _LABEL = b"toolbox-ray host tokens v1"

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ConfigError("the adapter's secret must be 16 bytes or more")
        self._key = hmac.new(secret, self._LABEL, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "HostKeys(..)"

    def __reduce__(self) -> Any:
        # Never serialised: not into a Ray call's answer, not anywhere.
        raise TypeError("HostKeys holds the adapter's key, which never leaves its process")

    def token(self, sid: str, nonce: str) -> str:
        """The bearer token of session `sid`'s session server with `nonce`."""
        if not NONCE.fullmatch(nonce):
            raise ValueError(f"not a session server nonce: {nonce!r}")
        return hmac.new(self._key, f"{sid}\0{nonce}".encode(), hashlib.sha256).hexdigest()

    def digest(self, sid: str, nonce: str) -> str:
        """What the session server is started with (``--token-sha256``): the token's SHA-256
        in hex."""
        return hashlib.sha256(self.token(sid, nonce).encode()).hexdigest()


KEY_FILE = "toolbox-ray-adapter.key"
"""The adapter's own key, when no placement token is configured: in the Ray session dir of
the replica's node (session servers do not see Ray's folders), made once by whichever
replica comes first, so it outlives a replica's restart (not the cluster's)."""


def own_key() -> bytes:
    """This node's adapter key (see :data:`KEY_FILE`), made if missing."""
    node = ray._private.worker.global_worker.node
    path = os.path.join(node.get_session_dir_path(), KEY_FILE)
    for _ in range(50):
        try:
            with open(path, "rb") as f:
                key = f.read(64)
            if len(key) == 32:
                return key
        except FileNotFoundError:
            pass
        # Written whole under another name, then linked: a racing replica sees either no
        # file or the whole key, and the first link wins.
        tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(32))
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    raise RuntimeError(f"cannot read or make the adapter key {path}")


def _json(status: int, body: Any, retry_after: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse(body, status_code=status, headers=headers)


class Placement:
    """The contract's operations over Ray (usable without Serve, e.g. from a driver)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.cfg = Config.from_dict(config)
        self._cfg_dict = self.cfg.to_dict()
        # Read here, in the replica's process, on its node: never an argument through Ray.
        self.token: str | None = None
        if self.cfg.placement_token_file is not None:
            self.token = read_token_file(self.cfg.placement_token_file)
            self.keys = HostKeys(self.token.encode())
        else:
            self.keys = HostKeys(own_key())
        here = ray.get_runtime_context().get_node_id()
        self.registry = RegistryActor.options(
            name=REGISTRY_NAME,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=-1,
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
        ).remote()

    def __reduce__(self) -> Any:
        raise TypeError("a Placement holds the adapter's key and token, which never leave its process")

    def unavailable(self, why: str) -> JSONResponse:
        return _json(503, {"error": why}, retry_after=self.cfg.retry_after_s)

    def _get_or_create(self, sid: str) -> tuple[Any, bool]:
        name = actor_name(sid)
        try:
            return ray.get_actor(name, namespace=NAMESPACE), False
        except ValueError:
            pass
        try:
            return SessionHostActor.options(**actor_options(sid)).remote(sid, self._cfg_dict), True
        except ValueError:
            # Another replica (or call) created it between our get and our create.
            return ray.get_actor(name, namespace=NAMESPACE), False

    @staticmethod
    def _get(sid: str) -> Any | None:
        try:
            return ray.get_actor(actor_name(sid), namespace=NAMESPACE)
        except ValueError:
            return None

    async def ensure(self, sid: str, stale_epoch: int | None) -> JSONResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.place_timeout_s
        created_here = None
        while True:
            handle, created = await asyncio.to_thread(self._get_or_create, sid)
            if created:
                created_here = handle
            left = deadline - loop.time()
            if left <= 0:
                if created_here is not None:
                    # Nothing of it ran: free the name rather than leave it waiting.
                    ray.kill(created_here, no_restart=True)
                    return self.unavailable(f"no {SLOT} free within {self.cfg.place_timeout_s:g} s")
                return self.unavailable(f"session {sid} is being placed again (its node was lost) and waits for a {SLOT}")
            # Short waits, asked again: a call made while Ray restarts the actor fails only
            # after seconds, while a new call reaches the new incarnation at once.
            try:
                node = await asyncio.wait_for(handle.node_id.remote(), min(_PROBE_S, left))
            except asyncio.TimeoutError:
                continue
            except RayActorError:
                await asyncio.sleep(0.05)
                continue
            # A running session server answers at once; an actor without one answers the
            # nonce of its next session server, whose token's digest (and only that) goes
            # back to start it.
            offer = None
            try:
                for _ in range(3):
                    info = await asyncio.wait_for(handle.info.remote(stale_epoch, offer), self.cfg.start_timeout_s + 30)
                    if "need" not in info:
                        break
                    offer = {"nonce": info["need"], "digest": self.keys.digest(sid, info["need"])}
            except asyncio.TimeoutError:
                return self.unavailable(f"the session server of session {sid} did not start in time")
            except RayActorError:
                await asyncio.sleep(0.05)
                continue
            if info.get("parking") or "need" in info:
                await asyncio.sleep(0.2)
                continue
            if "error" in info:
                ray.kill(handle, no_restart=True)
                return self.unavailable(f"session {sid}: {info['error']}")
            self.registry.forget.remote(sid)
            return _json(
                200,
                {
                    "sid": sid,
                    "url": info["url"],
                    "token": self.keys.token(sid, info["nonce"]),
                    "epoch": info["epoch"],
                    "node": node,
                },
            )

    async def park(self, sid: str) -> JSONResponse:
        handle = await asyncio.to_thread(self._get, sid)
        if handle is None:
            known = await self.registry.get.remote(sid)
            if known is None:
                return _json(404, {"error": f"unknown session {sid}"})
            return _json(202, {"sid": sid, "state": "parked"})
        try:
            await asyncio.wait_for(handle.node_id.remote(), 1.0)
        except (asyncio.TimeoutError, RayActorError):
            # Not placed (waiting for a slot): nothing runs; its state is in the store.
            ray.kill(handle, no_restart=True)
            return _json(202, {"sid": sid, "state": "parked"})
        try:
            done = await asyncio.wait_for(handle.park.remote(), self.cfg.park_timeout_s + 30)
        except (asyncio.TimeoutError, RayActorError):
            done = {}
        ray.kill(handle, no_restart=True)
        await self.registry.parked.remote(sid, done.get("epoch"), done.get("node") or "")
        return _json(202, {"sid": sid, "state": "parked"})

    async def _status_of(self, sid: str, handle: Any) -> dict[str, Any]:
        try:
            node = await asyncio.wait_for(handle.node_id.remote(), 0.5)
        except (asyncio.TimeoutError, RayActorError):
            return {"sid": sid, "state": "placing", "epoch": None, "node": None}
        try:
            info = await asyncio.wait_for(handle.status.remote(), 2.0)
        except (asyncio.TimeoutError, RayActorError):
            info = {"state": "placing", "epoch": None}
        return {"sid": sid, "state": info["state"], "epoch": info["epoch"], "node": node}

    async def status(self, sid: str) -> JSONResponse:
        handle = await asyncio.to_thread(self._get, sid)
        if handle is not None:
            return _json(200, await self._status_of(sid, handle))
        known = await self.registry.get.remote(sid)
        if known is None:
            return _json(404, {"error": f"unknown session {sid}"})
        return _json(200, known)

    async def list(self) -> JSONResponse:
        names = await asyncio.to_thread(ray.util.list_named_actors, True)
        sids = [
            n["name"][len(ACTOR_PREFIX) :]
            for n in names
            if n.get("namespace") == NAMESPACE and n.get("name", "").startswith(ACTOR_PREFIX)
        ]
        handles = await asyncio.gather(*(asyncio.to_thread(self._get, s) for s in sids))
        rows = await asyncio.gather(*(self._status_of(s, h) for s, h in zip(sids, handles) if h is not None))
        live = {r["sid"] for r in rows}
        parked = [p for p in await self.registry.all.remote() if p["sid"] not in live]
        return _json(200, {"sessions": sorted(rows + parked, key=lambda r: r["sid"])})

    async def drain(self, node: str) -> JSONResponse:
        if len(node) != 56 or any(c not in "0123456789abcdef" for c in node):
            return _json(400, {"error": "node: a Ray node id (56 hex digits) expected"})
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if node not in alive:
            return _json(404, {"error": f"no live node {node}"})
        accepted, why = await asyncio.to_thread(_drain_node, node)
        if not accepted:
            return _json(409, {"error": f"Ray refused to drain the node: {why}"})
        listing = json.loads((await self.list()).body)
        on_node = [s["sid"] for s in listing["sessions"] if s.get("node") == node and s["state"] != "parked"]
        await asyncio.gather(*(self.park(s) for s in on_node))
        return _json(202, {"node": node, "parked": sorted(on_node)})


def _drain_node(node: str) -> tuple[bool, str]:
    """Asks Ray's GCS to stop placing work on `node` (as ``ray drain-node`` does)."""
    from ray.core.generated import autoscaler_pb2

    gcs = ray._raylet.GcsClient(address=ray.get_runtime_context().gcs_address)
    accepted, why = gcs.drain_node(
        node,
        autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        "toolbox: sessions moved off this node",
        0,
    )
    return bool(accepted), str(why)


async def handle_request(placement: Placement, request: Request) -> JSONResponse:
    """Routes one request of the contract."""
    token = placement.token
    if token is not None:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return _json(401, {"error": "a placement token is required"})
    raw = request.scope.get("raw_path", b"").decode("latin-1")
    path = request.scope["path"]
    if "%" in raw:
        return _json(400, {"error": "escaped characters are not valid in a path here"})
    method = request.method
    if path == "/v1/sessions":
        if method != "GET":
            return _json(405, {"error": "GET expected"})
        return await placement.list()
    if path.startswith("/v1/nodes/") and path.endswith(":drain"):
        if method != "POST":
            return _json(405, {"error": "POST expected"})
        return await placement.drain(path[len("/v1/nodes/") : -len(":drain")])
    if not path.startswith("/v1/sessions/"):
        return _json(404, {"error": f"no route {path}"})
    rest = path[len("/v1/sessions/") :]
    sid_text, _, action = rest.partition(":")
    sid = parse_sid(sid_text)
    if sid is None:
        return _json(
            400,
            {"error": "sid: a session id is 1-128 of A-Z a-z 0-9 . _ -, not starting with '.'"},
        )
    if action == "" and method == "GET":
        return await placement.status(sid)
    if action not in ("ensure", "park"):
        return _json(404, {"error": f"no route {path}"})
    if method != "POST":
        return _json(405, {"error": "POST expected"})
    body = await request.body()
    if len(body) > _MAX_BODY:
        return _json(413, {"error": "the body is larger than 64 KiB"})
    try:
        args = json.loads(body) if body.strip() else {}
    except ValueError:
        return _json(400, {"error": "the body is not JSON"})
    if not isinstance(args, dict):
        return _json(400, {"error": "the body must be a JSON object"})
    if action == "park":
        return await placement.park(sid)
    unknown = sorted(set(args) - {"stale_epoch"})
    if unknown:
        return _json(400, {"error": f"unknown fields {unknown}; known: ['stale_epoch']"})
    stale = args.get("stale_epoch")
    if stale is not None and (isinstance(stale, bool) or not isinstance(stale, int) or stale < 0):
        return _json(400, {"error": "stale_epoch must be a non-negative integer"})
    return await placement.ensure(sid, stale)


@serve.deployment(name="toolbox-placement")
class PlacementAdapter:
    """The Serve deployment: a stateless ingress over :class:`Placement`."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.placement = Placement(config)

    async def __call__(self, request: Request) -> JSONResponse:
        return await handle_request(self.placement, request)


def check_listen(config: Config, host: str) -> None:
    """An adapter reachable beyond loopback hands out session server tokens to whoever asks:
    it needs a placement token, and the file must be readable here."""
    if config.placement_token_file is None:
        if not is_loopback(host):
            raise ConfigError(
                f"--host {host}: an adapter listening beyond loopback needs placement_token_file "
                "(anyone who reached it could get every session server's address and token)"
            )
        return
    read_token_file(config.placement_token_file)


def build_app(config: Config, actor_options_: dict[str, Any] | None = None, replicas: int = 1):
    """The Serve application for `config`; `actor_options_` places its replicas (e.g. pinned
    to nodes with a resource of their own)."""
    options: dict[str, Any] = {"num_cpus": 0}
    options.update(actor_options_ or {})
    return PlacementAdapter.options(ray_actor_options=options, num_replicas=replicas).bind(config.to_dict())


def deploy(
    config: Config,
    host: str = "127.0.0.1",
    port: int = 7901,
    actor_options_: dict[str, Any] | None = None,
    replicas: int = 1,
) -> str:
    """Starts Serve's proxy on `host:port` (head node only) and runs the adapter there;
    returns its base URL. Needs ``ray.init`` done. Beyond loopback, `config` must name a
    placement token (ConfigError otherwise, before anything starts)."""
    check_listen(config, host)
    serve.start(proxy_location="HeadOnly", http_options={"host": host, "port": port})
    serve.run(
        build_app(config, actor_options_, replicas),
        name="toolbox-placement",
        route_prefix="/",
    )
    return f"http://{host}:{port}"
