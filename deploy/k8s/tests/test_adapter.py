"""The placement adapter against a fake Kubernetes API server on 127.0.0.1, with the warm
pod's boot program (and behind it a fake session server, or the real toolbox binary) as real
processes. The test plays agent-sandbox's controller: it binds claims to "sandboxes" whose
pod IP is 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import (ADAPTER, API_TOKEN, NAMESPACE, FakeKube, call, drain, free_ports,
                      placement_role, poll, role_allows, stop, wait_for_line)
from test_boot import assert_no_token_left_for_model_code
from toolbox_k8s_adapter import Fail, claim_name, host_token, parse_sid

_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_API_PATH = re.compile(r"^/apis?/(?:(?P<group>[^/]+)/)?v1(?:beta1)?/namespaces/[^/]+/"
                       r"(?P<res>[^/]+)(?P<item>/[^/]+)?$")


def assert_the_role_allows_every_call(fake_kube):
    """Every API call the adapter made was allowed by manifests/placement.yaml's Role (the
    fake API server refuses the others with 403), and none touched a Secret."""
    assert fake_kube.forbidden == [], f"the Role refused {fake_kube.forbidden}"
    used = set()
    for method, path in fake_kube.requests:
        m = _API_PATH.match(path)
        assert m, path
        group = m["group"] if path.startswith("/apis/") else ""
        verb = {"GET": "get" if m["item"] else "list", "POST": "create", "PATCH": "patch",
                "DELETE": "delete"}[method]
        used.add((group, m["res"], verb))
    assert not [u for u in used if u[1] == "secrets"], used
    return used


def test_claim_names_are_dns_labels_and_distinct():
    sids = ["s42", "S42", "s.42", "s_42", "s-42", "-", "_", "__x__", "a" * 128, "A" * 128,
            "a" * 127 + "b", "Session.With.Dots", "0", "9-lives", "x" * 40 + "-y",
            "UPPER_lower.mixed-123"]
    names = [claim_name(s) for s in sids]
    for sid, name in zip(sids, names):
        assert len(name) <= 63, (sid, name)
        assert _DNS_1035.fullmatch(name), (sid, name)
    assert len(set(names)) == len(sids), "two session ids share a claim name"
    assert claim_name("s42") == claim_name("s42"), "names must be stable"
    assert claim_name("s42").startswith("tb-s42-")


@pytest.mark.parametrize("bad", ["", ".hidden", "a/b", "a b", "a:b", "é", "a" * 129, ".."])
def test_parse_sid_refuses_what_the_contract_does_not_allow(bad):
    with pytest.raises(Fail) as e:
        parse_sid(bad)
    assert e.value.status == 400


def test_a_bad_session_id_is_400_and_touches_nothing(fake_kube, start_adapter):
    adapter = start_adapter(*free_ports(2))
    for raw in [".hidden", "a%20b", "a" * 129, "%C3%A9", "a%2Fb"]:
        status, _, body = adapter.ensure(raw)
        assert status == 400, (raw, status, body)
        assert "session id" in body["error"]
        status, _, _ = adapter.call(f"/v1/sessions/{raw}")
        assert status == 400, raw
        status, _, _ = adapter.call(f"/v1/sessions/{raw}:park", "POST", {})
        assert status == 400, raw
    assert fake_kube.names("sandboxclaims") == []
    assert fake_kube.names("configmaps") == []


def test_callers_need_the_placement_token(fake_kube, start_adapter):
    adapter = start_adapter(*free_ports(2))
    for token in [None, "wrong"]:
        status, _, body = adapter.call("/v1/sessions", token=token)
        assert status == 401, body
        status, _, body = adapter.call("/v1/sessions/s1:ensure", "POST", {}, token=token)
        assert status == 401, body
    assert fake_kube.names("sandboxclaims") == []


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"stale_epoch": -1}',
                                  b'{"stale_epoch": "3"}', b'{"stale_epoch": true}',
                                  b'{"epoch": 3}'])
def test_a_bad_ensure_body_is_400(fake_kube, start_adapter, body):
    adapter = start_adapter(*free_ports(2))
    status, _, answer = adapter.ensure("s1", body)
    assert status == 400, answer
    assert fake_kube.names("sandboxclaims") == []


def test_ensure_places_a_session_and_is_idempotent(fake_kube, start_adapter, start_boot,
                                                    tokens):
    port, gate = free_ports(2)
    adapter = start_adapter(port, gate)
    sid = "Team.Alpha_s42"
    name = claim_name(sid)

    # No sandbox yet: 503 with Retry-After, one claim (valid against the vendored CRD, or
    # the fake API server would have refused it) and one record (a ConfigMap) whose nonce,
    # with the adapter's key, gives the session server's token; the record does not hold the
    # token.
    for _ in range(2):
        status, headers, body = adapter.ensure(sid)
        assert status == 503, body
        assert int(headers["Retry-After"]) >= 1
        assert "error" in body
    assert fake_kube.names("sandboxclaims") == [name]
    assert fake_kube.names("configmaps") == [name]
    assert fake_kube.names("secrets") == []
    claim = fake_kube.get("sandboxclaims", name)
    assert claim["spec"] == {"warmPoolRef": {"name": "toolbox-hosts"}}
    assert claim["metadata"]["annotations"]["toolbox.dev/session"] == sid
    record = fake_kube.get("configmaps", name)
    assert record["metadata"]["annotations"]["toolbox.dev/session"] == sid
    token = host_token(tokens["host-key"][1], sid, record["data"]["nonce"])
    assert len(token) >= 32
    assert token not in json.dumps(record)

    status, _, body = adapter.call(f"/v1/sessions/{sid}")
    assert (status, body["state"]) == (200, "placing")

    # The claim is bound, but not ready: still 503.
    fake_kube.bind_claim(name, ready=False)
    status, headers, body = adapter.ensure(sid)
    assert status == 503 and "Retry-After" in headers, body

    # Ready, with a warm pod waiting on the pod IP: the adapter assigns it, and the session
    # server answers after it started.
    boot = start_boot(port, gate)
    fake_kube.bind_claim(name, ready=True, node="node-a")
    status, headers, body = adapter.ensure(sid)
    assert status == 503 and "Retry-After" in headers, body
    status, _, first = poll(lambda: adapter.ensure(sid), lambda r: r[0] != 503,
                            "ensure after the assignment")
    assert status == 200, first
    assert first == {"sid": sid, "url": f"http://127.0.0.1:{port}", "token": token,
                     "epoch": 1, "node": "node-a"}

    # Idempotent: the same session server every time, and still one claim.
    for _ in range(3):
        status, _, again = adapter.ensure(sid)
        assert (status, again) == (200, first)
    assert fake_kube.names("sandboxclaims") == [name]

    status, _, body = adapter.call(f"/v1/sessions/{sid}")
    assert (status, body) == (200, {"sid": sid, "state": "running", "epoch": 1,
                                    "node": "node-a"})
    status, _, body = adapter.call("/v1/sessions")
    assert (status, body) == (200, {"sessions": [{"sid": sid, "state": "running",
                                                   "epoch": 1, "node": "node-a"}]})
    assert boot.poll() is None
    assert_the_role_allows_every_call(fake_kube)


def test_park_deletes_the_claim_and_ensure_resumes_at_a_higher_epoch(
        fake_kube, start_adapter, start_boot, tmp_path):
    port, gate = free_ports(2)
    adapter = start_adapter(port, gate)
    sid = "s-park"
    name = claim_name(sid)
    status, _, _ = adapter.call(f"/v1/sessions/{sid}:park", "POST", {})
    assert status == 404
    status, _, _ = adapter.call(f"/v1/sessions/{sid}")
    assert status == 404

    adapter.ensure(sid)
    boot = start_boot(port, gate)
    fake_kube.bind_claim(name)
    status, _, placed = poll(lambda: adapter.ensure(sid), lambda r: r[0] == 200, "placed")
    assert placed["epoch"] == 1

    status, _, body = adapter.call(f"/v1/sessions/{sid}:park", "POST", {})
    assert (status, body) == (202, {"sid": sid, "state": "parked"})
    assert fake_kube.names("sandboxclaims") == []
    # The session server was told to park (it syncs and exits 0) before the claim went.
    assert (tmp_path / "store" / sid / "parked").read_text() == "1\n"
    assert boot.wait(timeout=10) == 0
    status, _, body = adapter.call(f"/v1/sessions/{sid}")
    assert (status, body) == (200, {"sid": sid, "state": "parked", "epoch": 1, "node": ""})
    status, _, body = adapter.call("/v1/sessions")
    assert body == {"sessions": [{"sid": sid, "state": "parked", "epoch": 1, "node": ""}]}

    # The next ensure makes a new claim; a new warm pod resumes the session at epoch 2,
    # with the same session server token.
    status, _, _ = adapter.ensure(sid)
    assert status == 503
    assert fake_kube.names("sandboxclaims") == [name]
    start_boot(port, gate)
    fake_kube.bind_claim(name, sandbox="toolbox-hosts-other", node="node-b")
    status, _, resumed = poll(lambda: adapter.ensure(sid), lambda r: r[0] == 200, "resumed")
    assert (resumed["epoch"], resumed["node"], resumed["token"]) == (2, "node-b",
                                                                     placed["token"])
    used = assert_the_role_allows_every_call(fake_kube)
    assert ("extensions.agents.x-k8s.io", "sandboxclaims", "delete") in used
    assert ("", "configmaps", "list") in used


def test_a_stale_epoch_whose_host_is_gone_gets_a_new_sandbox(
        fake_kube, start_adapter, start_boot):
    port, gate = free_ports(2)
    adapter = start_adapter(port, gate)
    sid = "s-lost"
    name = claim_name(sid)
    adapter.ensure(sid)
    boot = start_boot(port, gate)
    fake_kube.bind_claim(name)
    status, _, placed = poll(lambda: adapter.ensure(sid), lambda r: r[0] == 200, "placed")
    assert placed["epoch"] == 1

    stop(boot)  # the node is lost: nothing answers on the pod IP any more
    # Without the router's hint the adapter only waits: a session server may be restarting.
    status, headers, body = adapter.ensure(sid)
    assert status == 503 and "Retry-After" in headers, body
    assert fake_kube.names("sandboxclaims") == [name]
    # A hint of an older epoch than the claim's session server changes nothing either.
    status, _, body = adapter.ensure(sid, {"stale_epoch": 0})
    assert status == 503
    assert fake_kube.get("sandboxclaims", name)["status"]["sandbox"]["podIPs"]
    # The router says epoch 1 did not answer, and it does not answer the adapter: the claim
    # goes, and the next ensure places the session anew.
    status, headers, body = adapter.ensure(sid, {"stale_epoch": 1})
    assert status == 503 and "Retry-After" in headers, body
    assert "unreachable" in body["error"]
    assert fake_kube.names("sandboxclaims") == []
    status, _, _ = adapter.ensure(sid)
    assert status == 503
    assert "status" not in fake_kube.get("sandboxclaims", name)
    start_boot(port, gate)
    fake_kube.bind_claim(name, node="node-c")
    status, _, moved = poll(lambda: adapter.ensure(sid), lambda r: r[0] == 200, "moved")
    assert (moved["epoch"], moved["node"]) == (2, "node-c")
    assert_the_role_allows_every_call(fake_kube)


def test_a_claim_of_another_session_is_never_handed_out(fake_kube, start_adapter):
    adapter = start_adapter(*free_ports(2))
    sid = "s-mine"
    adapter.ensure(sid)
    # Someone else's object under the name (as a hash collision would make it).
    claim = fake_kube.get("sandboxclaims", claim_name(sid))
    with fake_kube.lock:
        store = fake_kube.objects[fake_kube.coll("sandboxclaims")]
        store[claim_name(sid)]["metadata"]["annotations"]["toolbox.dev/session"] = "other"
    status, _, body = adapter.ensure(sid)
    assert status == 409, body
    assert claim["metadata"]["name"] == claim_name(sid)


def test_the_fake_api_server_refuses_a_claim_the_crd_refuses(fake_kube):
    """The adapter's claims are checked against the vendored CRD: this shows the check
    can fail (a v1beta1 claim needs spec.warmPoolRef)."""
    body = {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
            "metadata": {"name": "tb-x-0123"}, "spec": {"sandboxTemplateRef": {"name": "t"}}}
    status, _, answer = call(
        f"{fake_kube.url}/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/"
        "sandboxclaims", "POST", body, API_TOKEN)
    assert status == 422, answer
    assert "warmPoolRef" in answer["message"]


def _toolbox_binary() -> str:
    explicit = os.environ.get("TOOLBOX_BIN")
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
    return os.path.join(target, "debug", "toolbox")


def test_ensure_and_park_with_the_real_toolbox_binary(fake_kube, start_adapter, start_boot,
                                                      tmp_path, tokens):
    """The whole path on one machine: claim, warm pod, assignment, `toolbox serve` in
    session server mode (its own health and park), then the resumed session server at the
    next epoch."""
    binary = _toolbox_binary()
    assert os.access(binary, os.X_OK), (
        f"{binary} is missing: build it (cargo build -p toolbox) or set TOOLBOX_BIN")
    help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    assert "--session" in help_text, f"{binary} has no session server mode"
    # --epoch next arrives with the router work; count epochs here until it has.
    epoch_help = re.search(r"--epoch\b.*?(?=\n\s*--|\Z)", help_text, re.S)
    supports_next = bool(epoch_help and "next" in epoch_help.group(0))
    epochs = iter(["next"] * 2) if supports_next else iter(["1", "2"])
    assert "--token-fd" in help_text, (
        f"{binary} has no `serve --token-fd`: the boot program hands the session server's token "
        "over a pipe (issue 37); rebuild it")
    store = f"file://{tmp_path / 'real-store'}"
    port, gate = free_ports(2)
    adapter = start_adapter(port, gate)
    sid = "real-s1"
    name = claim_name(sid)
    adapter.ensure(sid)
    boot = start_boot(port, gate, toolbox=binary, epoch=next(epochs), store=store)
    fake_kube.bind_claim(name)
    status, _, placed = poll(lambda: adapter.ensure(sid), lambda r: r[0] == 200,
                             f"the real session server of {sid}")
    assert placed["epoch"] == 1 and placed["url"] == f"http://127.0.0.1:{port}"
    status, _, health = call(f"{placed['url']}/api/health", token=placed["token"])
    assert status == 200 and health["host"]["session"] == sid
    status, _, _ = call(f"{placed['url']}/api/health", token="wrong-token")
    assert status == 401
    # What model code in the pod could read: no token or path to it in the real session
    # server's command line, no file holding it, neither token in its environment.
    assert_no_token_left_for_model_code(boot.pid, placed["token"], tokens["pool"][1],
                                        [str(tmp_path)])
    # The store's secret came from the gate into toolbox serve's environment, and toolbox
    # took it out of its environment block at once (children never inherit it).
    with open(f"/proc/{boot.pid}/environ", "rb") as f:
        environ = f.read()
    assert start_boot.store_env["AWS_SECRET_ACCESS_KEY"].encode() not in environ
    assert b"AWS_REGION=eu-west-1" in environ

    status, _, body = adapter.call(f"/v1/sessions/{sid}:park", "POST", {})
    assert status == 202, body
    assert boot.wait(timeout=60) == 0, "a parked session server exits 0"

    adapter.ensure(sid)
    start_boot(port, gate, toolbox=binary, epoch=next(epochs), store=store,
               workspace=str(tmp_path / "ws-second"))
    fake_kube.bind_claim(name, sandbox="toolbox-hosts-second")
    status, _, resumed = poll(lambda: adapter.ensure(sid), lambda r: r[0] == 200,
                              f"the resumed session server of {sid}")
    assert resumed["epoch"] == 2
    assert shutil.which(binary) or os.path.exists(binary)


def test_oversized_bodies_and_unknown_endpoints_are_refused(fake_kube, start_adapter):
    adapter = start_adapter(*free_ports(2))
    big = b'{"stale_epoch": 1, "pad": "' + b"x" * (70 * 1024) + b'"}'
    status, _, body = adapter.ensure("s1", big)
    assert status == 413, body
    for path, method in [("/v1/sessions/s1:delete", "POST"), ("/v1/other", "GET"),
                         ("/v1/sessions/s1", "DELETE"), ("/v1/sessions/s1", "POST")]:
        status, _, body = adapter.call(path, method, {} if method == "POST" else None)
        assert status in (404, 405), (path, method, status, body)
        assert "error" in body
    assert fake_kube.names("sandboxclaims") == []
    # The adapter still answers after all that.
    status, _, body = adapter.call("/v1/sessions")
    assert (status, body) == (200, {"sessions": []})


def test_concurrent_ensures_make_one_claim_and_agree(fake_kube, start_adapter, start_boot):
    """Two adapter replicas and several callers racing on one new session."""
    from concurrent.futures import ThreadPoolExecutor

    port, gate = free_ports(2)
    adapters = [start_adapter(port, gate), start_adapter(port, gate)]
    sid = "s-race"
    with ThreadPoolExecutor(8) as pool:
        first = list(pool.map(lambda i: adapters[i % 2].ensure(sid), range(8)))
    assert {status for status, _, _ in first} == {503}
    assert fake_kube.names("sandboxclaims") == [claim_name(sid)]
    assert fake_kube.names("configmaps") == [claim_name(sid)]

    start_boot(port, gate)
    fake_kube.bind_claim(claim_name(sid))
    poll(lambda: adapters[0].ensure(sid), lambda r: r[0] == 200, "placed")
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: adapters[i % 2].ensure(sid), range(8)))
    assert {status for status, _, _ in answers} == {200}
    assert len({tuple(sorted(body.items())) for _, _, body in answers}) == 1


def test_the_adapters_credentials_read_no_secret(fake_kube, start_adapter, start_boot):
    """Issue 37, point 8: the adapter's Role could get, list and patch every Secret of the
    namespace: the store's credentials, the router's, placement and pool tokens. As the
    adapter's service account (the fake API server applies the Role), each of those is now
    refused, while the adapter's own work still goes through."""
    with fake_kube.lock:
        for secret in ("toolbox-store", "toolbox-router-token", "toolbox-pool-token",
                       "toolbox-host-key"):
            fake_kube.objects.setdefault(fake_kube.coll("secrets"), {})[secret] = {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret},
                "data": {"token": "c2VjcmV0"}}
    base = f"{fake_kube.url}/api/v1/namespaces/{NAMESPACE}/secrets"
    for method, url, body in [("GET", f"{base}/toolbox-store", None), ("GET", base, None),
                              ("GET", f"{base}?labelSelector=x%3Dy", None),
                              ("POST", base, {"apiVersion": "v1", "kind": "Secret",
                                              "metadata": {"name": "tb-x"}})]:
        status, _, answer = call(url, method, body, API_TOKEN)
        assert status == 403, (method, url, answer)
    role = placement_role()
    for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
        for name in (None, "toolbox-store", "toolbox-pool-token", "tb-s1-0123456789ab"):
            assert not role_allows(role, verb, "", "secrets", name), (verb, name)
    with fake_kube.lock:  # what follows is the adapter's own work
        fake_kube.requests.clear()
        fake_kube.forbidden.clear()

    port, gate = free_ports(2)
    adapter = start_adapter(port, gate)
    adapter.ensure("s-rbac")
    start_boot(port, gate)
    fake_kube.bind_claim(claim_name("s-rbac"))
    status, _, placed = poll(lambda: adapter.ensure("s-rbac"), lambda r: r[0] == 200, "placed")
    assert adapter.call("/v1/sessions/s-rbac:park", "POST", {})[0] == 202
    assert adapter.call("/v1/sessions")[0] == 200
    assert_the_role_allows_every_call(fake_kube)


