"""The data provider against pandas, DuckDB and Python's jsonschema, interleaved in one run.

Run by bench/data_vs_pandas_duckdb.sh, which builds toolbox and the venv. Generates its own
data: a CSV of SIZE_MB (with a JSONL made from it by toolbox), and a JSONL of RECORDS records
of ten fields for validation. Each round runs every contender of every task once, in turn,
each as its own process under /usr/bin/time (wall seconds, peak RSS); rounds 1, 3, ... in
the order listed (toolbox first), rounds 2, 4, ... reversed (toolbox last), so none always
goes first. Prints the medians of each order and of all rounds, each other contender's
time over toolbox's per order and the geometric mean of those two ratios, and peak RSS.
ROUNDS (default 4) is best even. Asserts nothing about speed.

    python bench/data_bench.py TOOLBOX WORKDIR [SIZE_MB] [RECORDS] [ROUNDS]

Environment: DATA_BENCH_TASKS, a comma-separated subset of the task names (e.g.
"csv -> jsonl,jsonl -> parquet"); DATA_BENCH_PANDAS_CHUNKED=1 runs pandas in chunks of
500,000 rows (for sizes whole-file pandas cannot hold in memory: about 10 GB for a 1 GiB CSV
and 25 GB for its JSONL); DATA_BENCH_REUSE=1 keeps a big.csv and big.jsonl already in WORKDIR
(made by an earlier run of the same size: the data is seeded).
"""

import json
import math
import os
import random
import statistics
import subprocess
import sys

TOOLBOX, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SIZE_MB = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
RECORDS = int(sys.argv[4]) if len(sys.argv) > 4 else 1_000_000
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 4
PY = sys.executable
TASKS = [t for t in os.environ.get("DATA_BENCH_TASKS", "").split(",") if t]
CHUNKED = os.environ.get("DATA_BENCH_PANDAS_CHUNKED") == "1"
REUSE = os.environ.get("DATA_BENCH_REUSE") == "1"

CITIES = ["Lisbon", "Oslo", "Zürich", "Nairobi", "Lima", "Osaka", "Tartu", "Perth", "Quito"]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def make_csv(path, size_mb):
    rnd = random.Random(7)
    target = size_mb * 1024 * 1024
    written = 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        head = "id,name,city,score,day,flag,note\n"
        f.write(head)
        written += len(head)
        i = 0
        lines = []
        while written < target:
            i += 1
            note = " ".join(rnd.choice(WORDS) for _ in range(6))
            if i % 97 == 0:
                note = f'"{note}, with a comma"'
            line = (f"{i},user{i % 50000},{rnd.choice(CITIES)},{rnd.random() * 100:.3f},"
                    f"2024-{1 + i % 12:02d}-{1 + i % 28:02d},{'true' if i % 3 else 'false'},{note}\n")
            lines.append(line)
            written += len(line.encode())
            if len(lines) >= 10000:
                f.writelines(lines)
                lines = []
        f.writelines(lines)
    return i


def make_records(path, n):
    rnd = random.Random(11)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({
                "id": i, "name": f"user{i}", "email": f"u{i}@example.org", "age": rnd.randint(18, 90),
                "score": rnd.random(), "active": i % 2 == 0, "city": rnd.choice(CITIES),
                "tags": [rnd.choice(WORDS), rnd.choice(WORDS)], "joined": "2024-05-06",
                "note": " ".join(rnd.choice(WORDS) for _ in range(4)),
            }) + "\n")


SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["id", "name", "email", "age", "score", "active", "city", "tags", "joined", "note"],
    "properties": {
        "id": {"type": "integer", "minimum": 0},
        "name": {"type": "string", "minLength": 1},
        "email": {"type": "string", "pattern": "^[^@]+@[^@]+$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "city": {"enum": CITIES},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "joined": {"type": "string"},
        "note": {"type": "string", "maxLength": 200},
    },
}


