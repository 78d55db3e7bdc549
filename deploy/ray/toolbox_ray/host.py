"""The session actor: one named, detached Ray actor per session, owning one ``toolbox serve``.

The actor is the session's lease. Ray keeps at most one live actor per name, restarts it on
another node when its node dies (``max_restarts=-1``), and never retries a call on it
(``max_task_retries=0``). Each incarnation starts a new session server at a higher epoch on
an empty folder; the session server restores the session from the state store, and the
store's epochs fence any older session server that is somehow still running.

The session server is a child of a thread of this actor that lives exactly as long as the
session server, with ``PR_SET_PDEATHSIG`` set to SIGKILL: when the actor's process dies for
any reason (its node lost, ``ray.kill``) the session server dies with it, as a machine's
death would end it. Graceful ends (park, idle) go through :meth:`SessionHost.park`, which
lets the session server sync a last time.

No token crosses Ray. The actor makes a random nonce for each session server and starts it
only when the adapter, which alone holds the key, answers that nonce with the SHA-256 digest
of the token it derives from it (``--token-sha256``): the session server, this actor and
every Ray caller see the digest and the nonce, never the token. So the actor watches its
session server without its API: the session's event file and the workspace's files say
whether it is busy or idle, and a park is SIGTERM (the session server lets calls in flight
finish, syncs and exits 0).

With ``isolate_hosts`` the session server starts in a mount namespace of its own in which
Ray's temp dir (its Unix sockets, ``ray_current_cluster``, its logs) and the other sessions'
folders under ``work_root`` are empty read-only folders, and its shell commands run under
``--sandbox workspace-write``, which refuses every socket but AF_UNIX and any look into
other processes' ``/proc``: a command can reach neither Ray's TCP ports nor its sockets.
"""

from __future__ import annotations

import collections
import ctypes
import errno
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
import warnings
from typing import Any

import ray

from .config import NAMESPACE, Config, inside

REGISTRY_NAME = "toolbox:registry"
"""The registry actor: what was parked, so ``GET /v1/sessions/{sid}`` can say so."""

_LISTENING = re.compile(r"toolbox serve: listening on (http://[^\s]+)(.*)$")
_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 32, 4096, 8192, 0x4000, 1 << 18
_SEALED = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC

NONCE = re.compile(r"[0-9a-f]{32}")
"""A session server's nonce: 16 random bytes in hex, made by its actor."""

_libc: Any = None


def _c() -> Any:
    """libc, loaded before a fork (the child only calls into it)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends."""
    if _c().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(126)
    if os.getppid() != parent:
        # The parent died between fork and prctl.
        os._exit(126)


def ray_dirs() -> list[str]:
    """The folders where this node's Ray keeps its sockets, ``ray_current_cluster`` and its
    logs: its temp dir, its session dir and the sockets' folders (outermost only)."""
    found = []
    node = getattr(ray._private.worker.global_worker, "node", None)
    for get in ("get_temp_dir_path", "get_session_dir_path"):
        try:
            found.append(getattr(node, get)())
        except Exception:  # noqa: BLE001 - an older or stripped-down Ray: the defaults below
            pass
    for attr in ("raylet_socket_name", "plasma_store_socket_name"):
        path = getattr(node, attr, None)
        if isinstance(path, str) and path.startswith("/"):
            found.append(os.path.dirname(path))
    found.append(os.environ.get("RAY_TMPDIR") or "/tmp/ray")
    out: list[str] = []
    for d in sorted({os.path.normpath(d) for d in found if isinstance(d, str) and d.startswith("/")}, key=len):
        if os.path.isdir(d) and not any(d == o or d.startswith(o + "/") for o in out):
            out.append(d)
    return out


