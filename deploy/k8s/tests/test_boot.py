"""toolbox-k8s-boot, the warm pod's program, as a real process on 127.0.0.1, behind
toolbox-k8s-gate as in the pod."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from conftest import BOOT, call, free_ports, handoff_name, poll


def test_it_waits_refuses_bad_assignments_then_becomes_the_host(start_boot, tokens, tmp_path):
    port, gate_port = free_ports(2)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # What a previous session server left in the pod's workspace (a container restart):
    # wiped.
    (workspace / "old.txt").write_text("from the last session server")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f").write_text("x")
    os.symlink("/etc", workspace / "link")
    boot = start_boot(port, gate_port, workspace=str(workspace))
    url = f"http://127.0.0.1:{port}"
    gate = f"http://127.0.0.1:{gate_port}"
    pool = tokens["pool"][1]
    host_token = "host-token-abcdefghijklmnop"

    status, _, body = call(f"{url}/api/health")
    assert (status, body["status"]) == (503, "waiting")

    good = {"sid": "s1", "token": host_token}
    for token in [None, "wrong"]:
        status, _, _ = call(f"{gate}/assign", "POST", good, token)
        assert status == 401
    for bad in [{"sid": ".x", "token": host_token}, {"sid": "a/b", "token": host_token},
                {"sid": "s1", "token": "short"}, {"sid": "s1", "token": "has space " * 3},
                {"sid": "s1"}, {"sid": "s1", "token": host_token, "extra": 1}, ["s1"]]:
        status, _, body = call(f"{gate}/assign", "POST", bad, pool)
        assert status == 400, (bad, body)
    # The boot's own port takes no assignment, with or without the pool token: only the
    # gate, through the socket the two containers share, can hand one over.
    for token in [None, pool]:
        status, _, body = call(f"{url}/assign", "POST", good, token)
        assert status == 404, body
    status, _, _ = call(f"{gate}/other", "POST", good, pool)
    assert status == 404
    assert boot.poll() is None

    status, _, body = call(f"{gate}/assign", "POST", good, pool)
    assert (status, body) == (202, {"sid": "s1", "state": "starting"})

    # The same process is now the session server (the fake session server asserts an empty
    # workspace).
    status, _, health = poll(lambda: _health(url, host_token), lambda r: r[0] == 200,
                             "the session server after the assignment")
    assert health["host"] == {"session": "s1", "epoch": 1}
    assert boot.poll() is None
    assert sorted(os.listdir(workspace)) == []
    assert os.path.isdir("/etc"), "the wipe must not follow links"
    # The hand-off socket went with the boot program: nothing listens there any more.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        with pytest.raises(ConnectionRefusedError):
            s.connect("\0" + handoff_name(port)[1:])
    status, _, body = call(f"{gate}/assign", "POST", good, pool)
    assert status == 503, body


def _files_holding(root: str, needle: str) -> list[str]:
    """Every file under `root` (links not followed) whose bytes contain `needle`."""
    hits = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                if needle.encode() in f.read():
                    hits.append(path)
    return hits


def assert_no_token_left_for_model_code(pid: int, host_token: str, pool_token: str,
                                        roots: list[str]) -> list[str]:
    """Issue 37, point 3: what model code in the pod (the same user, started by the session
    server) can read. The session server's command line holds neither the token nor the path
    of a file that holds it; no file under `roots` (the run, hand-off, workspace and store
    folders) holds it; and neither the session server's token nor the pool token is in the
    session server's environment. Returns the session server's argv."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    assert host_token not in " ".join(argv), "the session server's token is on the command line"
    assert "--token-file" not in argv and "--token" not in argv, argv
    assert "--token-fd" in argv, argv
    fd = argv[argv.index("--token-fd") + 1]
    assert fd.isdigit() and int(fd) > 2, argv
    for arg in argv:
        if os.path.isfile(arg):
            with open(arg, "rb") as f:
                assert host_token.encode() not in f.read(), f"argv names {arg}, which holds it"
        elif os.path.isdir(arg):
            assert _files_holding(arg, host_token) == [], f"argv names {arg}, which holds it"
    for root in roots:
        assert _files_holding(root, host_token) == [], f"a file under {root} holds it"
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read()
    assert host_token.encode() not in environ
    assert pool_token.encode() not in environ
    return argv


def test_the_host_token_reaches_toolbox_through_a_pipe_and_nothing_else(
        start_boot, tokens, tmp_path):
    """The repro of issue 37, point 3: the boot passed
    `--token-file /run/toolbox/host-token`; model code read the path in
    /proc/PID/cmdline and then the file, and with the token answered its own approvals. Now
    the token goes down a pipe (`--token-fd N`) that the session server reads and closes; no
    file and no path is left."""
    port, gate_port = free_ports(2)
    boot = start_boot(port, gate_port)
    host_token = "host-token-" + os.urandom(12).hex()
    status, _, _ = call(f"http://127.0.0.1:{gate_port}/assign", "POST",
                        {"sid": "s-pipe", "token": host_token}, tokens["pool"][1])
    assert status == 202
    url = f"http://127.0.0.1:{port}"
    status, _, health = poll(lambda: _health(url, host_token), lambda r: r[0] == 200,
                             "the session server after the assignment")
    assert health["host"]["session"] == "s-pipe"
    status, _, _ = _health(url, "wrong-" + host_token)
    assert status == 401
    argv = assert_no_token_left_for_model_code(boot.pid, host_token, tokens["pool"][1],
                                               [str(tmp_path)])
    # The fake session server, like toolbox, closed the descriptor after reading it (the
    # number may have been reused since, by its listening socket, but not by a pipe).
    fd = argv[argv.index("--token-fd") + 1]
    try:
        assert not os.readlink(f"/proc/{boot.pid}/fd/{fd}").startswith("pipe:")
    except FileNotFoundError:
        pass


