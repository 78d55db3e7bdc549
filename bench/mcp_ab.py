"""Two `toolbox` binaries side by side over MCP stdio, fairly: the same calls alternate
between them on one raw line client, in both start orders (the server started second often
runs faster on a small VM, whichever it is), and the figure that counts is the geometric
mean of the two orders' ratios. For a change on the serving path: compare the binary before
it with the one after.

    python3 bench/mcp_ab.py OLD_TOOLBOX NEW_TOOLBOX [ROUNDS]

With PIN=1 in the environment, the client runs on CPU 0 and both servers on CPU 1
(`taskset`), the other fair set-up.

Calls: `file_manager__read` of a small file, and `run_python_code` `x = 1` (embedded
backend). Prints medians in microseconds per order, the new/old ratio per order, and their
geometric mean (below 1: the new binary is faster). Figures only, no verdict. Bounded: ROUNDS
(default 2000) calls per tool per order, 120 s per order at most.
"""

import math
import os
import statistics
import sys
import tempfile
import time

from mcp_stdio import Server

OLD, NEW = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
LIMIT_S = 120
CALLS = [
    ("file_manager__read", {"path": "small.txt"}),
    ("run_python_code", {"code": "x = 1"}),
]


def one_order(first, second, ws):
    """Starts `first` then `second`, and alternates the same calls between them."""
    servers = {first: Server(first, ws)}
    servers[second] = Server(second, ws)
    times = {(b, name): [] for b in (first, second) for name, _ in CALLS}
    for binary, server in servers.items():  # warm up: the interpreter, the caches
        for name, args in CALLS:
            for _ in range(50):
                server.call(name, args)
    deadline = time.time() + LIMIT_S
    for i in range(ROUNDS):
        if time.time() > deadline:
            break
        order = (first, second) if i % 2 == 0 else (second, first)
        for name, args in CALLS:
            for binary in order:
                times[(binary, name)].append(servers[binary].call(name, args))
    for server in servers.values():
        server.close()
    return {key: statistics.median(v) * 1e6 for key, v in times.items()}


def main():
    if os.environ.get("PIN"):
        os.sched_setaffinity(0, {0})
    ws = tempfile.mkdtemp(prefix="mcp-ab-")
    with open(os.path.join(ws, "small.txt"), "w") as f:
        f.write("hello\n" * 20)
    print(f"old: {OLD}\nnew: {NEW}\nrounds: {ROUNDS} per tool per order; load: {os.getloadavg()}")
    ratios = {name: [] for name, _ in CALLS}
    for label, (first, second) in (("old started first", (OLD, NEW)), ("new started first", (NEW, OLD))):
        medians = one_order(first, second, ws)
        print(f"== {label}")
        for name, _ in CALLS:
            old, new = medians[(OLD, name)], medians[(NEW, name)]
            ratios[name].append(new / old)
            print(f"  {name:20} old {old:7.1f} us   new {new:7.1f} us   new/old {new / old:.3f}")
    print("== geometric mean of the two orders' new/old")
    for name, r in ratios.items():
        print(f"  {name:20} {math.sqrt(r[0] * r[1]):.3f}")


if __name__ == "__main__":
    main()
