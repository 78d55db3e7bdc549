"""What keeps session server tokens in the adapter and model code off Ray, without a cluster
(well under a second): the adapter's refusal to listen beyond loopback without a placement
token, session server tokens derived from a key only the adapter holds, a session server
started with the token's digest alone, and the mount namespace that hides Ray's folder and
the other sessions."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pickle
import socket
import subprocess
import sys
import types

import pytest

pytest.importorskip("ray", reason="Ray is not installed here: pip install -r deploy/ray/requirements.txt")

from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402

from toolbox_ray.__main__ import main  # noqa: E402
from toolbox_ray.adapter import HostKeys, check_listen, handle_request  # noqa: E402
from toolbox_ray.config import Config, ConfigError, is_loopback  # noqa: E402
from toolbox_ray.host import Isolation, busy_in_events, host_command, host_env  # noqa: E402

TOKEN = "placement-token-0123456789abcdef"


def config(**fields) -> Config:
    return Config.from_dict({"toolbox_bin": "/usr/bin/toolbox", "state_store": "file:///srv/store", **fields})


def test_the_adapter_refuses_to_listen_beyond_loopback_without_a_placement_token(tmp_path, capsys):
    path = tmp_path / "placement.json"
    path.write_text(json.dumps({"toolbox_bin": "/usr/bin/toolbox", "state_store": "file:///srv/store"}))
    for host in ("0.0.0.0", "::", "192.0.2.2", "head.example"):
        # Refused before Ray is asked anything (no cluster here).
        assert main(["--config", str(path), "--host", host]) == 2, host
        err = capsys.readouterr().err
        assert f"--host {host}: an adapter listening beyond loopback needs placement_token_file" in err, err
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
        check_listen(config(), host)
    # The file must be there and hold a real token, on the node that starts the adapter.
    missing = tmp_path / "nothing"
    with pytest.raises(ConfigError, match=f"placement_token_file {missing}: No such file"):
        check_listen(config(placement_token_file=str(missing)), "0.0.0.0")
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(ConfigError, match="16 characters or more"):
        check_listen(config(placement_token_file=str(short)), "0.0.0.0")
    good = tmp_path / "token"
    good.write_text(TOKEN + "\n")
    check_listen(config(placement_token_file=str(good)), "0.0.0.0")


def test_requests_without_the_placement_token_are_refused():
    async def listing():
        return JSONResponse({"sessions": []})

    placement = types.SimpleNamespace(token=TOKEN, list=listing)

    def status(headers):
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/v1/sessions",
            "raw_path": b"/v1/sessions",
            "query_string": b"",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }
        return asyncio.run(handle_request(placement, Request(scope))).status_code

    assert status({}) == 401
    assert status({"Authorization": "Bearer " + TOKEN[:-1]}) == 401
    assert status({"Authorization": "Basic " + TOKEN}) == 401
    assert status({"Authorization": "Bearer " + TOKEN}) == 200


def test_host_tokens_come_from_the_adapters_key_and_the_hosts_nonce():
    keys = HostKeys(TOKEN.encode())
    nonce, other = "0" * 32, "1" * 32
    token = keys.token("s1", nonce)
    assert len(token) == 64 and int(token, 16) >= 0
    # Every replica (the same secret) derives the same token; a restart changes nothing.
    assert HostKeys(TOKEN.encode()).token("s1", nonce) == token
    # Another session server (nonce), another session, another adapter secret: another
    # token.
    assert len({token, keys.token("s1", other), keys.token("s2", nonce), HostKeys(b"x" * 16).token("s1", nonce)}) == 4
    # The session server gets the digest: what it checks a bearer token against.
    assert keys.digest("s1", nonce) == hashlib.sha256(token.encode()).hexdigest()
    # A session id cannot smuggle in another session's nonce.
    assert keys.token("s1\0" + "2" * 16, "3" * 32) != keys.token("s1", "2" * 16 + "3" * 16)
    with pytest.raises(ValueError, match="not a session server nonce"):
        keys.token("s1", "../x")
    assert TOKEN not in repr(keys) and "HostKeys(..)" == repr(keys)
    # Nothing can carry the key out of the process by serialising it (Ray pickles answers).
    import ray.cloudpickle

    for dump in (pickle.dumps, ray.cloudpickle.dumps):
        with pytest.raises(TypeError, match="never leaves its process"):
            dump(keys)
    with pytest.raises(ConfigError, match="16 bytes or more"):
        HostKeys(b"short")


def test_a_host_is_started_with_the_digest_and_a_sandbox_and_no_token(monkeypatch):
    monkeypatch.setenv("TOOLBOX_SERVE_TOKEN", "inherited-token-0123456789")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    digest = "ab" * 32
    cfg = config(host_args=["--mode", "full"], host_env={"TOOLBOX_LLM_PROVIDER": "openai"})
    cmd = host_command(cfg, "s1", "next", "/w/s1/epoch-1", "127.0.0.1", digest)
    assert cmd[cmd.index("--token-sha256") + 1] == digest
    assert not {"--token", "--token-file", "--token-fd"} & set(cmd)
    assert cmd[cmd.index("--sandbox") + 1] == "workspace-write"
    env = host_env(cfg)
    assert "TOOLBOX_SERVE_TOKEN" not in env and "RAY_ADDRESS" not in env
    assert env["TOOLBOX_LLM_PROVIDER"] == "openai"
    # The operator's own sandbox choice stands (read-only is stricter); no isolation, no default.
    ro = host_command(config(host_args=["--sandbox", "read-only"]), "s1", "1", "/w", "127.0.0.1", digest)
    assert ro.count("--sandbox") == 1 and ro[ro.index("--sandbox") + 1] == "read-only"
    assert "--sandbox" not in host_command(config(isolate_hosts=False), "s1", "1", "/w", "127.0.0.1", digest)


def test_the_idle_check_reads_open_turns_and_questions_from_the_event_file(tmp_path):
    path = tmp_path / "events.jsonl"

    def write(*events):
        path.write_text("".join(json.dumps({"epoch": 1, "event": e}) + "\n" for e in events))
        return busy_in_events(str(path))[0]

    assert busy_in_events(str(tmp_path / "none"))[0] is False
    assert write({"type": "turn_started", "turn_id": "t1"}) is True
    assert write({"type": "turn_started", "turn_id": "t1"}, {"type": "turn_finished", "turn_id": "t1"}) is False
    # A question over the API outside a turn: busy until its call finishes.
    assert write({"type": "tool_approval_request", "call_id": "c1"}) is True
    assert write({"type": "tool_approval_request", "call_id": "c1"}, {"type": "tool_call_finished", "id": "c1"}) is False
    assert write({"type": "review_request", "call_id": "r1"}, {"type": "review_answered", "call_id": "r1"}) is False
    # A torn last line (a crash mid-write) is not an event.
    with open(path, "a") as f:
        f.write('{"epoch": 1, "event": {"type": "turn_sta')
    assert busy_in_events(str(path))[0] is False


PROBE = r"""
import json, os, socket, sys
ray_dir, work, sock = sys.argv[1:4]
out = {}
out["ray_dir"] = sorted(os.listdir(ray_dir))
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    out["unix"] = "connected"
except OSError as e:
    out["unix"] = type(e).__name__