class Isolation:
    """What a session server's mount namespace hides, prepared before the fork so that the
    child only makes system calls: ``covers`` become empty read-only folders, and ``keep``
    (the session's own folder under work_root) stays itself inside the covered
    ``work_root``."""

    def __init__(self, covers: list[str], work_root: str, keep: str) -> None:
        self.covers = [os.fsencode(c) for c in covers]
        self.work_root = os.fsencode(work_root)
        self.keep = os.fsencode(keep)
        self.name = os.fsencode(os.path.basename(keep))
        self.uid, self.gid = os.getuid(), os.getgid()
        _c()

    def enter(self) -> None:
        """In the child, before exec. Any failure ends the child (exit 126) saying why on
        stderr, which the actor reports: a session server is never started unisolated by
        accident."""
        libc = _c()

        def fail(what: str, err: int | None = None) -> None:
            why = os.strerror(ctypes.get_errno() if err is None else err)
            os.write(2, f"toolbox_ray: cannot isolate the session server: {what}: {why}\n".encode())
            os._exit(126)

        def folder(make: bool, path: bytes) -> None:
            try:
                os.mkdir(path, 0o700) if make else os.rmdir(path)
            except OSError as e:
                fail(f"{'making' if make else 'removing'} {path.decode()}", e.errno or 0)

        def mount(src: bytes | None, dst: bytes, fstype: bytes | None, flags: int, data: bytes | None, what: str) -> None:
            if libc.mount(src, dst, fstype, ctypes.c_ulong(flags), data) != 0:
                fail(what)

        if libc.unshare(_CLONE_NEWNS) != 0:
            if ctypes.get_errno() != errno.EPERM:
                fail("unshare(CLONE_NEWNS)")
            # Not root: a user namespace of our own, mapping only ourselves, owns the mounts.
            if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
                fail("unshare(CLONE_NEWUSER | CLONE_NEWNS)")
            for name, text in (
                ("setgroups", b"deny"),
                ("uid_map", b"%d %d 1" % (self.uid, self.uid)),
                ("gid_map", b"%d %d 1" % (self.gid, self.gid)),
            ):
                try:
                    fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
                    os.write(fd, text)
                    os.close(fd)
                except OSError as e:
                    fail(f"/proc/self/{name}", e.errno or 0)
        # Nothing done here reaches the node's namespace, nor comes in from it later.
        mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None, "making / private")
        # The session's own folder is set aside on a scratch tmpfs (over the first cover,
        # which is about to be emptied anyway), work_root is covered, and the folder moved
        # back into it at its own path.
        stage = self.covers[0]
        mount(b"toolbox-isolated", stage, b"tmpfs", _SEALED, b"size=64k,mode=0700", "a tmpfs over " + stage.decode())
        aside = stage + b"/session"
        folder(True, aside)
        mount(self.keep, aside, None, _MS_BIND | _MS_REC, None, "setting the session's folder aside")
        mount(b"toolbox-isolated", self.work_root, b"tmpfs", _SEALED, b"size=64k,mode=0755", "a tmpfs over work_root")
        back = self.work_root + b"/" + self.name
        folder(True, back)
        mount(aside, back, None, _MS_MOVE, None, "moving the session's folder back")
        mount(None, self.work_root, None, _MS_REMOUNT | _MS_RDONLY | _SEALED, None, "sealing work_root")
        folder(False, aside)
        mount(None, stage, None, _MS_REMOUNT | _MS_RDONLY | _SEALED, None, "sealing " + stage.decode())
        for cover in self.covers[1:]:
            mount(b"toolbox-isolated", cover, b"tmpfs", _SEALED | _MS_RDONLY, b"size=4k,mode=0555", "a tmpfs over " + cover.decode())


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


def host_command(cfg: Config, sid: str, epoch_arg: str, ws: str, listen_ip: str, digest: str) -> list[str]:
    """The session server's command line: the token's digest, never the token."""
    return [
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
        "--token-sha256",
        digest,
        *cfg.sandbox_arg,
        *cfg.host_args,
    ]


def host_env(cfg: Config) -> dict[str, str]:
    """The session server's environment: the actor's without ``TOOLBOX_*`` and ``RAY_*``
    (Ray's own settings say where the cluster is), plus the operator's ``host_env``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLBOX_", "RAY_"))}
    env.update(dict(cfg.host_env))
    return env


class _Child:
    """One ``toolbox serve`` and the thread that owns it."""

    def __init__(
        self,
        cfg: Config,
        sid: str,
        epoch_arg: str,
        ws: str,
        listen_ip: str,
        digest: str,
        isolation: Isolation | None,
    ) -> None:
        self.ws = ws
        self.url: str | None = None
        self.epoch: int | None = int(epoch_arg) if epoch_arg.isdigit() else None
        self.exit_code: int | None = None
        self.lines: collections.deque[str] = collections.deque(maxlen=200)
        self.listening = threading.Event()
        self.listening_at: float | None = None
        self.ended = threading.Event()
        self.proc: subprocess.Popen | None = None
        self._cmd = host_command(cfg, sid, epoch_arg, ws, listen_ip, digest)
        self._env = host_env(cfg)
        self._isolation = isolation
        self._thread = threading.Thread(target=self._own, name=f"toolbox-host-{sid}", daemon=True)
        self._thread.start()

    def _own(self) -> None:
        parent = os.getpid()
        isolation = self._isolation

        def before_exec() -> None:
            _die_with_parent(parent)
            if isolation is not None:
                isolation.enter()

        try:
            self.proc = subprocess.Popen(
                self._cmd,
                cwd=self.ws,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=before_exec,
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as e:
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
        """SIGTERM to the session server (it lets calls in flight finish, syncs a last time
        and exits 0), then SIGKILL to its whole process group after `grace` seconds."""
        if self.proc is None or self.ended.is_set():
            return
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not self.ended.wait(grace):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.ended.wait(10)


_EVENTS_TAIL = 256 * 1024
"""How much of the end of the session's event file the idle check reads."""


