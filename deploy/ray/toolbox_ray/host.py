"""The session actor: one named, detached Ray actor per session, owning one ``toolbox serve``.

The actor is the session's lease. Ray keeps at most one live actor per name, restarts it on
another node when its node dies (``max_restarts=-1``), and never retries a call on it
(``max_task_retries=0``). Each incarnation starts a new host at a higher epoch on an empty
folder; the host restores the session from the state store, and the store's epochs fence
any older host that is somehow still running.

The host is a child of a thread of this actor that lives exactly as long as the host, with
``PR_SET_PDEATHSIG`` set to SIGKILL: when the actor's process dies for any reason (its node
lost, ``ray.kill``) the host dies with it, as a machine's death would end it. Graceful ends
(park, idle) go through :meth:`SessionHost.park`, which lets the host sync a last time.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import warnings
from typing import Any

import ray

from .config import NAMESPACE, Config

REGISTRY_NAME = "toolbox:registry"
"""The registry actor: what was parked, so ``GET /v1/sessions/{sid}`` can say so."""

_LISTENING = re.compile(r"toolbox serve: listening on (http://[^\s]+)(.*)$")
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(126)
    if os.getppid() != parent:
        # The parent died between fork and prctl.
        os._exit(126)


def _epoch_listing(folder: str, sid: str) -> int:
    """The highest epoch claimed for `sid` in a file:// store (0 when none)."""
    try:
        names = os.listdir(os.path.join(folder, "sessions", sid, "epochs"))
    except FileNotFoundError:
        return 0
    return max((int(n) for n in names if n.isdigit()), default=0)


_EPOCH_NEXT: dict[str, bool] = {}


