"""Fair side-by-side figures for the bench/ scripts (stdlib only).

On a small VM, of two servers driven alternately by one client, the one started second often
runs faster, whichever it is. So every interleaved comparison runs in both start orders, with
fresh processes each time, and the figure that counts is the geometric mean of the two
orders' ratios. With PIN=1 in the environment the client runs on CPU 0 and the servers on
CPU 1, the other fair set-up.

As a module:

- `pin_client()`: with PIN, this process (call it first, before any thread starts) on CPU 0;
- `server_argv(argv)`: argv under `taskset -c 1` with PIN; `pin_server(pid)` moves every
  thread of a process a library started (an ipykernel, say) to CPU 1;
- `both_orders(a, b, measure)`: starts side a then side b, runs `measure(a, b)`, closes both;
  then the same with fresh sides started b then a;
- `report(sides, orders)`: per order, each side's median (p90, p99), then each side's ratio
  to the first side per order and the geometric mean of those ratios.

As a script, whole processes against each other, interleaved: every round runs every
command once, rounds 1, 3, ... in the order given and rounds 2, 4, ... reversed (none is
always first; give an even number of runs):

    python3 bench/fair.py [--runs N] [--warmup N] NAME 'CMD ARGS' [NAME 'CMD ARGS' ...]

CMD ARGS is split as a shell would split words (shlex), and run without a shell, stdout and
stderr to /dev/null; a command that exits non-zero stops the run. Prints wall milliseconds
per order (median, min, max) and each command's time over the first command's, per order and
their geometric mean. Whole processes are not pinned, PIN or not (a multi-threaded tool on
one CPU measures something else). Figures only, no verdict.
"""

import argparse
import math
import os
import shlex
import statistics
import subprocess
import time

PIN = bool(os.environ.get("PIN"))
CLIENT_CPU, SERVER_CPU = 0, 1


def pin_client():
    """With PIN, this thread, and every thread and child it starts later, on CPU 0."""
    if PIN:
        os.sched_setaffinity(0, {CLIENT_CPU})


def server_argv(argv):
    """argv, under `taskset -c 1` with PIN."""
    return (["taskset", "-c", str(SERVER_CPU)] if PIN else []) + list(argv)


def pin_server(pid):
    """With PIN, every thread of process `pid` on CPU 1 (threads it starts later follow)."""
    if PIN:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), {SERVER_CPU})


def stats(samples, scale=1.0):
    """median, p90, p99, min, max (nearest rank) of the samples times `scale`, and n."""
    s = sorted(x * scale for x in samples)
    if not s:
        return None
    rank = lambda q: s[min(len(s) - 1, int(len(s) * q))]
    return {"median": statistics.median(s), "p90": rank(0.90), "p99": rank(0.99),
            "min": s[0], "max": s[-1], "n": len(s)}


def geomean(xs):
    xs = [x for x in xs if x is not None]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def both_orders(a, b, measure):
    """a and b are (short name, start); start() returns a side with a close().

    Starts a then b, returns measure(side a, side b) and closes both; then again with fresh
    sides started b then a. Returns [(f"{a} first", result), (f"{b} first", result)]."""
    out = []
    for first, second in ((a, b), (b, a)):
        sides = {}
        try:
            for name, start in (first, second):
                sides[name] = start()
            out.append((f"{first[0]} first", measure(sides[a[0]], sides[b[0]])))
        finally:
            for side in sides.values():
                side.close()
    return out


def report(sides, orders, scale=1e6, unit="µs", cols=("median", "p90", "p99"), indent="  "):
    """Prints, per order, each side's figures; then each side's median over the first side's
    median, per order, and the geometric mean of those ratios.

    sides: [(short, long name), ...]; orders: [(label, [samples of each side]), ...].
    Returns {short name: geometric mean} for the sides after the first."""
    lw = max(len(label) for label, _ in orders) + 2
    nw = max(len(name) for _, name in sides)
    medians = []
    for label, samples in orders:
        row = {}
        for (short, name), xs in zip(sides, samples):
            st = stats(xs, scale)
            row[short] = st and st["median"]
            figs = "   ".join(f"{c} {st[c]:9.1f} {unit}" for c in cols) + f"   n {st['n']}" if st else "no samples"
            print(f"{indent}{'[' + label + ']':<{lw}} {name:<{nw}}   {figs}")
        medians.append((label, row))
    means = {}
    base = sides[0][0]
    for short, _ in sides[1:]:
        ratios = [(label, row[short] / row[base] if row[short] and row[base] else None) for label, row in medians]
        gm = geomean(r for _, r in ratios)
        means[short] = gm
        per = ", ".join(f"{r:.3f} {label}" if r else f"- {label}" for label, r in ratios)
        print(f"{indent}{short}/{base} median: {per}; geometric mean {gm:.3f}" if gm else
              f"{indent}{short}/{base} median: {per}")
    return means


def alternate(commands, runs, warmup=0):
    """commands: [(name, argv)]. Every round runs each once, rounds 1, 3, ... in the order
    given, rounds 2, 4, ... reversed. Returns [(label, [seconds of each command]) for the
    rounds in order, those reversed]."""

    def once(argv):
        t = time.perf_counter()
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        took = time.perf_counter() - t
        if done.returncode != 0:
            raise SystemExit(f"exit {done.returncode}: {shlex.join(argv)}")
        return took

    for _ in range(warmup):
        for _, argv in commands:
            once(argv)
    times = [[[] for _ in commands] for _ in range(2)]
    for r in range(runs):
        idx = list(range(len(commands)))
        if r % 2:
            idx.reverse()
        for i in idx:
            times[r % 2][i].append(once(commands[i][1]))
    return [(f"{commands[0][0]} first", times[0]), (f"{commands[-1][0]} first", times[1])]


def main():
    p = argparse.ArgumentParser(description="Whole processes against each other, interleaved, both orders.")
    p.add_argument("--runs", type=int, default=10, help="rounds in all, half in each order (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs of each first (default 2)")
    p.add_argument("pairs", nargs="+", metavar="NAME CMD")
    args = p.parse_args()
    if len(args.pairs) < 4 or len(args.pairs) % 2:
        p.error("give NAME 'CMD ARGS' pairs, two or more")
    commands = [(args.pairs[i], shlex.split(args.pairs[i + 1])) for i in range(0, len(args.pairs), 2)]
    for name, argv in commands:
        print(f"  {name}: {shlex.join(argv)}")
    print(f"  {args.runs} rounds (1, 3, ... in this order, 2, 4, ... reversed), {args.warmup} warm-up run(s) each; "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    orders = alternate(commands, args.runs, args.warmup)
    report([(n, n) for n, _ in commands], orders, scale=1e3, unit="ms", cols=("median", "min", "max"))


if __name__ == "__main__":
    main()