def busy_in_events(path: str) -> tuple[bool, int, int]:
    """From the session's event file (``.toolbox/sessions/<sid>/events.jsonl``, one
    ``{"epoch", "event"}`` per line, written as events happen): whether a turn is open or a
    question waits for a person, and the file's size and modification time."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            f.seek(max(0, st.st_size - _EVENTS_TAIL))
            tail = f.read(_EVENTS_TAIL)
    except OSError:
        return False, -1, -1
    turn_open = False
    asking: set[str] = set()
    for line in tail.splitlines():
        if b'"turn_' not in line and b"_request" not in line and b'"tool_call_finished"' not in line and b'"review_answered"' not in line:
            continue
        try:
            event = json.loads(line).get("event") or {}
        except (ValueError, AttributeError):
            continue  # the first line of the tail, or a torn last one
        kind = event.get("type")
        if kind == "turn_started":
            turn_open, asking = True, set()
        elif kind == "turn_finished":
            turn_open, asking = False, set()
        elif kind in ("tool_approval_request", "review_request"):
            asking.add(str(event.get("call_id")))
        elif kind == "tool_call_finished":
            asking.discard(str(event.get("id")))
        elif kind == "review_answered":
            asking.discard(str(event.get("call_id")))
    return turn_open or bool(asking), st.st_size, st.st_mtime_ns


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
        self.nonce = secrets.token_hex(16)
        """The nonce of the current session server, or of the next one while none runs."""
        self.error: str | None = None
        self.parking = False
        self._starting = threading.Lock()
        self._crashes: list[float] = []
        # The session server starts at the first info() that brings its token's digest (see
        # info).

    # -- the session server's life -------------------------------------------------------

    def _workspace(self, epoch_hint: str) -> str:
        root = os.path.join(self.cfg.work_root, self.sid)
        os.makedirs(root, exist_ok=True)
        # Folders of earlier session servers of this session on this node: their session
        # servers are gone (the name gives one live actor per session), so nothing else uses
        # them.
        for old in os.listdir(root):
            shutil.rmtree(os.path.join(root, old), ignore_errors=True)
        return tempfile.mkdtemp(prefix=f"epoch-{epoch_hint}-", dir=root)

    def _epoch_arg(self) -> str:
        folder = self.cfg.store_folder
        if _supports_epoch_next(self.cfg.toolbox_bin) or folder is None:
            return "next"
        return str(_epoch_listing(folder, self.sid) + 1)

    def _isolation(self) -> Isolation | None:
        """What this session server's mount namespace hides; raises ValueError naming a
        folder that isolation would hide from the session server itself."""
        if not self.cfg.isolate_hosts:
            return None
        covers = ray_dirs()
        if not covers:
            raise ValueError("isolate_hosts: this node's Ray temp dir was not found (RAY_TMPDIR, /tmp/ray)")
        needed = [("work_root", self.cfg.work_root), ("toolbox_bin", self.cfg.toolbox_bin)]
        if self.cfg.store_folder:
            needed.append(("state_store", self.cfg.store_folder))
        for cover in covers:
            for name, path in needed:
                if inside(path, cover):
                    raise ValueError(
                        f"{name} {path} is inside Ray's folder {cover}, which an isolated session "
                        "server does not see: move it elsewhere"
                    )
            if inside(cover, self.cfg.work_root):
                raise ValueError(f"Ray's folder {cover} is inside work_root {self.cfg.work_root}: move work_root")
        return Isolation(covers, self.cfg.work_root, os.path.join(self.cfg.work_root, self.sid))

    def _start_once(self, digest: str, isolation: Isolation | None) -> _Child:
        epoch = self._epoch_arg()
        ws = self._workspace(epoch)
        child = _Child(self.cfg, self.sid, epoch, ws, self.listen_ip, digest, isolation)
        if not child.listening.wait(self.cfg.start_timeout_s):
            child.stop(5)
        return child

    def _start(self, digest: str) -> bool:
        """Starts a session server at the next epoch; an epoch claimed meanwhile is tried
        again (3 times)."""
        try:
            isolation = self._isolation()
        except ValueError as e:
            self.error = str(e)
            return False
        for _ in range(3):
            child = self._start_once(digest, isolation)
            if child.url is not None and not child.ended.is_set():
                self.error = None
                self.child = child
                threading.Thread(target=self._watch, args=(child,), name=f"toolbox-session-{self.sid}", daemon=True).start()
                return True
            tail = "\n".join(list(child.lines)[-10:])
            self.error = f"the session server did not start (exit {child.exit_code}): {tail}"
            shutil.rmtree(child.ws, ignore_errors=True)
            if child.exit_code != 2:
                break
        return False

    def _fingerprint(self, child: _Child) -> tuple[Any, ...] | None:
        """What changes when the session does something; None while it is busy (a turn
        open, a question waiting). Read from its files, as the actor has no token for its
        session server's API."""
        events = os.path.join(child.ws, ".toolbox", "sessions", self.sid, "events.jsonl")
        busy, size, mtime = busy_in_events(events)
        if busy:
            return None
        # The newest change in the workspace (a look at 20,000 files at most): calls write
        # the trajectory and the conversation, so this is the session's last activity.
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
        return (size, mtime, newest)

    def _watch(self, child: _Child) -> None:
        """Until the session server ends: park it when idle; when it crashes, make way for a
        new one."""
        last, since = None, time.monotonic()
        while True:
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
                self._crashes = [t for t in self._crashes if now - t < 60] + [now]
                if len(self._crashes) > 3:
                    # Crashing in a loop here: let Ray restart the actor (elsewhere, maybe).
                    os._exit(1)
                # The next session server gets a new nonce, so a new token; the next :ensure
                # (the router's, with stale_epoch) brings its digest and starts it.
                self.error = f"the session server exited with {code}: " + "\n".join(list(child.lines)[-5:])
                with self._starting:
                    if self.child is child:
                        self.nonce = secrets.token_hex(16)
                        self.child = None
                return
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

    def info(self, stale_epoch: int | None = None, offer: dict[str, str] | None = None) -> dict[str, Any]:
        """The session server's address, epoch, node and nonce once it listens (bounded by
        ``start_timeout_s``); never a token.

        While no session server runs, the answer is ``{"need": nonce}``: the caller (the
        adapter) derives the session server's token from the nonce and calls again with
        ``offer={"nonce", "digest"}``, the token's SHA-256, which starts the session server.
        With `stale_epoch` (a router could not reach that epoch's session server), a session
        server of that epoch that is gone is replaced first."""
        deadline = time.monotonic() + self.cfg.start_timeout_s + 10
        if self.parking:
            return {"error": "parking", "parking": True}
        child = self.child
        if child is not None and stale_epoch is not None and child.epoch is not None and child.epoch <= stale_epoch:
            # Give the watcher a moment to see a crash; a live session server stays.
            child.ended.wait(1.0)
            while child.ended.is_set() and self.child is child and not self.parking and time.monotonic() < deadline:
                time.sleep(0.05)
        with self._starting:
            if self.parking:
                return {"error": "parking", "parking": True}
            if self.child is None:
                nonce = (offer or {}).get("nonce")
                digest = (offer or {}).get("digest")
                if nonce != self.nonce or not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                    return {"need": self.nonce, "node": self.node}
                if not self._start(digest):
                    return {"error": self.error or "the session server did not start"}
            child = self.child
        if child is None:
            return {"error": self.error or "the session server did not start"}
        if self.parking:
            return {"error": "parking", "parking": True}
        return {
            "url": child.url,
            "epoch": child.epoch,
            "node": self.node,
            "nonce": self.nonce,
            "pid": child.proc.pid if child.proc else None,
            "actor_pid": os.getpid(),
            "actor_started_at": self.started_at,
            "host_listening_at": child.listening_at,
            "workspace": child.ws,
            "restarted": self.restarted,
        }

    def status(self) -> dict[str, Any]:
        """Without waiting: running (a session server listens), or placing (none yet, or it
        starts)."""
        child = self.child
        if child is None or child.url is None:
            return {"state": "placing", "epoch": None}
        return {"state": "running", "epoch": child.epoch}

    def park(self) -> dict[str, Any]:
        """Asks the session server to sync a last time and exit (SIGTERM), then kills it if
        it did not within ``park_timeout_s``."""
        self.parking = True
        # A start under way finishes first (bounded by start_timeout_s).
        with self._starting:
            child = self.child
        if child is None:
            return {"exit": None}
        child.stop(self.cfg.park_timeout_s)
        shutil.rmtree(child.ws, ignore_errors=True)
        return {"exit": child.exit_code, "epoch": child.epoch, "node": self.node}

    def recent_stderr(self) -> list[str]:
        """The session server's last lines on stderr (for diagnosis)."""
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
