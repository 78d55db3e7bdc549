"""toolbox's Python driver: everything that happens on the Python side of run_python_code.

The same file runs in two places:

- embedded: loaded as the module ``toolbox_driver`` into the interpreter that toolbox hosts
  in-process (toolbox's CPython layer); Rust calls ``handle_object(request) -> response`` on
  its Python thread, with plain dicts: no JSON text on the way in or out.
- isolated: run by the found interpreter (or the configured venv's) as
  ``python -E -u -c <this file> --serve``; requests and responses are JSON lines on
  stdin/stdout (``serve``).

A request is a JSON object with an ``op``:

- ``run``: execute a cell (``code``) or a script (``script_path`` + ``args``) in the session's
  namespace; returns stdout, stderr, the final expression's value, display data (saved
  matplotlib figures), the error if any, and the execution count.
- ``lookup``: search the public functions and classes of an importable package.
- ``info``: the interpreter's identity (version, prefix, executable, libpython).

Every response is ``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": "..."}``;
an exception in user code is a normal result with an ``error`` field, never ``ok: false``.
"""

import ast
import builtins
import collections
import importlib
import io
import json
import linecache
import os
import re
import sys
import time
import traceback
import types
import warnings

# Captured output beyond this many characters per stream is dropped (with a note), so a
# runaway print loop cannot eat the host's memory.
MAX_STREAM_CHARS = 8 * 1024 * 1024
# A final expression's repr (or a display() call) beyond this is cut.
MAX_REPR_CHARS = 1024 * 1024

_DRIVER_GLOBALS = globals()


class ExecutionInterrupted(BaseException):
    """Raised inside user code when toolbox stops it (timeout or cancellation).

    A BaseException so that ``except Exception:`` in user code does not swallow it.
    """


# Shown as plain `ExecutionInterrupted: …` in tracebacks, not `toolbox_driver.…`.
ExecutionInterrupted.__module__ = "builtins"


# --- process-wide state ---------------------------------------------------------------------

_SESSIONS = {}
# Set by toolbox (under the GIL) just before it interrupts a run; the SIGUSR2 handler only
# raises when this is set, so a stray signal is harmless.
_INTERRUPT = {"armed": False, "reason": ""}
_STATE = {
    "configured": False,
    "embedded": True,
    "generation": None,
    "site_dirs": set(),
    "cell_seq": 0,
    "current": None,  # the _Run in progress, if any
    "fd_capture": False,
    # Embedded: toolbox's own working directory, held open, to return to after each run.
    "host_cwd_fd": None,
    # A worker: the socket toolbox sends each run's folder over (a descriptor), or None.
    "folder_socket": None,
    "folder_by_name": False,
}
# filename "<cell-N>" -> (session id, execution count, source characters), oldest first, to
# show tracebacks of earlier cells. Each cell's source also sits in linecache. Both are bounded
# (a server runs for weeks): past these, the oldest cells' sources are dropped, and a
# traceback through a function defined there shows its file and line without the text.
_CELL_FILES = collections.OrderedDict()
_CELL_SOURCE = {"chars": 0}
MAX_KEPT_CELLS = 10000
MAX_KEPT_CELL_CHARS = 32 * 1024 * 1024


def configure(embedded=True):
    """One-time setup of the interpreter; safe to call again."""
    if _STATE["configured"]:
        return
    _STATE["configured"] = True
    _STATE["embedded"] = embedded
    # Code must never read the host's stdin: in the embedded case it carries the MCP
    # protocol, in the worker case toolbox's requests.
    sys.stdin = io.StringIO("")
    if embedded:
        # Runs change into their folder by descriptor and come back here the same way: no
        # path is walked (or could be swapped) on either side of the code.
        try:
            _STATE["host_cwd_fd"] = os.open(".", getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY)
        except OSError:
            _STATE["host_cwd_fd"] = None
        # From now on Python-level output never reaches the host's own stdout/stderr.
        sys.stdout = _STDOUT
        sys.stderr = _STDERR
    # Like Jupyter, the working directory (the session scratchpad) is importable.
    if "" not in sys.path:
        sys.path.insert(0, "")
    # Figures are rendered off-screen and saved as PNG; plt.show() has nothing to show.
    warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown")
    warnings.filterwarnings("ignore", message=".*FigureCanvasAgg is non-interactive.*")
    sys.meta_path.insert(0, _PyplotHook())
    if "matplotlib.pyplot" in sys.modules:
        _patch_pyplot(sys.modules["matplotlib.pyplot"])
    try:
        import signal

        signal.signal(signal.SIGUSR2, _on_interrupt_signal)
        _STATE["signal"] = True
    except (ValueError, OSError, AttributeError):
        # Not the interpreter's main thread (someone else started Python in this process):
        # timeouts then rely on the asynchronous exception alone.
        _STATE["signal"] = False


def _on_interrupt_signal(signum, frame):
    # The signal's only purpose is to wake a blocking system call (time.sleep, a socket
    # read, waiting for a subprocess) so that Python regains control and can raise.
    # Only inside the user's code: the driver's own bookkeeping must finish undisturbed.
    if _INTERRUPT["armed"] and in_user_code():
        raise ExecutionInterrupted(_INTERRUPT["reason"])


def arm_interrupt(reason):
    _INTERRUPT["armed"] = True
    _INTERRUPT["reason"] = reason