def _supports_epoch_next(binary: str) -> bool:
    """Whether this toolbox binary takes ``--epoch next`` (it says so in ``serve --help``)."""
    if binary not in _EPOCH_NEXT:
        try:
            out = subprocess.run(
                [binary, "serve", "--help"],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        block = out[out.find("--epoch") :][:400] if "--epoch" in out else ""
        _EPOCH_NEXT[binary] = "next" in block
    return _EPOCH_NEXT[binary]


def http_json(method: str, url: str, token: str | None, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """One request with a JSON body (or none); the status and the decoded answer (text when
    it is not JSON). Connection failures raise OSError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read(4 << 20)
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read(4 << 20)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


class _Child:
    """One ``toolbox serve`` and the thread that owns it."""

    def __init__(self, cfg: Config, sid: str, epoch_arg: str, ws: str, listen_ip: str) -> None:
        self.token = secrets.token_urlsafe(32)
        self.ws = ws
        self.url: str | None = None
        self.epoch: int | None = int(epoch_arg) if epoch_arg.isdigit() else None
        self.exit_code: int | None = None
        self.lines: collections.deque[str] = collections.deque(maxlen=200)
        self.listening = threading.Event()
        self.listening_at: float | None = None
        self.ended = threading.Event()
        self.proc: subprocess.Popen | None = None
        self._cmd = [
            cfg.toolbox_bin,
            "serve",
            "--workspace",
            ws,
            "--session",
            sid,
            "--epoch",
            epoch_arg,
            "--state-store",
            cfg.state_store,
            "--listen",
            f"{listen_ip}:0",
            *cfg.host_args,
        ]
        self._env = dict(os.environ)
        for key in list(self._env):
            if key.startswith("TOOLBOX_"):
                del self._env[key]
        self._env.update(dict(cfg.host_env))
        self._env["TOOLBOX_SERVE_TOKEN"] = self.token
        self._thread = threading.Thread(target=self._own, name=f"toolbox-host-{sid}", daemon=True)
        self._thread.start()

    def _own(self) -> None:
        parent = os.getpid()
        try:
            self.proc = subprocess.Popen(
                self._cmd,
                cwd=self.ws,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=lambda: _die_with_parent(parent),
                start_new_session=True,
            )
        except OSError as e:
            self.lines.append(f"could not start {self._cmd[0]}: {e}")
            self.exit_code = 127
            self.ended.set()
            self.listening.set()
            return
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            if not self.listening.is_set():
                m = _LISTENING.search(line)
                if m:
                    self.url = m.group(1).rstrip("/")
                    e = re.search(r"epoch (\d+)", m.group(2))
                    if e:
                        self.epoch = int(e.group(1))
                    self.listening_at = time.time()
                    self.listening.set()
        self.exit_code = self.proc.wait()
        self.ended.set()
        self.listening.set()

    def stop(self, grace: float) -> None:
        """SIGTERM (a last sync), then SIGKILL after `grace` seconds."""
        if self.proc is None or self.ended.is_set():
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not self.ended.wait(grace):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.ended.wait(10)


class SessionHost:
    """The actor that owns one session (created with the options in ``adapter.actor_options``)."""

    def __init__(self, sid: str, config: dict[str, Any]) -> None:
        self.sid = sid
        self.cfg = Config.from_dict(config)
        ctx = ray.get_runtime_context()
        self.node = ctx.get_node_id()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.restarted = bool(ctx.was_current_actor_reconstructed)
        self.listen_ip = self.cfg.listen_ip or ray.util.get_node_ip_address()
        self.started_at = time.time()
        self.child: _Child | None = None
        self.error: str | None = None
        self.parking = False
        self._lock = threading.Lock()
        self._ready = threading.Event()
        # Start the host off the constructor, so the adapter sees "placed" as soon as a slot
        # is taken and waits for the host separately.
        threading.Thread(target=self._run, name=f"toolbox-session-{sid}", daemon=True).start()

    # -- the host's life ----------------------------------------------------------------

    def _workspace(self, epoch_hint: str) -> str:
        root = os.path.join(self.cfg.work_root, self.sid)
        os.makedirs(root, exist_ok=True)
        # Folders of earlier hosts of this session on this node: their hosts are gone (the
        # name gives one live actor per session), so nothing else uses them.
        for old in os.listdir(root):
            shutil.rmtree(os.path.join(root, old), ignore_errors=True)
        return tempfile.mkdtemp(prefix=f"epoch-{epoch_hint}-", dir=root)

    def _epoch_arg(self) -> str:
        folder = self.cfg.store_folder
        if _supports_epoch_next(self.cfg.toolbox_bin) or folder is None:
            return "next"
        return str(_epoch_listing(folder, self.sid) + 1)

    def _start_once(self) -> _Child:
        epoch = self._epoch_arg()
        ws = self._workspace(epoch)
        child = _Child(self.cfg, self.sid, epoch, ws, self.listen_ip)
        if not child.listening.wait(self.cfg.start_timeout_s):
            child.stop(5)
        return child

    def _start(self) -> bool:
        """Starts a host at the next epoch; an epoch claimed meanwhile is tried again (3 times)."""
        for _ in range(3):
            child = self._start_once()
            if child.url is not None and not child.ended.is_set():
                with self._lock:
                    self.child = child
                return True
            tail = "\n".join(list(child.lines)[-10:])
            self.error = f"the host did not start (exit {child.exit_code}): {tail}"
            shutil.rmtree(child.ws, ignore_errors=True)
            if child.exit_code != 2:
                break
        return False

    def _run(self) -> None:
        if not self._start():
            self._ready.set()
            return
        self._ready.set()
        self._watch()

    def _fingerprint(self, child: _Child) -> tuple[Any, ...] | None:
        """What changes when the session does something; None while it is busy."""
        try:
            status, body = http_json("GET", f"{child.url}/api/sessions", child.token, timeout=5)
        except OSError:
            return ("unreachable", time.time())
        if status != 200 or not isinstance(body, dict):
            return ("status", status, time.time())
        row = next((r for r in body.get("sessions", []) if r.get("id") == self.sid), {})
        if row.get("running") or row.get("pending_approvals"):
            return None
        # The newest change in the workspace (a look at 20,000 files at most).
        newest = 0
        seen = 0
        for dirpath, _dirnames, filenames in os.walk(child.ws):
            for name in filenames:
                try:
                    newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime_ns)
                except OSError:
                    pass
            seen += len(filenames)
            if seen > 20000:
                break
        return (row.get("last_activity"), newest)

    def _watch(self) -> None:
        """Until the host ends: park it when idle; start a new one when it crashes."""
        last, since = None, time.monotonic()
        restarts: list[float] = []
        while True:
            child = self.child
            assert child is not None
            if child.ended.wait(self.cfg.idle_check_s):
                if self.parking:
                    return
                code = child.exit_code
                if code in (0, 3):
                    # Parked by hand (through its own API) or superseded: this incarnation
                    # is over; the next :ensure resumes the session.
                    self._end(parked=code == 0)
                    return
                now = time.monotonic()
                restarts = [t for t in restarts if now - t < 60] + [now]
                if len(restarts) > 3 or not self._start():
                    # Crashing in a loop here: let Ray restart the actor (elsewhere, maybe).
                    os._exit(1)
                last, since = None, time.monotonic()
                continue
            if self.parking:
                continue
            fp = self._fingerprint(child)
            now = time.monotonic()
            if fp is None or fp != last:
                last, since = fp, now
            elif now - since >= self.cfg.idle_park_s:
                self.park()
                self._end(parked=True)
                return

    def _end(self, parked: bool) -> None:
        """Records the park, then ends this actor for good (the slot is freed)."""
        child = self.child
        if parked and child is not None:
            try:
                registry = ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
                ray.get(registry.parked.remote(self.sid, child.epoch, self.node), timeout=10)
            except Exception:  # noqa: BLE001 - the registry is a convenience, never needed
                pass
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    # -- methods the adapter calls -------------------------------------------------------

    def node_id(self) -> str:
        """Answers as soon as the actor is placed."""
        return self.node

    def info(self, stale_epoch: int | None = None) -> dict[str, Any]:
        """The host's address, token, epoch and node, once it listens (bounded by
        ``start_timeout_s``). With `stale_epoch` (a router could not reach that epoch's
        host), a host of that epoch that is gone is replaced first."""
        self._ready.wait(self.cfg.start_timeout_s + 10)
        child = self.child
        if child is None:
            return {"error": self.error or "the host did not start"}
        if stale_epoch is not None and child.epoch is not None and child.epoch <= stale_epoch:
            # Give the watcher a moment to see a crash; a live host stays.
            child.ended.wait(1.0)
            if child.ended.is_set() and not self.parking:
                # The watcher starts the next host (or ends the actor).
                deadline = time.monotonic() + self.cfg.start_timeout_s + 10
                while self.child is child and time.monotonic() < deadline:
                    time.sleep(0.05)
                child = self.child
                assert child is not None
        if self.parking:
            return {"error": "parking", "parking": True}
        return {
            "url": child.url,
            "token": child.token,
            "epoch": child.epoch,
            "node": self.node,
            "pid": child.proc.pid if child.proc else None,
            "actor_pid": os.getpid(),
            "actor_started_at": self.started_at,
            "host_listening_at": child.listening_at,
            "workspace": child.ws,
            "restarted": self.restarted,
        }

    def status(self) -> dict[str, Any]:
        """Without waiting: running (a host listens), placing (it starts), or its error."""
        child = self.child
        if child is None or child.url is None:
            return {"state": "placing", "epoch": None}
        return {"state": "running", "epoch": child.epoch}

    def park(self) -> dict[str, Any]:
        """Asks the host to sync a last time and exit (bounded), then kills it if it did not."""
        self.parking = True
        self._ready.wait(self.cfg.start_timeout_s + 10)
        child = self.child
        if child is None:
            return {"exit": None}
        if not child.ended.is_set():
            try:
                http_json("POST", f"{child.url}/api/sessions/{self.sid}/park", child.token, {}, timeout=10)
            except OSError:
                pass
            if not child.ended.wait(self.cfg.park_timeout_s):
                child.stop(10)
        shutil.rmtree(child.ws, ignore_errors=True)
        return {"exit": child.exit_code, "epoch": child.epoch, "node": self.node}

    def recent_stderr(self) -> list[str]:
        """The host's last lines on stderr (for diagnosis)."""
        child = self.child
        return list(child.lines) if child else ([self.error] if self.error else [])


class Registry:
    """What was parked (in memory; a fresh registry after its own restart knows nothing, and
    ``:ensure`` still resumes from the store)."""

    def __init__(self) -> None:
        self._parked: dict[str, dict[str, Any]] = {}

    def parked(self, sid: str, epoch: int | None, node: str) -> None:
        self._parked[sid] = {"sid": sid, "state": "parked", "epoch": epoch, "node": node}

    def forget(self, sid: str) -> None:
        self._parked.pop(sid, None)

    def get(self, sid: str) -> dict[str, Any] | None:
        return self._parked.get(sid)

    def all(self) -> list[dict[str, Any]]:
        return list(self._parked.values())
