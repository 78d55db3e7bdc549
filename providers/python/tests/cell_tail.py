"""Checks the driver's one-compile path for cells against the AST, on the interpreter that
runs this script: over cells cut from the standard library's own sources (every prefix of
top-level statements of a sample of files, and each statement alone) and a list of tricky
ones, `_compile_cell` must give a last-expression code exactly when the AST's last
statement is an expression (not hidden by a trailing `;`), and `_may_end_in_expression`
may answer False, and `_one_plain_assignment` True, only when it is not.

    python cell_tail.py DRIVER_PATH [FILES]

FILES: how many standard library files to cut cells from (150).

Prints one summary line; exits 1 on any disagreement, listing the first few.
"""

import ast
import importlib.util
import os
import random
import sys
import warnings

warnings.simplefilter("ignore")
spec = importlib.util.spec_from_file_location("toolbox_driver", sys.argv[1])
driver = importlib.util.module_from_spec(spec)
spec.loader.exec_module(driver)
sample = int(sys.argv[2]) if len(sys.argv) > 2 else 150
# Prefixes of a long file get long; compiling them all would take minutes.
MAX_CELL_CHARS = 8000

TRICKY = [
    "x = 1", "x = 1; 42", "x = 1\n42", "x = 1;42;", "42", "'doc'", "x = 1\n'''\ns\n'''",
    "x=1; y", "x = 1\n...", "None", "x = 1\nNone", "-1", "(1,\n 2)", "x = 1\n(1,\n 2)",
    "if c: f()", "if c:\n    x = 1", "if c:\n    x = 1\nelse:\n    42", "for i in r: x = i",
    "while False: pass", "with a: b", "try:\n    x = 1\nexcept E:\n    42",
    "import os", "from os import path", "from os import path as p, sep",
    "def f(): return 1", "class A: pass", "@d\ndef f(): pass", "del x", "pass",
    "x: int = 1", "x: int", "a[0] = 1", "a.b += 1", "x = y = 2", "x == 1", "lambda: 1",
    "[i for i in range(3)]", "x = [i for i in range(3)]\nx", "f(\n1)\n", "f'{x}'",
    "not x", "await f()", "x = 1  # c\n\n# end\n", "# only a comment", "", "\n\n",
    "assert x", "raise E", "global g", "print(1)", "print(1);", "x = 1 \\\n + 2",
    "match x:\n    case 1:\n        y = 2", "x.y = f(a=1)", "x = 1 # c", "a = b = 3",
    "x = 1 # ; 2", "x = (1,\n2)", "x = '''a\nb'''",
    "async def f(): pass", "x = (yield)" if False else "x = 2",
]


def truth(cell):
    """Whether IPython would show the cell's last value (before running it)."""
    tree = ast.parse(cell)
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return False
    node = tree.body[-1]
    line = cell.split("\n")[node.end_lineno - 1].encode("utf-8")
    return not line[node.end_col_offset:].decode("utf-8").lstrip().startswith(";")


def cells():
    for cell in TRICKY:
        yield cell
    files = []
    for root, _, names in os.walk(os.path.dirname(os.__file__)):
        if "site-packages" in root:
            continue
        files += [os.path.join(root, n) for n in names if n.endswith(".py")]
    files.sort()
    random.Random(1).shuffle(files)
    for path in files[:sample]:
        try:
            with open(path, encoding="utf-8") as f:
                src = f.read()
            tree = ast.parse(src)
        except Exception:
            continue
        lines = src.splitlines(True)
        for node in tree.body:
            prefix = "".join(lines[: node.end_lineno])
            if len(prefix) > MAX_CELL_CHARS:
                break
            yield prefix
            yield ast.get_source_segment(src, node) or ""


flags = driver._TOP_LEVEL_AWAIT
checked = one_compile = 0
wrong = []
for cell in cells():
    try:
        whole = compile(cell, "<cell>", "exec", flags=flags)
        expected = truth(cell)
    except (SyntaxError, ValueError):
        continue
    checked += 1
    body, last = driver._compile_cell(cell, "<cell>")
    if (last is not None) != expected:
        wrong.append(("_compile_cell", cell))
    if not driver._may_end_in_expression(whole, cell):
        one_compile += 1
        if expected:
            wrong.append(("_may_end_in_expression", cell))
    if driver._one_plain_assignment(cell) and expected:
        wrong.append(("_one_plain_assignment", cell))
print(
    "python %s: %d cells, %d compiled once, %d wrong (tail shapes checked: %s)"
    % (sys.version.split()[0], checked, one_compile, len(wrong), driver._TAIL_SHAPES_CHECKED)
)
for what, cell in wrong[:10]:
    print("  %s: %r" % (what, cell[-300:]))
sys.exit(1 if wrong else 0)
