"""toolbox's helper inside an IPython kernel (the jupyter backend of run_python_code).

Installed once per connection as the module ``_toolbox_kernel`` (never in the user's
namespace) by a silent execute_request. It only acts on cells whose execute_request carries
``metadata.toolbox``: cells run by anyone else (the user's notebook on the same kernel) are
left exactly as IPython runs them.

For toolbox's cells it:

- before the cell: defines ``OUTPUT_DIR`` (the calling session's output folder, unless the
  code assigned another value), sets the environment variable ``PYTHON_EXEC_SCRATCHPAD`` to
  the calling session's scratchpad, changes to the session scratchpad when toolbox started the
  kernel, and refreshes the import caches after a ``kernel_install``;
- on an exception: sends the traceback in plain Python form, with the embedded backend's
  names (``<cell>`` for the current cell, ``<cell In[n]>`` for an earlier one, workspace
  paths relative), instead of IPython's coloured one;
- runs ``script_path`` requests (``run_script``) like the embedded driver does.
"""

import importlib
import os
import sys
import traceback

_STATE = {
    "shell": None,
    "original": None,
    "current": None,
    "generation": None,
    "output_dir": None,
}
_HELPER_FILE = "<toolbox-kernel>"


def install(shell):
    _STATE["shell"] = shell
    shell.events.register("pre_run_cell", _pre_run_cell)
    shell.events.register("post_run_cell", _post_run_cell)
    original = shell._showtraceback
    _STATE["original"] = original

    def _showtraceback(etype, evalue, stb):
        return _show(etype, evalue, stb)

    _showtraceback._toolbox = True
    # An instance attribute shadows the method for this shell only.
    shell._showtraceback = _showtraceback


def uninstall():
    shell = _STATE["shell"]
    if shell is None:
        return
    for event, hook in (("pre_run_cell", _pre_run_cell), ("post_run_cell", _post_run_cell)):
        try:
            shell.events.unregister(event, hook)
        except ValueError:
            pass
    if getattr(vars(shell).get("_showtraceback"), "_toolbox", False):
        del shell._showtraceback
    _STATE["shell"] = None


def _request_metadata(info):
    meta = getattr(info, "cell_meta", None)
    if isinstance(meta, dict) and "toolbox" in meta:
        return meta
    kernel = getattr(_STATE["shell"], "kernel", None)
    try:
        parent = kernel.get_parent()
    except Exception:
        parent = getattr(kernel, "_parent", None) or {}
    meta = parent.get("metadata") if isinstance(parent, dict) else None
    return meta if isinstance(meta, dict) else {}


def _pre_run_cell(info):
    run = _request_metadata(info).get("toolbox")
    if not isinstance(run, dict):
        _STATE["current"] = None
        return
    _STATE["current"] = run
    ns = _STATE["shell"].user_ns
    output_dir = run.get("output_dir")
    # Like the embedded backend, OUTPUT_DIR stays whatever the code set it to; a kernel shared
    # by several sessions gets the calling session's folder as long as nobody changed it.
    if output_dir and ns.get("OUTPUT_DIR", _STATE["output_dir"]) == _STATE["output_dir"]:
        ns["OUTPUT_DIR"] = output_dir
        _STATE["output_dir"] = output_dir
    # The calling session's scratchpad, for temporary files (the kernel is a process of its
    # own: its real environment, inherited by what it starts).
    scratchpad = run.get("scratchpad")
    if scratchpad and os.environ.get("PYTHON_EXEC_SCRATCHPAD") != scratchpad:
        os.environ["PYTHON_EXEC_SCRATCHPAD"] = scratchpad
    cwd = run.get("cwd")
    if cwd:
        try:
            os.chdir(cwd)
        except OSError:
            pass
    generation = run.get("generation")
    if generation != _STATE["generation"]:
        if _STATE["generation"] is not None:
            importlib.invalidate_caches()
        _STATE["generation"] = generation


def _post_run_cell(result):
    _STATE["current"] = None


def _show(etype, evalue, stb):
    original = _STATE["original"]
    run = _STATE["current"]
    if run is None or not isinstance(evalue, BaseException):
        return original(etype, evalue, stb)
    try:
        text, value_text = _plain_traceback(etype, evalue, run)
    except Exception:
        return original(etype, evalue, stb)
    # ipykernel only takes str() of the value and the type's name.
    return original(etype, value_text, [text])


def _ipython_dir():
    module = sys.modules.get("IPython")
    path = getattr(module, "__file__", None)
    return os.path.dirname(path) + os.sep if path else None


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _plain_traceback(etype, value, run):
    shell = _STATE["shell"]
    cells = getattr(getattr(shell, "compile", None), "_filename_map", {}) or {}
    ipython = _ipython_dir()

    def internal(tb):
        name = tb.tb_frame.f_code.co_filename
        return name == _HELPER_FILE or bool(ipython and name.startswith(ipython))

    def runner(tb):
        # A script request's own cell, the helper and runpy, above the script's frames.
        name = tb.tb_frame.f_code.co_filename
        return internal(tb) or name in cells or os.path.basename(name) in ("runpy.py", "<frozen runpy>")

    tb = value.__traceback__
    while tb is not None and internal(tb):
        tb = tb.tb_next
    # The cell being run is the first frame below IPython's own; a syntax error in it has no
    # frame of its own, only its file name. (Cell file names come from the code, so the
    # number in the map can belong to a later run of the same code.)
    syntax = isinstance(value, SyntaxError) and value.filename in cells
    if tb is not None:
        current = tb.tb_frame.f_code.co_filename
    elif syntax:
        current = value.filename
    else:
        current = None
    if run.get("script"):
        while tb is not None and runner(tb):
            tb = tb.tb_next
    text = "".join(traceback.format_exception(etype, value, tb))
    value_text = str(value)
    names = {f.tb_frame.f_code.co_filename for f in _frames(tb)}
    if syntax:
        names.add(value.filename)
    for name in names:
        number = cells.get(name)
        if number is None:
            continue
        label = "<cell>" if name == current else "<cell In[%d]>" % number
        text = text.replace('"%s"' % name, '"%s"' % label)
        if syntax and name == value.filename:
            # str(SyntaxError) names the file by its base name: "msg (file.py, line 1)".
            value_text = value_text.replace("(%s, line" % os.path.basename(name), "(%s, line" % label)
    root = run.get("root")
    if root:
        text = text.replace(root.rstrip("/") + "/", "")
    return text, value_text


def run_script(path, args):
    """Runs a workspace script as __main__; its top-level names land in the namespace."""
    import runpy

    ns = _STATE["shell"].user_ns
    old_argv = sys.argv
    sys.argv = [path] + list(args)
    try:
        init = {"OUTPUT_DIR": ns["OUTPUT_DIR"]} if "OUTPUT_DIR" in ns else None
        result = runpy.run_path(path, init_globals=init, run_name="__main__")
    finally:
        sys.argv = old_argv
    for name, value in result.items():
        if not (name.startswith("__") and name.endswith("__")):
            ns[name] = value
