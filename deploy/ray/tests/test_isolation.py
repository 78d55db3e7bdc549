"""Issue 37, point 7, as the attack ran: model code in one session goes through Ray to the
other sessions' tokens. On a simulated cluster (one head, one node, 127.0.0.1) with the real
toolbox binary as the session servers:

- a plain Ray driver, as model code would start one, calls every method of every toolbox
  actor and reads Ray's key-value store: no session server token and no placement token
  anywhere; the session servers' and actors' command lines and environments hold only the
  token's digest;
- a shell command run in a session server (through its API, with its token, as the router
  sends it) reaches neither the GCS's TCP port nor a raylet's Unix socket, finds no Ray
  folder to look in, and sees no other session's folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("ray", reason="Ray is not installed here: pip install -r deploy/ray/requirements.txt")

from conftest import request  # noqa: E402

PLACEMENT_TOKEN = "placement-token-for-the-router-0123456789"

# What model code would run: a driver of its own, every toolbox actor's every method that
# reads (park would end the session), and Ray's key-value store in the namespaces Ray,
# Serve and toolbox use. Printed as one JSON document for the test to search.
DRIVER = r"""
import json, sys
import ray
from ray.experimental import internal_kv

ray.init(address=sys.argv[1], log_to_driver=False)
out = {"actors": {}, "kv": {}}
for a in ray.util.list_named_actors(all_namespaces=True):
    if a["namespace"] != "toolbox":
        continue
    handle = ray.get_actor(a["name"], namespace="toolbox")
    calls = {}
    if a["name"].startswith("toolbox:session:"):
        calls["node_id"] = handle.node_id.remote()
        calls["info"] = handle.info.remote()
        # An offer for a session server that already runs changes nothing and tells nothing.
        calls["info_offer"] = handle.info.remote(None, {"nonce": "0" * 32, "digest": "0" * 64})
        calls["status"] = handle.status.remote()
        calls["recent_stderr"] = handle.recent_stderr.remote()
    else:
        calls["all"] = handle.all.remote()
    got = {}
    for name, ref in calls.items():
        try:
            got[name] = ray.get(ref, timeout=60)
        except Exception as e:
            got[name] = f"{type(e).__name__}: {e}"
    out["actors"][a["name"]] = got
for ns in (None, "serve", "toolbox", "session", "fun", "job", "dashboard", "cluster"):
    try:
        keys = internal_kv._internal_kv_list(b"", namespace=ns)
    except Exception as e:
        out["kv"][str(ns)] = f"{type(e).__name__}: {e}"
        continue
    values = {}
    for key in keys[:2000]:
        value = internal_kv._internal_kv_get(key, namespace=ns) or b""
        values[key.decode("latin-1")] = value[: 1 << 20].decode("latin-1")
    out["kv"][str(ns)] = values
print(json.dumps(out, default=repr))
"""


def proc_text(pid: int) -> str:
    """A process's command line and environment, as anything on its node could read them."""
    parts = []
    for name in ("cmdline", "environ"):
        with open(f"/proc/{pid}/{name}", "rb") as f:
            parts.append(f.read().replace(b"\0", b" ").decode("utf-8", "replace"))
    return "\n".join(parts)


def serve_replica_pids() -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"ServeReplica:toolbox-placement" in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_a_ray_client_gets_no_token_and_hosts_hold_only_its_digest(sim_cluster, tmp_path):
    token_file = tmp_path / "placement.token"
    token_file.write_text(PLACEMENT_TOKEN + "\n")
    c = sim_cluster(slots=2, nodes=1, placement_token_file=str(token_file))
    # The adapter wants the placement token.
    assert request("POST", f"{c.url}/v1/sessions/victim:ensure", {}).status == 401
    assert request("POST", f"{c.url}/v1/sessions/victim:ensure", {}, token="wrong-token-0123456789").status == 401
    victim, attacker = c.ensured("victim"), c.ensured("attacker")
    # Each token opens its own session server, and only it.
    for me, other in ((victim, attacker), (attacker, victim)):
        assert request("GET", f"{me['url']}/api/sessions", token=me["token"]).status == 200
        assert request("GET", f"{me['url']}/api/sessions", token=other["token"]).status == 401
    # Idempotent: every replica derives the same token for the same session server.
    assert c.ensured("victim")["token"] == victim["token"]
    hidden = {"victim's token": victim["token"], "attacker's token": attacker["token"], "placement token": PLACEMENT_TOKEN}

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, c.cluster.address],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    dump = run.stdout
    seen = json.loads(dump)
    sessions = {name: got for name, got in seen["actors"].items() if name.startswith("toolbox:session:")}
    assert set(sessions) == {"toolbox:session:victim", "toolbox:session:attacker"}, seen["actors"].keys()
    for name, got in sessions.items():
        # The driver did reach the actors: it got their session servers' addresses and
        # nonces.
        assert got["info"]["url"] and len(got["info"]["nonce"]) == 32, got
        assert "token" not in got["info"] and got["info_offer"]["nonce"] == got["info"]["nonce"], got
    assert sum(len(v) for v in seen["kv"].values() if isinstance(v, dict)) > 0, "the driver read no key-value store"
    for what, secret in hidden.items():
        assert secret not in dump, f"a Ray client read the {what}"

    # What sits on the node: the session servers' and the actors' command lines and
    # environments.
    for info, name in ((victim, "victim"), (attacker, "attacker")):
        got = sessions[f"toolbox:session:{name}"]["info"]
        host, actor = proc_text(got["pid"]), proc_text(got["actor_pid"])
        for what, secret in hidden.items():
            assert secret not in host, f"{name}'s session server holds the {what}"
            assert secret not in actor, f"{name}'s actor holds the {what}"
        # The session server checks bearer tokens against the digest, the only form it has.
        assert f"--token-sha256 {hashlib.sha256(info['token'].encode()).hexdigest()}" in host
    replicas = serve_replica_pids()
    assert replicas, "no adapter replica found"
    for pid in replicas:
        # The replica read the token from its file; it is in neither its arguments nor its environment.
        assert PLACEMENT_TOKEN not in proc_text(pid)


