"""The placement adapter on a simulated cluster (head + 3 nodes on 127.0.0.1, health checks
at 500 ms x 3), driven over HTTP, with the real toolbox binary as the session servers:
spread, idempotent ``:ensure``, a node killed mid-turn, no free slot, park and idle park,
drain."""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import threading
import time

import pytest

pytest.importorskip("ray", reason="Ray is not installed here: pip install -r deploy/ray/requirements.txt")

from conftest import LIMIT, Sse, host_pids, request, wait_until
from fake_llm import FakeLlm, ends_with_tool_result, last_user_text


def call(info: dict, tool: str, args: dict) -> dict:
    r = request("POST", f"{info['url']}/api/sessions/{info['sid']}/tools/{tool}", args, token=info["token"])
    assert r.status == 200, r
    body = r.json()
    assert body["status"] == "done", body
    return body


def epochs(store: str, sid: str) -> list[int]:
    folder = os.path.join(store, "sessions", sid, "epochs")
    return sorted(int(n) for n in os.listdir(folder)) if os.path.isdir(folder) else []


def head_manifest(store: str, sid: str) -> dict:
    heads = os.path.join(store, "sessions", sid, "heads")
    newest = max(int(n) for n in os.listdir(heads))
    with open(os.path.join(heads, f"{newest:020}")) as f:
        head = json.load(f)
    if not head.get("manifest"):
        return {}
    with open(os.path.join(store, head["manifest"])) as f:
        return json.load(f)


def test_thirty_sessions_spread_over_the_nodes_and_ensure_is_idempotent(sim_cluster):
    c = sim_cluster(slots=12)
    sids = [f"spread-{i:02}" for i in range(30)]
    took: dict[str, float] = {}

    def place(sid: str) -> dict:
        t = time.monotonic()
        info = c.ensured(sid)
        took[sid] = time.monotonic() - t
        return info

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        placed = dict(zip(sids, pool.map(place, sids)))
    spread = collections.Counter(placed[s]["node"] for s in sids)
    print(
        f"\nspread of 30 sessions over 3 nodes: {sorted(spread.values(), reverse=True)}; "
        f"time to place (6 at a time): median {sorted(took.values())[15]:.2f} s, max {max(took.values()):.2f} s"
    )
    assert set(spread) == {n.node_id for n in c.workers}, spread
    assert min(spread.values()) >= 5, f"SPREAD left a node nearly empty: {spread}"
    # Idempotent: every later call answers the same session server, and nothing claimed a
    # second epoch.
    for sid in sids:
        again = c.ensured(sid)
        assert (again["url"], again["token"], again["epoch"]) == (
            placed[sid]["url"],
            placed[sid]["token"],
            placed[sid]["epoch"],
        )
        assert epochs(c.store, sid) == [1]
    assert len(host_pids(c.work_root)) == 30
    listing = request("GET", f"{c.url}/v1/sessions").json()["sessions"]
    assert [s["sid"] for s in listing] == sids
    assert {s["state"] for s in listing} == {"running"}
    # Racing ensures of one new session (the create race): one actor, one session server,
    # one epoch.
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        raced = list(pool.map(lambda _: c.ensured("raced"), range(6)))
    assert len({(r["url"], r["epoch"]) for r in raced}) == 1, raced
    assert epochs(c.store, "raced") == [1]