out["work"] = sorted(os.listdir(work))
out["mine"] = open(os.path.join(work, "mine", "epoch-1", "a.txt")).read()
with open(os.path.join(work, "mine", "epoch-1", "b.txt"), "w") as f:
    f.write("written")
for name, path in (("write_work", os.path.join(work, "x")), ("write_ray", os.path.join(ray_dir, "x"))):
    try:
        open(path, "w").close()
        out[name] = "written"
    except OSError as e:
        out[name] = type(e).__name__
print(json.dumps(out))
"""


def test_an_isolated_host_sees_neither_rays_folder_nor_other_sessions(tmp_path):
    ray_dir = tmp_path / "ray"
    sockets = ray_dir / "session_1" / "sockets"
    sockets.mkdir(parents=True)
    (ray_dir / "ray_current_cluster").write_text("127.0.0.1:6379")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sockets / "raylet"))
    listener.listen(4)
    work = tmp_path / "work"
    for sid in ("mine", "theirs"):
        (work / sid / "epoch-1").mkdir(parents=True)
        (work / sid / "epoch-1" / "a.txt").write_text(f"{sid}'s file")
    # The control: outside the namespace all of it is there.
    probe = socket.socket(socket.AF_UNIX)
    probe.connect(str(sockets / "raylet"))
    probe.close()
    isolation = Isolation([str(ray_dir)], str(work), str(work / "mine"))
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(ray_dir), str(work), str(sockets / "raylet")],
        cwd=work / "mine" / "epoch-1",
        preexec_fn=isolation.enter,
        capture_output=True,
        text=True,
        timeout=60,
    )
    listener.close()
    if run.returncode == 126 and "cannot isolate the session server: unshare" in run.stderr:
        pytest.skip(f"no mount namespace can be made here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen == {
        "ray_dir": [],
        "unix": "FileNotFoundError",
        "work": ["mine"],
        "mine": "mine's file",
        "write_work": "OSError",
        "write_ray": "OSError",
    }, seen
    # What the session server wrote in its own folder is on the node's disk; nothing else
    # changed.
    assert (work / "mine" / "epoch-1" / "b.txt").read_text() == "written"
    assert sorted(os.listdir(ray_dir)) == ["ray_current_cluster", "session_1"]
    assert sorted(os.listdir(work)) == ["mine", "theirs"]