def disarm_interrupt():
    _INTERRUPT["armed"] = False


def in_user_code():
    run = _STATE["current"]
    return run is not None and run.in_user_code


# --- sessions ---------------------------------------------------------------------------------


class _Session:
    def __init__(self, sid):
        self.sid = sid
        # A real module, so that pickle and friends find classes defined in cells under
        # __main__ while this session runs (sys.modules["__main__"] is swapped per run).
        self.module = types.ModuleType("__main__")
        self.ns = self.module.__dict__
        self.ns["__builtins__"] = builtins
        self.ns["display"] = _display
        self.count = 0
        # The session's folders (scratchpad, output) and the workspace root, as paths. They
        # follow from the session, so a caller may send them on the first run only.
        self.cwd = None
        self.output_dir = ""
        self.root = ""
        # The session's runs are one at a time: one _Run serves them all, its lists replaced
        # only after a run that used them (a fresh object per run cost more, run cold).
        self.run = _Run(self, "")


def _session(sid):
    session = _SESSIONS.get(sid)
    if session is None:
        session = _SESSIONS[sid] = _Session(sid)
    return session


# --- output capture ---------------------------------------------------------------------------


class _Router(io.TextIOBase):
    """sys.stdout / sys.stderr of the embedded interpreter, for good: one of each.

    Writes collect in a list of the module's (`_OUT_PARTS`, `_ERR_PARTS`) until a run ends
    and takes them: the run's own output, after whatever a background thread printed since
    the last run ended (shown with this run). Up to MAX_STREAM_CHARS are kept per take.
    Nothing reaches the host process's own stdout, which may be carrying a protocol (MCP
    over stdio).
    """

    def __init__(self, name, parts):
        self.name = name
        self.parts = parts
        self.size = 0
        self.dropped = 0

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "replace"

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        n = len(text)
        room = MAX_STREAM_CHARS - self.size
        if n > room:
            self.dropped += n - max(room, 0)
            text = text[: max(room, 0)]
        self.parts.append(text)
        self.size += len(text)
        return n

    def flush(self):
        pass

    def take(self):
        """What was written since the last take. A run that wrote nothing does not call
        this: an empty list of the module's says so, without a method call."""
        # Only what is joined is removed: a background thread may append meanwhile, and
        # that is the next run's.
        parts = self.parts
        n = len(parts)
        out = "".join(parts[:n])
        del parts[:n]
        if self.dropped:
            out += "\n[... %d more characters dropped ...]\n" % self.dropped
        self.size = self.dropped = 0
        return out


_OUT_PARTS = []
_ERR_PARTS = []
_STDOUT = _Router("stdout", _OUT_PARTS)
_STDERR = _Router("stderr", _ERR_PARTS)


class _FdCapture:
    """Worker mode: file descriptors 1 and 2 point at temporary files during a run.

    This captures everything — print(), os.system, subprocesses, C extensions — in the order
    it was written, which embedded mode cannot do without stealing the host's descriptors.
    """

    def start(self):
        import tempfile

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        self.files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.files[0].fileno(), 1)
        os.dup2(self.files[1].fileno(), 2)

    def stop(self):
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except Exception:
                pass
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        texts = []
        for f in self.files:
            f.seek(0)
            data = f.read(MAX_STREAM_CHARS + 1)
            text = data[:MAX_STREAM_CHARS].decode("utf-8", "replace")
            if len(data) > MAX_STREAM_CHARS:
                text += "\n[... output beyond %d bytes dropped ...]\n" % MAX_STREAM_CHARS
            f.close()
            texts.append(text)
        return texts[0], texts[1]


# --- matplotlib -------------------------------------------------------------------------------


class _PyplotHook:
    """Patches matplotlib.pyplot as it is imported: Agg backend, and show() saves figures."""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PyplotLoader(spec.loader)
        return spec


class _PyplotLoader:
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        mpl = sys.modules.get("matplotlib")
        if mpl is not None:
            try:
                # Off-screen rendering; no display server is ever involved.
                mpl.use("Agg")
            except Exception:
                pass
        self.inner.exec_module(module)
        _patch_pyplot(module)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _patch_pyplot(plt):
    if getattr(plt, "_toolbox_patched", False):
        return
    original = plt.show

    def show(*args, **kwargs):
        # As in a notebook: show() puts the open figures in the output and closes them.
        run = _STATE["current"]
        if run is None:
            return original(*args, **kwargs)
        run.save_figures()

    show.__doc__ = original.__doc__
    plt.show = show
    plt._toolbox_patched = True


# --- running code -----------------------------------------------------------------------------


def _display(*objs, **kwargs):
    """Show objects in the output, like IPython's display()."""
    run = _STATE["current"]
    for obj in objs:
        if run is None:
            print(repr(obj))
            continue
        fig_type = None
        mpl_figure = sys.modules.get("matplotlib.figure")
        if mpl_figure is not None:
            fig_type = getattr(mpl_figure, "Figure", None)
        if fig_type is not None and isinstance(obj, fig_type):
            run.save_figure(obj)
        else:
            run.display.append(_mime_bundle(obj))


def _mime_bundle(obj):
    item = {"mime_type": "text/plain", "text": _cut(repr(obj))}
    html = _html(obj)
    if html is not None:
        item["html"] = html
    return item


