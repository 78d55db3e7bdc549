"""toolbox-k8s-boot, the warm pod's program, as a real process on 127.0.0.1."""

from __future__ import annotations

import os
import stat

from conftest import call, free_port, poll


def test_it_waits_refuses_bad_assignments_then_becomes_the_host(start_boot, tokens, tmp_path):
    port = free_port()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # What a previous host left in the pod's workspace (a container restart): wiped.
    (workspace / "old.txt").write_text("from the last host")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f").write_text("x")
    os.symlink("/etc", workspace / "link")
    boot = start_boot(port, workspace=str(workspace))
    url = f"http://127.0.0.1:{port}"
    pool = tokens["pool"][1]
    host_token = "host-token-abcdefghijklmnop"

    status, _, body = call(f"{url}/api/health")
    assert (status, body["status"]) == (503, "waiting")

    good = {"sid": "s1", "token": host_token}
    for token in [None, "wrong"]:
        status, _, _ = call(f"{url}/assign", "POST", good, token)
        assert status == 401
    for bad in [{"sid": ".x", "token": host_token}, {"sid": "a/b", "token": host_token},
                {"sid": "s1", "token": "short"}, {"sid": "s1", "token": "has space " * 3},
                {"sid": "s1"}, {"sid": "s1", "token": host_token, "extra": 1}, ["s1"]]:
        status, _, body = call(f"{url}/assign", "POST", bad, pool)
        assert status == 400, (bad, body)
    status, _, _ = call(f"{url}/other", "POST", good, pool)
    assert status == 404
    assert boot.poll() is None

    status, _, body = call(f"{url}/assign", "POST", good, pool)
    assert (status, body) == (202, {"sid": "s1", "state": "starting"})
    token_file = tmp_path / f"run-{port}" / "host-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text() == host_token + "\n"

    # The same process is now the host (the fake host asserts an empty workspace).
    status, _, health = poll(lambda: _health(url, host_token), lambda r: r[0] == 200,
                             "the host after the assignment")
    assert health["host"] == {"session": "s1", "epoch": 1}
    assert boot.poll() is None
    assert sorted(os.listdir(workspace)) == []
    assert os.path.isdir("/etc"), "the wipe must not follow links"


def _health(url, token):
    try:
        return call(f"{url}/api/health", token=token, timeout=2)
    except OSError as e:  # between the exec and the host's bind
        return (None, None, str(e))