def test_a_node_killed_mid_turn_moves_the_session_to_a_new_epoch(sim_cluster):
    def script(messages):
        if last_user_text(messages) == "build it" and not ends_with_tool_result(messages):
            return {"call": ("k1", "shell", {"command": "echo started-k1; sleep 60; echo never"})}
        return {"text": "unexpected"}

    llm = FakeLlm(script)
    c = sim_cluster(host_env=llm.env())
    sid = "moving"
    old = c.ensured(sid)
    assert old["epoch"] == 1
    call(old, "file_manager__write", {"path": "notes/plan.md", "content": "1. build\n"})
    call(old, "memory__save", {"title": "port", "text": "the service listens on 8123"})
    events = Sse(f"{old['url']}/api/sessions/{sid}/events", token=old["token"])
    r = request("POST", f"{old['url']}/api/sessions/{sid}/turns", {"message": "build it"}, token=old["token"])
    assert r.status == 202, r
    turn = r.json()["turn_id"]
    events.until("tool_call_output")
    started = events.until("turn_started")
    # A periodic sync records the open turn (and the files) before the kill.
    wait_until("a sync naming the open turn", lambda: head_manifest(c.store, sid).get("open_turn") == turn)
    old_pids = host_pids(c.work_root)
    assert len(old_pids) == 1
    killed_at = time.monotonic()
    c.kill_node(old["node"])
    # The old session server dies with its node: nothing orphaned.
    wait_until("the old session server to end", lambda: old_pids[0] not in host_pids(c.work_root))

    def moved():
        r = c.ensure(sid, stale_epoch=1, timeout=LIMIT)
        return r.json() if r.status == 200 and r.json()["epoch"] > 1 else None

    new = wait_until("the session on another node", moved, every=0.2)
    failover = time.monotonic() - killed_at
    print(f"\nnode kill to a new session server answering :ensure: {failover:.2f} s")
    assert new["node"] != old["node"] and new["epoch"] == 2, new
    assert epochs(c.store, sid) == [1, 2]
    # The client reconnects with the last id it saw: the rest of the old epoch's events, then
    # session_resumed, then the interrupted turn.
    seen = events.events[started]["id"]
    events.close()
    replay = Sse(f"{new['url']}/api/sessions/{sid}/events", token=new["token"], last_event_id=seen)
    resumed = replay.until("session_resumed")
    old_kinds = [e["data"]["type"] for e in events.events[started + 1 :]]
    assert replay.kinds()[:resumed] == old_kinds[:resumed], (replay.kinds(), old_kinds)
    assert replay.events[resumed]["data"]["lost"] == ["python", "background_jobs", "pending_approvals"]
    finished = replay.until("turn_finished", resumed)
    assert replay.events[finished]["data"]["turn_id"] == turn
    assert replay.events[finished]["data"]["stop_reason"] == "interrupted"
    replay.close()
    # Files, messages and memory equal the last sync.
    r = request("POST", f"{new['url']}/api/sessions/{sid}/tools/file_manager__read", {"path": "notes/plan.md"}, token=new["token"])
    assert r.status == 200 and "1. build" in json.dumps(r.json()), r
    found = call(new, "memory__search", {"query": "service listens"})
    assert "8123" in json.dumps(found), found
    messages = request("GET", f"{new['url']}/api/sessions/{sid}/messages", token=new["token"]).json()["messages"]
    assert messages[-1]["role"] == "tool" and "interrupted" in messages[-1]["content"], messages[-1]
    # The old session server's token does not open the new session server.
    assert request("GET", f"{new['url']}/api/sessions", token=old["token"]).status == 401
    assert len(host_pids(c.work_root)) == 1
    llm.close()


def test_no_free_slot_is_503_and_a_new_node_recovers_the_sessions(sim_cluster):
    c = sim_cluster(slots=1, place_timeout_s=3.0)
    infos = {sid: c.ensured(sid) for sid in ("full-a", "full-b", "full-c")}
    assert len({i["node"] for i in infos.values()}) == 3
    for sid, info in infos.items():
        call(info, "file_manager__write", {"path": "who.txt", "content": sid})
    # A fourth session finds no slot: 503 with Retry-After, and nothing is left behind.
    r = c.ensure("full-d")
    assert r.status == 503 and r.headers.get("retry-after") == "2", r
    assert "toolbox_slot" in r.json()["error"]
    assert request("GET", f"{c.url}/v1/sessions/full-d").status == 404
    # Kill a node: its session waits for a slot (503, "placing"), the others still answer.
    victim = "full-b"
    wait_until("a sync of who.txt", lambda: "who.txt" in json.dumps(head_manifest(c.store, victim)))
    c.kill_node(infos[victim]["node"])
    wait_until(
        "the lost session to wait for a slot",
        lambda: request("GET", f"{c.url}/v1/sessions/{victim}").json().get("state") == "placing",
    )
    r = c.ensure(victim, stale_epoch=1)
    assert r.status == 503 and r.headers.get("retry-after"), r
    assert c.ensured("full-a")["epoch"] == 1
    # A new node: the session resumes there at the next epoch, with its files.
    c.workers.append(c.add_node())
    back = wait_until(
        "the session placed on the new node",
        lambda: (lambda r: r.json() if r.status == 200 else None)(c.ensure(victim, stale_epoch=1)),
        every=0.5,
    )
    assert back["epoch"] == 2 and back["node"] == c.workers[-1].node_id, back
    r = request("POST", f"{back['url']}/api/sessions/{victim}/tools/file_manager__read", {"path": "who.txt"}, token=back["token"])
    assert r.status == 200 and victim in json.dumps(r.json()), r