def test_a_restarted_host_container_is_assigned_again_through_the_same_gate(
        start_boot, tokens, tmp_path):
    """The gate outlives the `host` container: when the session server exits, the container
    restarts into the boot program, and the next assignment still needs (and gets) the pool
    token, which the `host` container never held."""
    port, gate_port = free_ports(2)
    pool = tokens["pool"][1]
    gate = f"http://127.0.0.1:{gate_port}"
    host_token = "host-token-restart-0123456789"
    first = start_boot(port, gate_port)
    gate_proc = start_boot.gates[gate_port]
    assert call(f"{gate}/assign", "POST", {"sid": "s-r", "token": host_token}, pool)[0] == 202
    url = f"http://127.0.0.1:{port}"
    poll(lambda: _health(url, host_token), lambda r: r[0] == 200, "the first session server")
    status, _, _ = call(f"{url}/api/sessions/s-r/park", "POST", {}, host_token)
    assert status == 202
    assert first.wait(timeout=10) == 0

    second = start_boot(port, gate_port)  # the container restarted
    assert start_boot.gates[gate_port] is gate_proc and gate_proc.poll() is None
    assert call(f"{gate}/assign", "POST", {"sid": "s-r", "token": host_token}, "wrong")[0] == 401
    assert call(f"{gate}/assign", "POST", {"sid": "s-r", "token": host_token}, pool)[0] == 202
    status, _, health = poll(lambda: _health(url, host_token), lambda r: r[0] == 200,
                             "the session server after the restart")
    assert health["host"] == {"session": "s-r", "epoch": 2}
    assert second.poll() is None


def test_bad_arguments_are_named(tmp_path):
    base = [sys.executable, BOOT, "--state-store", "file:///x", "--toolbox", sys.executable]
    for extra, named in [
        (["--listen", "nowhere", "--handoff-socket", "@x"], "--listen"),
        (["--handoff-socket", "@" + "x" * 120], "--handoff-socket"),
        (["--handoff-socket", str(tmp_path / "boot.sock")], "--handoff-socket"),
        (["--handoff-socket", "@with space"], "--handoff-socket"),
    ]:
        result = subprocess.run(base + extra, capture_output=True, text=True, timeout=30)
        assert result.returncode != 0, extra
        assert named in result.stderr, (extra, result.stderr)


def _health(url, token):
    try:
        return call(f"{url}/api/health", token=token, timeout=2)
    except OSError as e:  # between the exec and the session server's bind
        return (None, None, str(e))


def test_the_store_credentials_reach_toolbox_serve_from_the_gate_only(start_boot, tokens):
    """The `host` container is given no store credentials (PID 1 would keep them readable in
    /proc/1/environ): the gate passes its AWS_* variables with the assignment, and the boot
    program adds them to toolbox serve's environment at the exec."""
    port, gate_port = free_ports(2)
    boot = start_boot(port, gate_port)
    secret = start_boot.store_env["AWS_SECRET_ACCESS_KEY"]
    with open(f"/proc/{boot.pid}/environ", "rb") as f:
        assert secret.encode() not in f.read(), "the boot program started with the secret"
    host_token = "host-token-store-0123456789"
    status, _, _ = call(f"http://127.0.0.1:{gate_port}/assign", "POST",
                        {"sid": "s-store", "token": host_token}, tokens["pool"][1])
    assert status == 202
    url = f"http://127.0.0.1:{port}"
    poll(lambda: _health(url, host_token), lambda r: r[0] == 200, "the session server")
    with open(f"/proc/{boot.pid}/environ", "rb") as f:
        env = dict(line.split(b"=", 1) for line in f.read().split(b"\0") if b"=" in line)
    for name, value in start_boot.store_env.items():
        assert env.get(name.encode()) == value.encode(), name


def test_the_boot_takes_only_store_variables_with_an_assignment(start_boot, tokens):
    """What the hand-off may carry besides the session: AWS_* variables, short and
    printable; anything else (PATH, LD_PRELOAD, a NUL) is refused, and nothing starts."""
    import json as _json

    from test_gate import unix_post

    port, gate_port = free_ports(2)
    boot = start_boot(port, gate_port)
    base = {"sid": "s1", "token": "host-token-abcdefghijklmnop"}
    name = handoff_name(port)
    for env in [{"PATH": "/tmp"}, {"LD_PRELOAD": "/tmp/x.so"}, {"AWS_X": "a\u0000b"},
                {"AWS_X": "x" * 9000}, {"aws_x": "y"}, {"AWS_X": 1}, ["AWS_X"]]:
        status, body = unix_post(name, _json.dumps(base | {"env": env}).encode())
        assert status == 400, (env, body)
    assert boot.poll() is None
    status, _, health = call(f"http://127.0.0.1:{port}/api/health")
    assert health["status"] == "waiting"