def test_the_role_check_of_the_fake_api_server_can_fail(start_adapter, tokens):
    """The fake API server's 403s come from the Role: with a Role that lacks configmaps,
    the adapter cannot keep its records and says so."""
    role = placement_role()
    role["rules"] = [r for r in role["rules"] if "configmaps" not in r["resources"]]
    narrow = FakeKube(role)
    proc = subprocess.Popen(
        [sys.executable, ADAPTER, "--listen", "127.0.0.1:0", "--api-server", narrow.url,
         "--namespace", NAMESPACE, "--api-token-file", tokens["api"][0],
         "--pool-token-file", tokens["pool"][0], "--host-key-file", tokens["host-key"][0]],
        stderr=subprocess.PIPE, text=True)
    try:
        line = wait_for_line(proc, "listening on")
        drain(proc)
        url = re.search(r"http://\S+", line).group(0)
        status, _, body = call(f"{url}/v1/sessions/s1:ensure", "POST", {})
        assert status == 502, body
        assert "Kubernetes refused" in body["error"] and "configmaps" in body["error"], body
        assert narrow.forbidden, "the fake API server refused nothing"
    finally:
        stop(proc)
        narrow.close()


def test_a_deleted_record_retires_the_sessions_token(fake_kube, start_adapter, start_boot):
    """The session server's token is derived from the adapter's key and the record's nonce,
    so deleting a session's record (a session finished for good) retires its token: the same
    id placed again gets another one."""
    port, gate = free_ports(2)
    adapter = start_adapter(port, gate)
    sid = "s-retire"
    name = claim_name(sid)
    adapter.ensure(sid)
    start_boot(port, gate)
    fake_kube.bind_claim(name)
    status, _, first = poll(lambda: adapter.ensure(sid), lambda r: r[0] == 200, "placed")
    assert adapter.call(f"/v1/sessions/{sid}:park", "POST", {})[0] == 202
    # The operator deletes the parked session's record.
    with fake_kube.lock:
        del fake_kube.objects[fake_kube.coll("configmaps")][name]
    assert adapter.call(f"/v1/sessions/{sid}")[0] == 404
    adapter.ensure(sid)
    start_boot(port, gate)
    fake_kube.bind_claim(name, sandbox="toolbox-hosts-again")
    status, _, again = poll(lambda: adapter.ensure(sid), lambda r: r[0] == 200, "placed again")
    assert again["token"] != first["token"]


def test_host_tokens_are_keyed_per_session_and_per_record():
    key = "k" * 43
    token = host_token(key, "s1", "n" * 32)
    assert token == host_token(key, "s1", "n" * 32), "the same inputs, the same token"
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)
    others = {host_token("j" * 43, "s1", "n" * 32), host_token(key, "s2", "n" * 32),
              host_token(key, "S1", "n" * 32), host_token(key, "s1", "m" * 32),
              host_token(key, "s1n", "n" * 31)}
    assert token not in others and len(others) == 5


def test_the_host_key_must_be_long_enough(tmp_path, tokens):
    short = tmp_path / "short-key"
    short.write_text("too-short\n")
    for key_file in (str(short), str(tmp_path / "missing")):
        result = subprocess.run(
            [sys.executable, ADAPTER, "--listen", "127.0.0.1:0", "--api-server",
             "http://127.0.0.1:9", "--namespace", NAMESPACE,
             "--pool-token-file", tokens["pool"][0], "--host-key-file", key_file],
            capture_output=True, text=True, timeout=30)
        assert result.returncode != 0
        assert "--host-key-file" in result.stderr, result.stderr