def timed(cmd):
    """Wall seconds, peak RSS (MiB) and CPU seconds (user + system) of one process."""
    out = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M %U %S"] + cmd,
                         capture_output=True, text=True, cwd=WORK)
    if out.returncode != 0:
        raise SystemExit(f"failed: {cmd}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    line = [l for l in out.stderr.splitlines() if l.startswith("TIME ")][-1]
    _, secs, kib, user, system = line.split()
    return float(secs), int(kib) / 1024, float(user) + float(system)


def toolbox(tool, args):
    return [TOOLBOX, "call", "-w", WORK, "--mode", "full", "--timeout-ms", "7200000", tool,
            json.dumps(args)]


def py(code):
    return [PY, "-c", code]


def main():
    os.makedirs(WORK, exist_ok=True)
    csv_path = os.path.join(WORK, "big.csv")
    jsonl_path = os.path.join(WORK, "big.jsonl")
    if REUSE and os.path.exists(csv_path):
        with open(csv_path, "rb") as f:
            rows = sum(1 for _ in f) - 1
        print("== reusing big.csv (and big.jsonl if there)")
    else:
        rows = make_csv(csv_path, SIZE_MB)
    size = os.path.getsize(csv_path)
    print(f"== generated big.csv: {size / 2**20:.0f} MiB, {rows} rows")
    # The JSONL input of the Parquet task: the CSV converted once, untimed.
    if not (REUSE and os.path.exists(jsonl_path)):
        subprocess.run(toolbox("data__convert", {"path": "big.csv", "output": "big.jsonl"}),
                       check=True, capture_output=True)
    print(f"== big.jsonl: {os.path.getsize(os.path.join(WORK, 'big.jsonl')) / 2**20:.0f} MiB")
    if not TASKS or "validate 10-field jsonl" in TASKS:
        make_records(os.path.join(WORK, "records.jsonl"), RECORDS)
    with open(os.path.join(WORK, "schema.json"), "w") as f:
        json.dump(SCHEMA, f)
    print(f"== records.jsonl: {RECORDS} records of 10 fields")

    tasks = {
        "csv -> jsonl": {
            "toolbox": toolbox("data__convert", {"path": "big.csv", "output": "t.jsonl"}),
            "pandas": py("import pandas as pd; pd.read_csv('big.csv').to_json('p.jsonl', orient='records', lines=True)"),
            "duckdb": py("import duckdb; duckdb.sql(\"COPY (SELECT * FROM read_csv('big.csv')) TO 'd.jsonl' (FORMAT json)\")"),
        },
        "jsonl -> parquet": {
            "toolbox": toolbox("data__convert", {"path": "big.jsonl", "output": "t.parquet"}),
            "pandas": py("import pandas as pd; pd.read_json('big.jsonl', lines=True).to_parquet('p.parquet')"),
            "duckdb": py("import duckdb; duckdb.sql(\"COPY (SELECT * FROM read_json('big.jsonl')) TO 'd.parquet' (FORMAT parquet)\")"),
        },
        "validate 10-field jsonl": {
            "toolbox": toolbox("data__validate", {"path": "records.jsonl", "schema": "schema.json", "max_errors": 5}),
            "jsonschema": py(
                "import json, jsonschema\n"
                "v = jsonschema.Draft202012Validator(json.load(open('schema.json')))\n"
                "bad = 0\n"
                "for line in open('records.jsonl'):\n"
                "    bad += not v.is_valid(json.loads(line))\n"
                "print(bad)\n"),
        },
        "inspect csv": {
            "toolbox": toolbox("data__inspect", {"path": "big.csv"}),
            "pandas": py("import pandas as pd; print(pd.read_csv('big.csv').describe(include='all'))"),
        },
    }
    if CHUNKED:
        print("== pandas runs chunked (500,000 rows a chunk)")
        tasks["csv -> jsonl"]["pandas"] = py(
            "import pandas as pd\n"
            "with open('p.jsonl', 'w') as f:\n"
            "    for c in pd.read_csv('big.csv', chunksize=500_000):\n"
            "        c.to_json(f, orient='records', lines=True)\n")
        tasks["jsonl -> parquet"]["pandas"] = py(
            "import pandas as pd, pyarrow as pa, pyarrow.parquet as pq\n"
            "w = None\n"
            "for c in pd.read_json('big.jsonl', lines=True, chunksize=500_000):\n"
            "    t = pa.Table.from_pandas(c, preserve_index=False)\n"
            "    w = w or pq.ParquetWriter('p.parquet', t.schema)\n"
            "    w.write_table(t)\n"
            "w.close()\n")
    if TASKS:
        tasks = {t: c for t, c in tasks.items() if t in TASKS}
    results = {t: {name: [] for name in c} for t, c in tasks.items()}
    forward = [r % 2 == 0 for r in range(ROUNDS)]  # toolbox first, else toolbox last
    for r in range(ROUNDS):
        for task, contenders in tasks.items():
            names = list(contenders) if forward[r] else list(contenders)[::-1]
            for name in names:
                results[task][name].append(timed(contenders[name]))
        print(f"== round {r + 1}/{ROUNDS} ({'toolbox first' if forward[r] else 'toolbox last'}) done", flush=True)

    print(f"\nwall seconds, medians of the rounds with toolbox first (F), with toolbox last (L) and of "
          f"all {ROUNDS}; CSV {size / 2**20:.0f} MiB, {rows} rows; {RECORDS} records validated")
    orders = (("toolbox first", [r for r in range(ROUNDS) if forward[r]]),
              ("toolbox last", [r for r in range(ROUNDS) if not forward[r]]))
    for task, by in results.items():
        print(f"\n{task}")
        med = {n: [statistics.median(by[n][r][0] for r in idx) if idx else None for _, idx in orders]
               for n in by}
        rss = {n: max(m for _, m, _ in runs) for n, runs in by.items()}
        cpu = {n: statistics.median(c for _, _, c in runs) for n, runs in by.items()}
        fmt = lambda v: f"{v:8.2f}" if v is not None else "       -"
        for n in by:
            walls = " ".join(f"{'F' if forward[r] else 'L'} {s:.2f}" for r, (s, _, _) in enumerate(by[n]))
            every = statistics.median(s for s, _, _ in by[n])
            print(f"  {n:<11} F {fmt(med[n][0])} s   L {fmt(med[n][1])} s   all {every:8.2f} s   "
                  f"peak RSS {rss[n]:8.1f} MiB   CPU {cpu[n]:7.2f} s   (rounds: {walls})")
        for n in by:
            if n == "toolbox":
                continue
            ratios = [o / t if o is not None and t else None for o, t in zip(med[n], med["toolbox"])]
            per = ", ".join(f"{r:.2f}x {label}" if r else f"- {label}" for r, (label, _) in zip(ratios, orders))
            have = [r for r in ratios if r]
            gm = math.exp(sum(math.log(r) for r in have) / len(have)) if have else None
            print(f"  {n} / toolbox time: {per}" + (f"; geometric mean {gm:.2f}x" if gm else ""))


if __name__ == "__main__":
    main()