def _html(obj):
    method = getattr(type(obj), "_repr_html_", None)
    if method is None:
        return None
    try:
        html = method(obj)
    except Exception:
        return None
    return _cut(html) if isinstance(html, str) else None


def _cut(text):
    if len(text) > MAX_REPR_CHARS:
        return text[:MAX_REPR_CHARS] + "\n[... %d more characters ...]" % (len(text) - MAX_REPR_CHARS)
    return text


class _Run:
    __slots__ = ("session", "output_dir", "display", "notes", "in_user_code")

    def __init__(self, session, output_dir):
        self.session = session
        self.output_dir = output_dir
        self.display = []
        self.notes = []
        self.in_user_code = False

    def save_figures(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            numbers = list(plt.get_fignums())
        except Exception:
            return
        for num in numbers:
            try:
                fig = plt.figure(num)
                self.save_figure(fig)
            finally:
                try:
                    plt.close(num)
                except Exception:
                    pass

    def save_figure(self, fig):
        if not self.output_dir:
            self.notes.append("a figure was not saved: no output folder")
            return
        try:
            os.makedirs(self.output_dir, exist_ok=True)
            path, handle = _new_figure_file(self.output_dir)
            with handle:
                fig.savefig(handle, format="png")
            self.display.append({"mime_type": "image/png", "path": path})
        except Exception as e:
            self.notes.append("a figure could not be saved: %s: %s" % (type(e).__name__, e))


_FIGURE_NAME = re.compile(r"^figure-(\d+)\.png$")


def _new_figure_file(folder):
    """The next free output/figure-<n>.png, created exclusively so nothing is overwritten."""
    highest = 0
    for name in os.listdir(folder):
        m = _FIGURE_NAME.match(name)
        if m:
            highest = max(highest, int(m.group(1)))
    n = highest + 1
    while True:
        path = os.path.join(folder, "figure-%d.png" % n)
        try:
            return path, open(path, "xb")
        except FileExistsError:
            n += 1


def _prepare_source(code):
    """Comments out `%matplotlib ...` lines (a no-op here: figures are always captured)."""
    if "%matplotlib" not in code:
        return code
    lines = code.split("\n")
    changed = False
    for i, line in enumerate(lines):
        if line.startswith("%matplotlib"):
            lines[i] = "#" + line
            changed = True
    return "\n".join(lines) if changed else code


def _magic_hint(code, err):
    lineno = getattr(err, "lineno", None) or 0
    lines = code.split("\n")
    if 0 < lineno <= len(lines):
        stripped = lines[lineno - 1].lstrip()
        if stripped.startswith(("%", "!")):
            return (
                "IPython magics and shell escapes (lines starting with % or !) are not "
                "supported here: this is plain Python. Use kernel_install to install packages "
                "and subprocess (or the shell tool) to run commands."
            )
    return None


_TOP_LEVEL_AWAIT = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
# inspect.CO_COROUTINE, without importing inspect on every run.
_CO_COROUTINE = 0x80


def _opcode(name):
    import opcode

    return opcode.opmap.get(name, -1)


# The bytecode shapes _may_end_in_expression reads, checked on these versions (see
# providers/python/tests/cell_tail.py); on any other, every cell takes the AST path.
_TAIL_SHAPES_CHECKED = (3, 10) <= sys.version_info[:2] <= (3, 13)
if _TAIL_SHAPES_CHECKED:
    _OP_POP_TOP, _OP_NOP, _OP_CACHE = _opcode("POP_TOP"), _opcode("NOP"), _opcode("CACHE")
    _OP_STORE_NAME, _OP_LOAD_CONST = _opcode("STORE_NAME"), _opcode("LOAD_CONST")
    _OP_RETURN_VALUE, _OP_RETURN_CONST = _opcode("RETURN_VALUE"), _opcode("RETURN_CONST")


def _may_end_in_expression(code_obj, source):
    """False only when the cell's last statement is certainly not an expression statement.

    Read from the compiled module instead of an AST, which costs as much again as compiling
    (building Python objects for every node, then compiling those): an expression statement
    compiles to its value and a POP_TOP right before the module's implicit `return None`,
    on the line of that return. A constant expression compiles to nothing (or a NOP), so the
    instruction before the return then belongs to an earlier statement: on another line,
    unless a `;` put both on one, and a cell with a `;` anywhere is not judged here. A
    string first in a cell is stored as `__doc__`. Anything unexpected answers True, and the
    caller then parses the cell.
    """
    if not _TAIL_SHAPES_CHECKED or ";" in source:
        return True
    units = code_obj.co_code
    ret = len(units) - 2
    if ret < 2:
        return True
    if units[ret] == _OP_RETURN_VALUE and units[ret - 2] == _OP_LOAD_CONST:
        ret -= 2
    elif units[ret] != _OP_RETURN_CONST:
        return True
    before = ret - 2
    while before >= 0 and units[before] == _OP_CACHE:
        before -= 2
    if before < 0 or units[before] in (_OP_POP_TOP, _OP_NOP):
        return True
    if units[before] == _OP_STORE_NAME and "__doc__" in code_obj.co_names:
        return True
    line_of_return = line_before = None
    for start, end, line in code_obj.co_lines():
        if start <= ret < end:
            line_of_return = line
        if start <= before < end:
            line_before = line
    return line_of_return is None or line_of_return != line_before


# Words that start a statement, not an expression.
_STATEMENT_WORDS = frozenset(
    "import from def class for while if elif else with try except finally return del pass "
    "raise assert global nonlocal async break continue".split()
)


def _looks_like_statement(code):
    """Whether the cell's last line that is not blank or a comment looks like a statement:
    indented (inside a block), a decorator, a keyword, or an assignment (an `=` that is not
    part of a comparison, with no call before it). Only a guess of which way to compile first,
    made with string methods (a regular expression's engine costs more, run cold);
    _may_end_in_expression decides."""
    end = len(code)
    while end > 0:
        start = code.rfind("\n", 0, end) + 1
        line = code[start:end]
        stripped = line.strip()
        if stripped and stripped[0] != "#":
            break
        end = start - 1
    else:
        return False
    if line[0] in " \t@":
        return True
    eq = line.find("=")
    if eq > 0 and line[eq + 1 : eq + 2] != "=" and "(" not in line[:eq]:
        # `x = 1`, `x += 1`, `x <<= 1`; not `x != 1`, `x <= 1`, `x >= 1`.
        if line[eq - 1] not in "!<>" or line[eq - 2 : eq] in ("<<", ">>"):
            return True
    word = stripped.partition(" ")[0].partition(":")[0]
    return word in _STATEMENT_WORDS


def _one_plain_assignment(code):
    """True for a cell that is one line assigning to a name or an attribute (`x = 1`,
    `df.a = f(b=2)`): certainly no expression, if it compiles at all, so the compiled module
    need not be read."""
    code = code.strip()
    if "\n" in code or ";" in code or "\\" in code:
        return False
    eq = code.find("=")
    if eq <= 0 or code[eq + 1 : eq + 2] == "=":
        return False
    return code[:eq].rstrip().replace(".", "").replace("_", "a").isalnum()


def _compile_cell(code, filename):
    """Compiles a cell; returns (body code, last-expression code or None)."""
    flags = _TOP_LEVEL_AWAIT
    # A one-line assignment (`df = pd.read_csv(p)`) is asked about first, since that is
    # the cheaper question: certainly a statement, so one compile and nothing read back.
    if _one_plain_assignment(code):
        return compile(code, filename, "exec", flags=flags), None
    # Most other cells end in a statement too (a def, a loop): one compile, no AST. A cell
    # whose last line looks like an expression goes straight to the AST, which it needs.
    if _looks_like_statement(code):
        whole = compile(code, filename, "exec", flags=flags)
        if not _may_end_in_expression(whole, code):
            return whole, None
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        node = tree.body[-1]
        # As in IPython, a trailing semicolon hides the value (`plt.plot(x);`).
        line = code.split("\n")[node.end_lineno - 1].encode("utf-8")
        rest = line[node.end_col_offset :].decode("utf-8", "replace").lstrip()
        tree.body.pop()
        if not rest.startswith(";"):
            last = compile(ast.Expression(node.value), filename, "eval", flags=flags)
        else:
            tree.body.append(node)
    body = compile(tree, filename, "exec", flags=flags)
    return body, last


def _execute(code_obj, ns):
    if code_obj.co_flags & _CO_COROUTINE:
        import asyncio

        coro = eval(code_obj, ns)
        return asyncio.run(coro)
    return eval(code_obj, ns)


def _run(req):
    # Every cell comes through here: kept to few calls and objects, since run after a pause
    # (an agent waiting on its model) each one costs cache misses.
    get = req.get
    # A worker's folder comes first, whatever else of the run fails: one per run request.
    passed_fd = _receive_folder() if _STATE["folder_socket"] is not None else None
    sid = get("session") or "default"
    session = _SESSIONS.get(sid) or _session(sid)
    if "root" in req:
        session.cwd = get("cwd") or None
        session.output_dir = get("output_dir") or ""
        session.root = get("root") or ""
    output_dir, cwd, root = session.output_dir, session.cwd, session.root
    if output_dir and "OUTPUT_DIR" not in session.ns:
        session.ns["OUTPUT_DIR"] = output_dir
    if cwd and os.environ.get(SCRATCHPAD_VAR) != cwd:
        _set_scratchpad_env(cwd)
    trace = get("trace")
    if trace is not None or "trace_now" in _STATE:
        _set_trace_env(trace or {})
    site_dirs = get("site_dirs")
    if (site_dirs and not _STATE["site_dirs"].issuperset(site_dirs)) or get("generation") != _STATE[
        "generation"
    ]:
        _sync_site(req)

    session.count += 1
    count = session.count
    run = session.run
    run.output_dir = output_dir
    # A worker captures its file descriptors; embedded, the routers collect Python-level
    # output (inline here: a run's fixed costs are paid cold, and each call is one more).
    capture = _FdCapture() if _STATE["fd_capture"] else None
    error = None
    result = None
    interrupted = False
    old_cwd = None
    back_to_host = False
    cwd_fd = req.get("cwd_fd")
    old_main = sys.modules.get("__main__")
    old_argv = sys.argv
    _STATE["current"] = run
    if capture is not None:
        capture.start()
    else:
        # Code may have replaced sys.stdout or sys.stderr (for its own run): put them back.
        if sys.stdout is not _STDOUT:
            sys.stdout = _STDOUT
        if sys.stderr is not _STDERR:
            sys.stderr = _STDERR
    try:
        if cwd_fd is not None and _STATE["host_cwd_fd"] is not None:
            os.fchdir(cwd_fd)
            back_to_host = True
        elif isinstance(passed_fd, str):
            # A sandboxed worker: entered by name, through its own read-only mounts.
            os.chdir(passed_fd)
        elif passed_fd is not None:
            # The folder toolbox holds, not whatever its name points at now; a worker stays
            # there between runs.
            os.fchdir(passed_fd)
        elif cwd:
            try:
                old_cwd = os.getcwd()
            except OSError:
                old_cwd = None
            os.chdir(cwd)
        sys.modules["__main__"] = session.module
        if req.get("script_path"):
            _run_script(req, session, run)
        else:
            code = get("code") or ""
            if "%matplotlib" in code:
                code = _prepare_source(code)
            _STATE["cell_seq"] += 1
            filename = "<cell-%d>" % _STATE["cell_seq"]
            _keep_cell_source(filename, sid, count, code)
            try:
                body, last = _compile_cell(code, filename)
            except SyntaxError as e:
                hint = _magic_hint(code, e)
                if hint:
                    run.notes.append(hint)
                # Compiling is not the user's code: show the error alone, as Python does for
                # a script (no frame of ast.py above it).
                raise e.with_traceback(None)
            run.in_user_code = True
            try:
                if body.co_flags & _CO_COROUTINE:
                    _execute(body, session.ns)
                else:
                    eval(body, session.ns)
                if last is not None:
                    value = _execute(last, session.ns)
                    if value is not None:
                        session.ns["_"] = value
                        result = {"text/plain": _cut(repr(value))}
                        html = _html(value)
                        if html is not None:
                            result["text/html"] = html
            finally:
                run.in_user_code = False
    except ExecutionInterrupted as e:
        interrupted = True
        # The asynchronous exception arrives as a bare class; give it its reason.
        reason = str(e) or _INTERRUPT["reason"] or "interrupted"
        e = ExecutionInterrupted(reason).with_traceback(e.__traceback__)
        error = _error_record(e, root, filename_current=_current_cell())
    except SystemExit as e:
        code = e.code
        if code not in (None, 0):
            error = _error_record(e, root, filename_current=_current_cell())
        else:
            run.notes.append("the code called sys.exit(%s); the session goes on" % ("" if code is None else code))
    except BaseException as e:  # noqa: B902 - user code may raise anything
        error = _error_record(e, root, filename_current=_current_cell())
    finally:
        run.in_user_code = False
        _INTERRUPT["armed"] = False
        if "matplotlib.pyplot" in sys.modules:
            try:
                run.save_figures()
            except BaseException as e:
                run.notes.append("figures could not be saved: %s" % e)
        sys.argv = old_argv
        if old_main is not None:
            sys.modules["__main__"] = old_main
        try:
            if back_to_host:
                os.fchdir(_STATE["host_cwd_fd"])
            elif old_cwd is not None:
                os.chdir(old_cwd)
        except OSError:
            pass
        if passed_fd is not None and not isinstance(passed_fd, str):
            os.close(passed_fd)
        if capture is not None:
            stdout, stderr = capture.stop()
        else:
            stdout = _STDOUT.take() if _OUT_PARTS else ""
            stderr = _STDERR.take() if _ERR_PARTS else ""
        _STATE["current"] = None
    # Only what holds something: most cells print nothing and fail at nothing, and every
    # entry is one more thing for the host to convert, keep and free.
    display, notes = run.display, run.notes
    if display:
        run.display = []
    if notes:
        run.notes = []
    answer = {"execution_count": count}
    if stdout:
        answer["stdout"] = stdout
    if stderr:
        answer["stderr"] = stderr
    if result is not None:
        answer["result"] = result
    if display:
        answer["display_data"] = display
    if error is not None:
        answer["error"] = error
    if interrupted:
        answer["interrupted"] = True
    if notes:
        answer["notes"] = notes
    return answer


def _keep_cell_source(filename, sid, count, code):
    """Remembers a cell's source for tracebacks, forgetting the oldest beyond the bounds."""
    _CELL_FILES[filename] = (sid, count, len(code))
    _CELL_SOURCE["chars"] += len(code)
    # Each line ends with a newline, as in a file: Python 3.11 places the ^~~ marks of a
    # traceback one column too far right on a last line without one.
    lines = code.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    linecache.cache[filename] = (len(code), None, lines, filename)
    if len(_CELL_FILES) > MAX_KEPT_CELLS or _CELL_SOURCE["chars"] > MAX_KEPT_CELL_CHARS:
        _forget_oldest_cells()


def _forget_oldest_cells():
    while len(_CELL_FILES) > MAX_KEPT_CELLS or (
        _CELL_SOURCE["chars"] > MAX_KEPT_CELL_CHARS and len(_CELL_FILES) > 1
    ):
        # An OrderedDict: a plain dict's first key is found by skipping every slot already
        # popped, which made each run past the bound a scan of thousands.
        oldest, (_, _, chars) = _CELL_FILES.popitem(last=False)
        _CELL_SOURCE["chars"] -= chars
        linecache.cache.pop(oldest, None)


def _current_cell():
    return "<cell-%d>" % _STATE["cell_seq"]


# The session scratchpad's absolute path, for temporary files, as an environment variable
# (beside OUTPUT_DIR in the namespace); set before every run to the running session's.
SCRATCHPAD_VAR = "PYTHON_EXEC_SCRATCHPAD"


# The W3C trace context of the call's span (when toolbox exports spans), for code that
# traces itself and for what it starts: OTel's environment carrier names.
TRACE_VARS = ("TRACEPARENT", "TRACESTATE")


def _set_trace_env(trace):
    """Sets the run's TRACEPARENT/TRACESTATE; a run without them gets back what the process
    started with, so no run inherits the last one's trace. Only what changed is set."""
    now = _STATE.get("trace_now")
    if now is None:
        now = _STATE["trace_now"] = {name: os.environ.get(name) for name in TRACE_VARS}
        _STATE["trace_base"] = dict(now)
    base = _STATE["trace_base"]
    for name in TRACE_VARS:
        value = trace.get(name, base[name]) if trace else base[name]
        if now[name] != value:
            _set_env(name, value)
            now[name] = value


def _set_scratchpad_env(path):
    _set_env(SCRATCHPAD_VAR, path)


def _set_env(name, value):
    """Sets (or, with None, removes) a variable for the running code and its children."""
    if not _STATE["embedded"]:
        # A worker is a process of its own: the real environment, inherited by what it starts.
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
        return
    # Embedded, the process is toolbox's, whose other threads read the C environment without
    # a lock Python's putenv() would take: only os.environ's own mapping is changed, and the
    # ways code starts a child are taught to pass that mapping on (_pass_environ_to_children),
    # so a child started with the default environment inherits the variable too.
    env = os.environ
    try:
        if value is None:
            env._data.pop(env.encodekey(name), None)
        else:
            env._data[env.encodekey(name)] = env.encodevalue(value)
    except (AttributeError, TypeError):
        return
    _pass_environ_to_children()


def _pass_environ_to_children():
    """Embedded: a child started without an explicit environment gets os.environ, which holds
    what toolbox set for the run (PYTHON_EXEC_SCRATCHPAD), rather than the C environment of
    toolbox's process. Covers subprocess (and so os.popen and asyncio's subprocesses),
    os.system, and os.exec*/os.spawn* without an env; done once."""
    if _STATE.get("children_see_environ"):
        return
    _STATE["children_see_environ"] = True
    import subprocess

    popen_init = subprocess.Popen.__init__

    def __init__(self, *args, **kwargs):
        # Popen(args, bufsize, executable, stdin, stdout, stderr, preexec_fn, close_fds,
        # shell, cwd, env, ...): env is the 11th positional argument.
        if kwargs.get("env") is None and len(args) < 11:
            kwargs["env"] = os.environ.copy()
        popen_init(self, *args, **kwargs)

    __init__.__wrapped__ = popen_init
    subprocess.Popen.__init__ = __init__

    def system(command):
        # os.system's status: the wait status, as the C library's system() gives it.
        code = subprocess.call(command, shell=True, env=os.environ.copy())
        return code << 8 if code >= 0 else -code

    system.__wrapped__ = os.system
    os.system = system
    for name in ("execv", "execvp"):
        plain = getattr(os, name)
        with_env = getattr(os, name + "e")

        def replace(path, args, _with_env=with_env):
            return _with_env(path, args, os.environ)

        replace.__wrapped__ = plain
        setattr(os, name, replace)


def _receive_folder():
    """The descriptor of this run's folder, sent by toolbox over the folder socket; in a
    sandboxed worker, its name instead (a 4-byte length, then the bytes)."""
    import socket

    sock = _STATE["folder_socket"]
    if _STATE["folder_by_name"]:
        head = _recv_exactly(sock, 4)
        return os.fsdecode(_recv_exactly(sock, int.from_bytes(head, "big")))
    _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if not fds:
        raise RuntimeError("toolbox sent no folder for this run")
    for extra in fds[1:]:
        os.close(extra)
    return fds[0]


def _recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise RuntimeError("toolbox closed the folder socket")
        data += chunk
    return data


def _run_script(req, session, run):
    import runpy

    path = req["script_path"]
    sys.argv = [path] + list(req.get("args") or [])
    run.in_user_code = True
    try:
        # A script sees OUTPUT_DIR like a cell does (a skill's script writes its results there).
        init = {"OUTPUT_DIR": session.ns["OUTPUT_DIR"]} if "OUTPUT_DIR" in session.ns else None
        result = runpy.run_path(path, init_globals=init, run_name="__main__")
    finally:
        run.in_user_code = False
    # Like IPython's %run: the script's top-level names land in the session afterwards.
    for name, value in result.items():
        if not (name.startswith("__") and name.endswith("__")):
            session.ns[name] = value


_CELL_REF = re.compile(r'"<cell-(\d+)>"')
_BARE_CELL_REF = re.compile(r"<cell-(\d+)>")


def _error_record(exc, root, filename_current):
    tb = exc.__traceback__
    # Drop the driver's own frames (and runpy's) above the user's code.
    while tb is not None and (
        tb.tb_frame.f_globals is _DRIVER_GLOBALS
        or os.path.basename(tb.tb_frame.f_code.co_filename) in ("runpy.py", "<frozen runpy>")
    ):
        tb = tb.tb_next
    try:
        lines = traceback.format_exception(type(exc), exc, tb)
    except BaseException:
        lines = ["%s: %s\n" % (type(exc).__name__, exc)]
    text = "".join(lines)

    def name_cell(m):
        fname = "<cell-%s>" % m.group(1)
        if fname == filename_current:
            return '"<cell>"'
        seen = _CELL_FILES.get(fname)
        # A cell too old to be remembered (see MAX_KEPT_CELLS).
        return '"<cell In[%d]>"' % seen[1] if seen else '"<an earlier cell>"'

    text = _CELL_REF.sub(name_cell, text)
    if root:
        text = text.replace(root.rstrip("/") + "/", "")
    evalue = str(exc)
    evalue = _CELL_REF.sub(name_cell, evalue)
    # str(SyntaxError) names the file without quotes: "expected ':' (<cell-3>, line 1)".
    evalue = _BARE_CELL_REF.sub(lambda m: name_cell(m)[1:-1], evalue)
    return {
        "ename": type(exc).__name__,
        "evalue": evalue,
        "traceback": text,
    }


def _sync_site(req):
    """Adds the configured venv's site-packages and picks up packages installed since."""
    for path in req.get("site_dirs") or ():
        if path in _STATE["site_dirs"] or not os.path.isdir(path):
            continue
        import site

        before = list(sys.path)
        site.addsitedir(path)
        added = [p for p in sys.path if p not in before]
        # A venv's packages shadow the base interpreter's, as they do in the venv itself.
        rest = [p for p in sys.path if p not in added]
        first_site = next(
            (i for i, p in enumerate(rest) if p.endswith(("site-packages", "dist-packages"))),
            len(rest),
        )
        sys.path[:] = rest[:first_site] + added + rest[first_site:]
        _STATE["site_dirs"].add(path)
        importlib.invalidate_caches()
    generation = req.get("generation")
    if generation is not None and generation != _STATE["generation"]:
        if _STATE["generation"] is not None:
            importlib.invalidate_caches()
        _STATE["generation"] = generation


# --- registry_lookup --------------------------------------------------------------------------


def _first_paragraph(doc):
    if not doc:
        return ""
    para = doc.strip().split("\n\n", 1)[0]
    para = " ".join(para.split())
    return para[:300] + ("…" if len(para) > 300 else "")


def _signature(obj, name):
    import inspect

    try:
        return name + str(inspect.signature(obj))
    except (TypeError, ValueError):
        return name + "(...)"


def _public_names(module):
    names = getattr(module, "__all__", None)
    if isinstance(names, (list, tuple)):
        return [n for n in names if isinstance(n, str)]
    return [n for n in vars(module) if not n.startswith("_")]


def _lookup(req):
    import inspect
    import pkgutil

    query = (req.get("query") or "").strip()
    package = (req.get("package") or "").strip()
    limit = int(req.get("limit") or 10)
    budget = float(req.get("budget_s") or 10.0)
    max_modules = int(req.get("max_modules") or 400)
    deadline = time.monotonic() + budget
    notes = []
    q = query.lower()
    words = [w for w in re.split(r"[^a-z0-9_]+", q) if w]

    if not package and "." in query:
        # `json.dumps`, `pandas.read_csv`: the longest importable prefix is the package.
        parts = query.split(".")
        for i in range(len(parts) - 1, 0, -1):
            candidate = ".".join(parts[:i])
            try:
                importlib.import_module(candidate)
            except BaseException:
                continue
            package, query = candidate, ".".join(parts[i:])
            q = query.lower()
            words = [w for w in re.split(r"[^a-z0-9_]+", q) if w]
            break

    if not package:
        # Without a package, match the names of importable top-level modules.
        names = set(sys.builtin_module_names)
        for info in pkgutil.iter_modules():
            names.add(info.name)
        hits = []
        for name in names:
            if name.startswith("_"):
                continue
            score = _score(name.lower(), "", q, words)
            if score:
                hits.append((score, name))
        hits.sort(key=lambda h: (-h[0], len(h[1]), h[1]))
        return {
            "package": None,
            "modules_searched": 0,
            "matches": [
                {"name": n, "kind": "module", "signature": n, "summary": "", "score": s}
                for s, n in hits[:limit]
            ],
            "total": len(hits),
            "notes": ["no package given: matched module names only; pass package to search inside one"],
        }

    try:
        root = importlib.import_module(package)
    except BaseException as e:
        raise LookupError("cannot import %s: %s: %s" % (package, type(e).__name__, e))

    modules = [(package, root)]
    seen_modules = {package}
    if hasattr(root, "__path__"):
        for info in pkgutil.walk_packages(root.__path__, package + ".", onerror=lambda name: None):
            if len(modules) >= max_modules:
                notes.append("stopped after %d modules" % max_modules)
                break
            if time.monotonic() > deadline:
                notes.append("stopped walking submodules after %.0f s" % budget)
                break
            name = info.name
            parts = name.split(".")
            if any(p.startswith("_") for p in parts) or any(p in ("tests", "test", "testing", "conftest") for p in parts):
                continue
            if name in seen_modules:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mod = importlib.import_module(name)
            except BaseException:
                continue
            seen_modules.add(name)
            modules.append((name, mod))

    seen_objects = set()
    hits = []
    for modname, mod in modules:
        for attr in _public_names(mod):
            try:
                obj = getattr(mod, attr)
            except BaseException:
                continue
            if not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            owner = getattr(obj, "__module__", None) or ""
            exported = isinstance(getattr(mod, "__all__", None), (list, tuple))
            if not exported and owner and not owner.startswith(package.split(".")[0]):
                continue  # something the module merely imported
            if id(obj) in seen_objects:
                continue
            seen_objects.add(id(obj))
            _consider(hits, "%s.%s" % (modname, attr), attr, obj, q, words)
            if inspect.isclass(obj):
                for mname, member in vars(obj).items():
                    if mname.startswith("_"):
                        continue
                    if not inspect.isroutine(member) and not isinstance(member, (classmethod, staticmethod)):
                        continue
                    target = getattr(obj, mname, member)
                    _consider(hits, "%s.%s.%s" % (modname, attr, mname), mname, target, q, words, member_of=obj)
    hits.sort(key=lambda h: (-h["score"], h["name"].count("."), len(h["name"]), h["name"]))
    return {
        "package": package,
        "modules_searched": len(modules),
        "matches": hits[:limit],
        "total": len(hits),
        "notes": notes,
    }


def _score(name, doc, q, words):
    if not q:
        return 0
    if name == q:
        return 100
    if name.startswith(q):
        return 80
    if q in name:
        return 60
    if words and all(w in name for w in words):
        return 55
    if doc and words:
        found = sum(1 for w in words if w in doc)
        if found == len(words):
            return 40
        if found:
            return 20 * found // len(words)
    return 0


def _consider(hits, qualname, name, obj, q, words, member_of=None):
    import inspect

    try:
        doc = inspect.getdoc(obj) or ""
    except BaseException:
        doc = ""
    score = _score(name.lower(), doc.lower(), q, words)
    if not score:
        return
    if member_of is not None:
        score -= 5  # a top-level function of that name is the likelier answer
    if inspect.isclass(obj):
        kind = "class"
    elif member_of is not None:
        kind = "method"
    else:
        kind = "function"
    hits.append(
        {
            "name": qualname,
            "kind": kind,
            "signature": _signature(obj, qualname.rsplit(".", 1)[-1] if member_of is None else name),
            "summary": _first_paragraph(doc),
            "score": score,
        }
    )


# --- requests ---------------------------------------------------------------------------------


def _info(req):
    import sysconfig

    return {
        "version": sys.version.replace("\n", " "),
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "executable": sys.executable,
        "stdlib": sysconfig.get_paths().get("stdlib", ""),
        "os_module": getattr(os, "__file__", ""),
        "path": list(sys.path),
        "signal_interrupts": bool(_STATE.get("signal")),
    }


def _dispatch(req):
    op = req.get("op")
    if op == "run":
        return _run(req)
    if op == "lookup":
        return _lookup(req)
    if op == "info":
        return _info(req)
    if op == "sync":
        _sync_site(req)
        return {}
    if op == "forget":
        # Sessions idle too long (or too many): their namespaces go; toolbox tells each one's
        # next call.
        for sid in req.get("sessions") or ():
            _SESSIONS.pop(sid, None)
        return {}
    raise ValueError("unknown op %r" % (op,))


def handle_object(req):
    """One request in, one response out, as plain dicts (the embedded backend hands them over
    without JSON). Never raises for bad user code."""
    try:
        # A run, the common case, without _dispatch's frame.
        return {"ok": True, "result": _run(req) if req.get("op") == "run" else _dispatch(req)}
    except ExecutionInterrupted as e:
        return {"ok": False, "error": "interrupted: %s" % (e or _INTERRUPT["reason"]), "interrupted": True}
    except BaseException as e:
        return {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}


def handle(request_json):
    """One request in, one response out, both JSON text (the isolated worker's protocol)."""
    try:
        req = json.loads(request_json)
        if not isinstance(req, dict):
            raise ValueError("a request must be a JSON object")
    except BaseException as e:
        return json.dumps({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    response = handle_object(req)
    try:
        return json.dumps(response, default=str)
    except BaseException as e:
        return json.dumps({"ok": False, "error": "the answer cannot be sent: %s: %s" % (type(e).__name__, e)})


def serve():
    """The isolated worker: JSON lines on the original stdin/stdout."""
    import faulthandler

    # Keep private copies of the protocol channels, then point fd 0 at /dev/null and fd 1 at
    # stderr so that nothing the user's code does between runs can corrupt the protocol.
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    diag = os.fdopen(os.dup(2), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    # A crash (segfault, abort) prints the Python stack to toolbox, which reports it.
    faulthandler.enable(file=diag)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", errors="replace", write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8", errors="replace", write_through=True)
    configure(embedded=False)
    _STATE["fd_capture"] = True
    # Each run's folder arrives as a descriptor on fd 3; nothing the code starts inherits it.
    import socket

    _STATE["folder_by_name"] = os.environ.pop("TOOLBOX_FOLDER_BY_NAME", "") == "1"
    try:
        os.set_inheritable(3, False)
        _STATE["folder_socket"] = socket.socket(fileno=3)
    except OSError:
        _STATE["folder_socket"] = None
    for line in proto_in:
        if not line.strip():
            continue
        proto_out.write(handle(line) + "\n")
        proto_out.flush()


if __name__ == "__main__" and "--serve" in sys.argv[1:]:
    serve()
