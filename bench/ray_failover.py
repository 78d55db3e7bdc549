"""Ray placement figures on a simulated cluster (head + 3 nodes on 127.0.0.1), through the real
toolbox binary: the time to place a new session, memory per placed session (session server +
actor), and failover time from a node kill to the first answered call, with health checks
tightened to 500 ms x 3 and with Ray's defaults (3 s x 5). Prints figures, not verdicts.

    deploy/ray's venv/bin/python bench/ray_failover.py [--bin target/debug/toolbox] [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy", "ray"))

from toolbox_ray.testing import TIGHT, SimCluster, host_pids, request, wait_until  # noqa: E402


def kib(pid: int, field: str) -> int:
    """A field of /proc/PID/smaps_rollup (Rss, Pss) in KiB."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def write(info: dict, path: str, content: str) -> None:
    r = request(
        "POST",
        f"{info['url']}/api/sessions/{info['sid']}/tools/file_manager__write",
        {"path": path, "content": content},
        token=info["token"],
    )
    assert r.status == 200, r


def failover(c: SimCluster, sid: str) -> tuple[float, float, float, float]:
    """Kills the node of `sid`; seconds until a call on its new session server is answered,
    until the restarted actor began, until its session server listened (wall clock, one
    machine), and until Ray's GCS marked the node dead."""
    import ray

    info = c.ensured(sid)
    write(info, "before-kill.txt", "x")
    time.sleep(1.0)  # a sync (every 300 ms) has it
    killed, killed_wall = time.monotonic(), time.time()
    c.kill_node(info["node"])
    # When Ray's GCS marks the node dead, watched beside the calls (every 50 ms, 60 s at most).
    seen_dead: list[float] = []

    def watch() -> None:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if not any(n["NodeID"] == info["node"] and n.get("Alive") for n in ray.nodes()):
                seen_dead.append(time.monotonic() - killed)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    deadline = killed + 180
    while time.monotonic() < deadline:
        r = c.ensure(sid, stale_epoch=info["epoch"], timeout=180)
        if r.status == 200 and r.json()["epoch"] > info["epoch"]:
            new = r.json()
            try:
                h = request("GET", f"{new['url']}/api/health", token=new["token"], timeout=30)
            except OSError:
                continue
            if h.status == 200:
                answered = time.monotonic() - killed
                actor = ray.get_actor(f"toolbox:session:{sid}", namespace="toolbox")
                detail = ray.get(actor.info.remote())
                watcher.join(60)
                return (
                    answered,
                    detail["actor_started_at"] - killed_wall,
                    detail["host_listening_at"] - killed_wall,
                    seen_dead[0] if seen_dead else float("nan"),
                )
        time.sleep(0.05)
    raise RuntimeError("no failover within 180 s")


def run(binary: str, trials: int, system_config: dict | None, label: str, placing: bool) -> None:
    tmp = tempfile.mkdtemp(prefix="toolbox-ray-bench-")
    c = SimCluster(tmp, binary, 12, 3, system_config, place_timeout_s=60.0)
    try:
        if placing:
            sids = [f"bench-{i:02}" for i in range(10)]
            took = []
            for sid in sids:
                t = time.monotonic()
                c.ensured(sid)
                took.append(time.monotonic() - t)
            # Ray keeps idle workers: a placement after the first ones reuses a started worker.
            print(
                f"time to place a new session (one at a time, 10): first {took[0]:.2f} s, "
                f"median {statistics.median(took):.2f} s, max {max(took):.2f} s"
            )
            rss, pss = [], []
            for sid in sids:
                info = c.ensured(sid)
                write(info, "a.txt", "hello")
                detail = request("GET", f"{c.url}/v1/sessions/{sid}").json()
                assert detail["state"] == "running", detail
            time.sleep(1.0)
            for sid in sids:
                info = c.ensured(sid)
                # The actor's pid is in info() (not part of the contract's answer): ask the actor.
                import ray

                actor = ray.get_actor(f"toolbox:session:{sid}", namespace="toolbox")
                detail = ray.get(actor.info.remote())
                pids = (detail["pid"], detail["actor_pid"])
                rss.append([kib(p, "Rss") for p in pids])
                pss.append([kib(p, "Pss") for p in pids])
            server_rss = statistics.median(r[0] for r in rss) / 1024
            actor_rss = statistics.median(r[1] for r in rss) / 1024
            server_pss = statistics.median(p[0] for p in pss) / 1024
            actor_pss = statistics.median(p[1] for p in pss) / 1024
            print(
                f"memory per placed session (median of 10, after one call): session server RSS "
                f"{server_rss:.0f} MiB (PSS {server_pss:.0f}), actor RSS {actor_rss:.0f} MiB "
                f"(PSS {actor_pss:.0f}); "
                f"together RSS {server_rss + actor_rss:.0f} MiB, PSS {server_pss + actor_pss:.0f} MiB"
            )
        times = []
        for k in range(trials):
            sid = f"failover-{k}"
            times.append(failover(c, sid))
            c.workers.append(c.add_node())
        print(
            f"failover, {label}: node kill to the first answered call on the new session server: "
            + ", ".join(f"{t[0]:.2f}" for t in times)
            + f" s (median {statistics.median(t[0] for t in times):.2f} s); "
            + "of which, to the restarted actor's start: "
            + ", ".join(f"{t[1]:.2f}" for t in times)
            + " s; to its session server listening: "
            + ", ".join(f"{t[2]:.2f}" for t in times)
            + " s; to the node marked dead (seen within 50 ms): "
            + ", ".join(f"{t[3]:.2f}" for t in times)
            + " s"
        )
        wait_until("session servers", lambda: host_pids(c.work_root), limit=5)
    finally:
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.abspath(os.path.join(HERE, ".."))
    parser.add_argument("--bin", default=os.environ.get("TOOLBOX_BIN", os.path.join(root, "target", "debug", "toolbox")))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--skip-default", action="store_true", help="only the tightened health checks")
    parser.add_argument(
        "--system-config",
        default="{}",
        help="more of Ray's system config for the tightened run, as JSON (e.g. '{\"enable_worker_prestart\": true}')",
    )
    args = parser.parse_args()
    binary = os.path.abspath(args.bin)
    if not os.access(binary, os.X_OK):
        print(f"no toolbox binary at {binary} (--bin or TOOLBOX_BIN)", file=sys.stderr)
        return 2
    print(f"binary {binary}; {os.cpu_count()} cores")
    extra = json.loads(args.system_config)
    label = "health checks 500 ms x 3" + (f" with {extra}" if extra else "")
    run(binary, args.trials, {**TIGHT, **extra}, label, placing=True)
    if not args.skip_default:
        run(binary, args.trials, None, "Ray's default health checks (3 s x 5)", placing=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