PROBE = r"""
import json, os, socket, subprocess, sys
gcs_host, gcs_port, temp_dir, work_root, raylet_pid = sys.argv[1:6]
sockets = sys.argv[6:]
out = {}
try:
    socket.create_connection((gcs_host, int(gcs_port)), timeout=5).close()
    out["gcs"] = "connected"
except OSError as e:
    out["gcs"] = type(e).__name__
for path in sockets:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(path)
        out[path] = "connected"
    except OSError as e:
        out[path] = type(e).__name__
for name, path in (("temp_dir", temp_dir), ("via_proc", f"/proc/{raylet_pid}/root{temp_dir}"), ("work_root", work_root)):
    try:
        out[name] = sorted(os.listdir(path))
    except OSError as e:
        out[name] = type(e).__name__
# What the issue's repro ran: a Ray driver that finds the cluster by itself (it finds the
# GCS's address in the processes' command lines, then retries its connection for minutes).
try:
    init = subprocess.run(
        [sys.executable, "-c", "import ray; ray.init(address='auto', log_to_driver=False); print('joined')"],
        capture_output=True, text=True, timeout=30,
    )
    out["ray_init"] = "joined" if "joined" in init.stdout else (init.stderr.strip().splitlines() or ["?"])[-1][:300]
except subprocess.TimeoutExpired:
    out["ray_init"] = "still trying after 30 s"
print("PROBE " + json.dumps(out))
"""


def raylet_pid(temp_dir: str) -> int:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"/raylet"):
            return int(pid)
    raise AssertionError("no raylet process found")


def test_a_shell_in_a_host_reaches_neither_rays_ports_nor_its_sockets(sim_cluster):
    c = sim_cluster(slots=2, nodes=1)
    info = c.ensured("prober")
    c.ensured("neighbour")
    gcs_host, gcs_port = c.cluster.address.rsplit(":", 1)
    head = c.cluster.head_node
    temp_dir = head.get_temp_dir_path()
    sockets = sorted({n.raylet_socket_name for n in [head, *c.workers]} | {n.plasma_store_socket_name for n in [head, *c.workers]})
    pid = raylet_pid(temp_dir)
    # The control: from outside a session server, every one of them answers.
    socket.create_connection((gcs_host, int(gcs_port)), timeout=5).close()
    for path in sockets:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.close()
    assert os.listdir(f"/proc/{pid}/root{temp_dir}")
    command = " ".join(
        [sys.executable, "-c", repr_sh(PROBE), gcs_host, gcs_port, temp_dir, c.work_root, str(pid), *sockets]
    )
    r = request(
        "POST",
        f"{info['url']}/api/sessions/prober/tools/shell",
        {"command": command, "timeout_ms": 120000},
        token=info["token"],
        timeout=300,
    )
    assert r.status == 200, r
    result = r.json()["result"]
    line = next((l for l in result.splitlines() if l.startswith("PROBE ")), None)
    assert line is not None, result
    seen = json.loads(line[len("PROBE ") :])
    print(f"\nfrom a shell in a session server: {seen}")
    assert seen["gcs"] == "PermissionError", seen  # no socket but AF_UNIX (the sandbox)
    for path in sockets:
        assert seen[path] == "FileNotFoundError", (path, seen)  # Ray's folder is empty
    assert seen["temp_dir"] == [], seen
    assert seen["via_proc"] == "PermissionError", seen  # no look into Ray's processes
    assert seen["work_root"] == ["prober"], seen  # not the neighbour's folder
    assert seen["ray_init"] != "joined", seen
    # The same probe as Python code: `--sandbox` runs it on the isolated worker, in the same
    # sandbox (no socket but AF_UNIX), inside the session server's namespace.
    argv = ["probe", gcs_host, gcs_port, temp_dir, c.work_root, str(pid), *sockets]
    r = request(
        "POST",
        f"{info['url']}/api/sessions/prober/tools/run_python_code",
        {"code": f"import sys\nsys.argv = {argv!r}\n{PROBE}", "timeout_ms": 120000},
        token=info["token"],
        timeout=300,
    )
    assert r.status == 200, r
    result = r.json()["result"]
    line = next((l for l in result.splitlines() if l.startswith("PROBE ")), None)
    assert line is not None, result
    seen = json.loads(line[len("PROBE ") :])
    print(f"from Python in a session server: {seen}")
    assert seen["gcs"] == "PermissionError", seen
    for path in sockets:
        assert seen[path] == "FileNotFoundError", (path, seen)
    assert seen["temp_dir"] == [], seen
    assert seen["via_proc"] == "PermissionError", seen
    assert seen["work_root"] == ["prober"], seen
    assert seen["ray_init"] != "joined", seen


def repr_sh(text: str) -> str:
    """`text` as one single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"