def test_park_and_idle_park_free_the_slot_and_resume_at_the_next_epoch(sim_cluster):
    c = sim_cluster(slots=2, nodes=1, idle_park_s=3.0, idle_check_s=0.5)
    # Contract errors first.
    assert c.ensure("..bad").status == 400
    assert c.ensure(".hidden").status == 400
    assert request("POST", f"{c.url}/v1/sessions/ok:ensure", {"stale_epoch": "x"}).status == 400
    assert request("POST", f"{c.url}/v1/sessions/ok:ensure", {"other": 1}).status == 400
    assert request("POST", f"{c.url}/v1/sessions/nobody:park", {}).status == 404
    assert request("GET", f"{c.url}/v1/sessions/nobody").status == 404
    # Park by hand: the session server syncs and exits, the slot is free, :ensure resumes
    # it.
    a = c.ensured("parked-by-hand")
    call(a, "file_manager__write", {"path": "a.txt", "content": "kept"})
    r = request("POST", f"{c.url}/v1/sessions/parked-by-hand:park", {})
    assert r.status == 202 and r.json() == {"sid": "parked-by-hand", "state": "parked"}, r
    status = request("GET", f"{c.url}/v1/sessions/parked-by-hand").json()
    assert status["state"] == "parked" and status["epoch"] == 1, status
    wait_until("the parked session server to exit", lambda: not host_pids(c.work_root))
    # Idle: a session left alone is parked by its actor.
    b = c.ensured("left-alone")
    call(b, "file_manager__write", {"path": "b.txt", "content": "kept too"})
    wait_until(
        "the idle session to be parked",
        lambda: request("GET", f"{c.url}/v1/sessions/left-alone").json().get("state") == "parked",
        limit=LIMIT,
        every=0.5,
    )
    wait_until("the idle session server to exit", lambda: not host_pids(c.work_root))
    # Both slots are free again, and both sessions come back with their files.
    for sid, path, text in (("parked-by-hand", "a.txt", "kept"), ("left-alone", "b.txt", "kept too")):
        info = c.ensured(sid)
        assert info["epoch"] == 2, info
        r = request("POST", f"{info['url']}/api/sessions/{sid}/tools/file_manager__read", {"path": path}, token=info["token"])
        assert r.status == 200 and text in json.dumps(r.json()), r
    assert request("GET", f"{c.url}/v1/sessions/left-alone").json()["state"] == "running"


def test_a_graceful_drain_loses_no_call(sim_cluster):
    c = sim_cluster(slots=4)
    sid = "drained"
    info = c.ensured(sid)
    first_node = info["node"]
    acked: list[int] = []
    stop = threading.Event()
    moves: list[int] = []

    def writer() -> None:
        # A client that does what the router does: on a refused call, ask again, once.
        current = dict(info)
        for i in range(10_000):
            if stop.is_set():
                return
            for _ in range(200):
                try:
                    r = request(
                        "POST",
                        f"{current['url']}/api/sessions/{sid}/tools/file_manager__write",
                        {"path": f"calls/{i:05}.txt", "content": str(i)},
                        token=current["token"],
                        timeout=30,
                    )
                    if r.status == 200 and r.json().get("status") == "done":
                        acked.append(i)
                        break
                except OSError:
                    pass
                r = c.ensure(sid, stale_epoch=current["epoch"])
                if r.status == 200:
                    if r.json()["epoch"] != current["epoch"]:
                        moves.append(r.json()["epoch"])
                    current = r.json()
                else:
                    time.sleep(0.2)
            else:
                raise AssertionError(f"call {i} never landed")

    t = threading.Thread(target=writer)
    t.start()
    wait_until("a few calls", lambda: len(acked) >= 5)
    r = request("POST", f"{c.url}/v1/nodes/{first_node}:drain", {})
    assert r.status == 202 and r.json()["parked"] == [sid], r
    wait_until("calls on the new session server", lambda: moves and len(acked) >= 15)
    stop.set()
    t.join(LIMIT)
    assert not t.is_alive()
    now = c.ensured(sid)
    assert now["node"] != first_node and now["epoch"] == 2, now
    # Every acknowledged call's file is there, in order, none missing.
    import ray

    actor = ray.get_actor(f"toolbox:session:{sid}", namespace="toolbox")
    workspace = ray.get(actor.info.remote(), timeout=LIMIT)["workspace"]
    on_disk = set(os.listdir(os.path.join(workspace, "calls")))
    missing = [i for i in acked if f"{i:05}.txt" not in on_disk]
    assert not missing, f"calls acknowledged but lost in the drain: {missing}"
    # Ray places nothing new on the drained node.
    for k in range(4):
        assert c.ensured(f"after-drain-{k}")["node"] != first_node
