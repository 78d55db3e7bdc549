//! run_python_code on both backends: sessions, output, errors, figures, scripts, timeouts,
//! crashes, and the interpreter's identity.
//!
//! The embedded interpreter is process-global, so these tests share it (each with its own
//! workspace, hence its own sessions). The one test that leaves it blocked in C code lives in
//! its own test binary (tests/embedded_blocking.rs).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::test_support::*;
use crate::PythonConfig;

/// The interpreter the tests' calls find at run time (no `[python] interpreter`).
fn found() -> std::sync::Arc<crate::FoundPython> {
    crate::discover::find(None).expect("a Python interpreter")
}

const RUN: &str = "run_python_code";
const BACKENDS: [&str; 2] = ["embedded", "isolated"];
/// Every backend; `jupyter` is an ipykernel toolbox starts from the test venv's kernelspec.
const ALL_BACKENDS: [&str; 3] = ["embedded", "isolated", "jupyter"];

/// The `[python]` table for `backend`, plus `extra` keys.
fn backend_table(backend: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut table = json!({ "backend": backend });
    if backend == "jupyter" {
        // The venv is where the python3 kernelspec (ipykernel's) is found.
        table["kernel_name"] = json!("python3");
        table["venv"] = json!(test_venv().to_string_lossy());
    }
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            table[k] = v.clone();
        }
    }
    table
}

async fn run(ctx: &toolbox_host::ToolContext, code: &str) -> Result<String, String> {
    call(ctx, RUN, json!({ "code": code })).await
}

/// The test venv (scripts/test.sh makes it and exports TOOLBOX_TEST_PYTHON) has matplotlib.
pub(crate) fn test_venv() -> PathBuf {
    let python = std::env::var_os("TOOLBOX_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-venv/bin/python")
        });
    let venv = python
        .parent()
        .and_then(|bin| bin.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    assert!(
        venv.join("pyvenv.cfg").is_file(),
        "these tests need the test venv with tests/requirements.txt installed: run \
         scripts/test.sh, or set TOOLBOX_TEST_PYTHON to its python (looked at {})",
        venv.display()
    );
    venv
}

/// The embedded interpreter runs one job at a time for the whole process, so tests that
/// measure timeouts must not queue behind another test's slow import: run them one by one.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

#[tokio::test]
async fn namespaces_persist_per_session_and_stay_apart() {
    let _serial = serial().await;
    for backend in ALL_BACKENDS {
        let (_d, a) = setup(RUN, "alpha", backend_table(backend, json!({})));
        let b = other_session(&a, "beta");
        assert_eq!(
            run(&a, "x = 1").await.unwrap(),
            "(no output)\n",
            "{backend}"
        );
        assert_eq!(
            run(&a, "x + 1").await.unwrap(),
            "[result]\n2\n",
            "{backend}"
        );
        let text = run(&b, "x").await.unwrap();
        assert!(
            text.starts_with("[error] NameError: name 'x' is not defined"),
            "{backend}: {text}"
        );
        // Both sessions can have the same name with different values.
        run(&b, "x = 'beta'").await.unwrap();
        assert_eq!(run(&a, "x").await.unwrap(), "[result]\n1\n", "{backend}");
        assert_eq!(
            run(&b, "x").await.unwrap(),
            "[result]\n'beta'\n",
            "{backend}"
        );
    }
}

#[tokio::test]
async fn output_streams_final_expression_and_display() {
    let _serial = serial().await;
    for backend in BACKENDS {
        let (_d, ctx) = setup(RUN, "out", json!({ "backend": backend }));
        let text = run(
            &ctx,
            "import sys\nprint('hello')\nprint('warn', file=sys.stderr)\n{'a': [1, 2]}",
        )
        .await
        .unwrap();
        assert_eq!(
            text, "[stdout]\nhello\n[stderr]\nwarn\n[result]\n{'a': [1, 2]}\n",
            "{backend}"
        );
        // None is not shown; a trailing semicolon hides the value; display() shows reprs.
        assert_eq!(run(&ctx, "None").await.unwrap(), "(no output)\n");
        assert_eq!(run(&ctx, "1 + 1;").await.unwrap(), "(no output)\n");
        assert_eq!(
            run(&ctx, "display('shown'); 3").await.unwrap(),
            "[display_data]\n'shown'\n[result]\n3\n"
        );
        // What a run displayed is its own: the next run starts with nothing to show.
        assert_eq!(run(&ctx, "4").await.unwrap(), "[result]\n4\n", "{backend}");
        // Like a notebook, the value's repr: a class with __repr__ (df.head() works this way).
        let text = run(
            &ctx,
            "class Frame:\n    def __repr__(self):\n        return '   a  b\\n0  1  2'\nFrame()",
        )
        .await
        .unwrap();
        assert_eq!(text, "[result]\n   a  b\n0  1  2\n", "{backend}");
        // input() cannot read the host's stdin (it may carry a protocol).
        let text = run(&ctx, "input()").await.unwrap();
        assert!(text.contains("EOFError"), "{backend}: {text}");
    }
}

#[tokio::test]
async fn output_printed_between_runs_comes_with_the_next_run() {
    let _serial = serial().await;
    let (_d, ctx) = setup(RUN, "late", json!({ "backend": "embedded" }));
    // A thread of the session prints after its cell has answered; nothing is lost, and
    // nothing reaches the host's own stdout.
    let text = run(
        &ctx,
        "import threading, time, sys\n\
         def late():\n    time.sleep(0.2)\n    print('late out')\n    \
         print('late err', file=sys.stderr)\n\
         t = threading.Thread(target=late)\nt.start()",
    )
    .await
    .unwrap();
    assert_eq!(text, "(no output)\n");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let text = run(&ctx, "t.join()\nprint('now')").await.unwrap();
    assert_eq!(text, "[stdout]\nlate out\nnow\n[stderr]\nlate err\n");
    // Shown once: the next run starts empty.
    assert_eq!(run(&ctx, "x = 1").await.unwrap(), "(no output)\n");
    // Code that replaces sys.stdout gets what it asked for in that run; the next run is
    // captured again.
    let text = run(
        &ctx,
        "import io\nmine = io.StringIO()\nsys.stdout = mine\nprint('kept')\n\
         sys.stderr = io.StringIO()",
    )
    .await
    .unwrap();
    assert_eq!(text, "(no output)\n");
    let text = run(&ctx, "print('again', mine.getvalue().strip())")
        .await
        .unwrap();
    assert_eq!(text, "[stdout]\nagain kept\n");
    let text = run(&ctx, "print('err', file=sys.stderr)").await.unwrap();
    assert_eq!(text, "[stderr]\nerr\n");
}

#[tokio::test]
async fn exceptions_carry_ename_evalue_and_cell_lines() {
    let _serial = serial().await;
    for backend in BACKENDS {
        let (_d, ctx) = setup(RUN, "err", json!({ "backend": backend }));
        run(&ctx, "def f(n):\n    return 10 / n").await.unwrap();
        let text = run(&ctx, "print('before')\ny = 5\nf(0)").await.unwrap();
        assert!(text.starts_with("[stdout]\nbefore\n[error] ZeroDivisionError: division by zero\nTraceback (most recent call last):\n"), "{backend}: {text}");
        assert!(
            text.contains("  File \"<cell>\", line 3, in <module>\n    f(0)\n"),
            "{backend}: {text}"
        );
        // The function came from an earlier cell, shown with its source line.
        assert!(
            text.contains("  File \"<cell In[1]>\", line 2, in f\n    return 10 / n\n"),
            "{backend}: {text}"
        );
        assert!(
            !text.contains("toolbox_driver"),
            "driver frames hidden: {text}"
        );
        // The session survived, with what ran before the error.
        assert_eq!(run(&ctx, "y").await.unwrap(), "[result]\n5\n");
        let text = run(&ctx, "for i in range(3)\n    pass").await.unwrap();
        assert!(
            text.starts_with("[error] SyntaxError: expected ':'"),
            "{backend}: {text}"
        );
        assert!(
            text.contains("File \"<cell>\", line 1"),
            "{backend}: {text}"
        );
        let text = run(&ctx, "!pip install pandas").await.unwrap();
        assert!(
            text.contains("note: IPython magics and shell escapes"),
            "{backend}: {text}"
        );
        // sys.exit() ends the code, not the session.
        let text = run(&ctx, "import sys\nsys.exit(0)").await.unwrap();
        assert!(text.contains("sys.exit(0); the session goes on"), "{text}");
        let text = run(&ctx, "raise SystemExit(3)").await.unwrap();
        assert!(text.starts_with("[error] SystemExit: 3"), "{text}");
        assert_eq!(run(&ctx, "y").await.unwrap(), "[result]\n5\n");
    }
}

#[tokio::test]
async fn embedded_output_beyond_the_cap_is_dropped_with_a_note() {
    // The cap is lowered for two runs and put back: the embedded interpreter is shared by
    // this process's tests (serial() keeps the others out meanwhile).
    let _serial = serial().await;
    let (_d, ctx) = setup(RUN, "cap", json!({ "backend": "embedded" }));
    run(
        &ctx,
        "import sys\nsys._getframe(1).f_globals['MAX_STREAM_CHARS'] = 10",
    )
    .await
    .unwrap();
    let text = run(&ctx, "print('a' * 7)\nprint('b' * 7)").await;
    let restored = run(
        &ctx,
        "import sys\nsys._getframe(1).f_globals['MAX_STREAM_CHARS'] = 8 * 1024 * 1024",
    )
    .await;
    assert_eq!(
        text.unwrap(),
        "[stdout]\naaaaaaa\nbb\n[... 6 more characters dropped ...]\n"
    );
    assert_eq!(restored.unwrap(), "(no output)\n");
    // The count starts again with the next run.
    assert_eq!(
        run(&ctx, "print('c' * 12)").await.unwrap(),
        "[stdout]\ncccccccccccc\n"
    );
}

#[tokio::test]
async fn old_cell_sources_are_forgotten_beyond_the_bound() {
    // A long-lived server must not keep every cell's source forever. The isolated backend
    // has a process of its own, so lowering the driver's bound there touches no other test.
    let _serial = serial().await;
    let (_d, ctx) = setup(RUN, "bound", json!({ "backend": "isolated" }));
    run(&ctx, "def f(n):\n    return 10 / n").await.unwrap();
    run(
        &ctx,
        "import sys\nsys._getframe(1).f_globals['MAX_KEPT_CELLS'] = 3",
    )
    .await
    .unwrap();
    for i in 0..4 {
        run(&ctx, &format!("z = {i}")).await.unwrap();
    }
    let kept = run(
        &ctx,
        "import linecache\nlen([k for k in linecache.cache if k.startswith('<cell-')])",
    )
    .await
    .unwrap();
    assert_eq!(kept, "[result]\n3\n");
    // f's cell is gone: its frame is named as an earlier cell, without the source line.
    let text = run(&ctx, "f(0)").await.unwrap();
    assert!(
        text.contains("  File \"<cell>\", line 1, in <module>\n    f(0)\n"),
        "{text}"
    );
    assert!(
        text.contains("  File \"<an earlier cell>\", line 2, in f\n"),
        "{text}"
    );
    assert!(!text.contains("return 10 / n"), "{text}");
}

/// `PYTHON_EXEC_SCRATCHPAD` holds the session scratchpad on every backend (a started
/// kernel's helper sets it too), in cells and scripts, and follows the running session.
#[tokio::test]
async fn python_exec_scratchpad_names_the_session_scratchpad_on_every_backend() {
    let _serial = serial().await;
    for backend in ALL_BACKENDS {
        let (_d, ctx) = setup(RUN, "env-a", backend_table(backend, json!({})));
        let show = "import os\np = os.environ['PYTHON_EXEC_SCRATCHPAD']\n(p, os.path.isdir(p))";
        let text = run(&ctx, show).await.unwrap();
        let scratch = ctx.workspace.scratchpad().unwrap();
        assert_eq!(
            text,
            format!("[result]\n('{}', True)\n", scratch.display()),
            "{backend}"
        );
        // Children inherit it, however code starts them (issue 41, point 5): the embedded
        // backend runs inside toolbox's process, whose C environment never holds it.
        let children = "import os, subprocess\n\
                        a = subprocess.run(['sh', '-c', 'printf %s \"$PYTHON_EXEC_SCRATCHPAD\"'], \
                        capture_output=True, text=True).stdout\n\
                        b = os.popen('printf %s \"$PYTHON_EXEC_SCRATCHPAD\"').read()\n\
                        os.system('printf %s \"$PYTHON_EXEC_SCRATCHPAD\" > child.txt')\n\
                        c = open('child.txt').read()\n\
                        d = subprocess.check_output(['sh', '-c', 'printf %s \"$PYTHON_EXEC_SCRATCHPAD\"'], \
                        env={**os.environ, 'EXTRA': '1'}, text=True)\n\
                        'same: ' + a if a == b == c == d else (a, b, c, d)";
        let text = run(&ctx, children).await.unwrap();
        let s = scratch.display();
        assert_eq!(text, format!("[result]\n'same: {s}'\n"), "{backend}");
        let other = other_session(&ctx, "env-b");
        let text = run(&other, show).await.unwrap();
        let theirs = other.workspace.scratchpad().unwrap();
        assert_eq!(
            text,
            format!("[result]\n('{}', True)\n", theirs.display()),
            "{backend}"
        );
        // And the next session's children get the next session's.
        let text = run(&other, "import subprocess\nsubprocess.check_output(['printenv', 'PYTHON_EXEC_SCRATCHPAD'], text=True).strip()").await.unwrap();
        assert_eq!(
            text,
            format!("[result]\n'{}'\n", theirs.display()),
            "{backend}"
        );
        std::fs::write(
            ctx.workspace.root().join("show.py"),
            "import os\nprint(os.environ['PYTHON_EXEC_SCRATCHPAD'])\n",
        )
        .unwrap();
        let text = call(&ctx, RUN, json!({"script_path": "show.py"}))
            .await
            .unwrap();
        assert_eq!(
            text,
            format!("[stdout]\n{}\n", scratch.display()),
            "{backend}"
        );
    }
}

#[tokio::test]
async fn working_directory_is_the_scratchpad() {
    let _serial = serial().await;
    for backend in BACKENDS {
        let (_d, ctx) = setup(RUN, "cwd", json!({ "backend": backend }));
        let scratch = ctx.workspace.scratchpad().unwrap();
        let text = run(
            &ctx,
            "import os\nopen('note.txt', 'w').write('hi')\nprint(os.getcwd())\nOUTPUT_DIR",
        )
        .await
        .unwrap();
        let output = ctx.workspace.output_dir().unwrap();
        assert_eq!(
            text,
            format!(
                "[stdout]\n{}\n[result]\n'{}'\n",
                scratch.display(),
                output.display()
            ),
            "{backend}"
        );
        assert_eq!(
            std::fs::read_to_string(scratch.join("note.txt")).unwrap(),
            "hi"
        );
        // A helper module written to the scratchpad imports, as in Jupyter.
        std::fs::write(scratch.join(format!("helper_{backend}.py")), "VALUE = 7\n").unwrap();
        let text = run(
            &ctx,
            &format!("import helper_{backend}\nhelper_{backend}.VALUE"),
        )
        .await
        .unwrap();
        assert_eq!(text, "[result]\n7\n", "{backend}");
    }
    // Whatever folder the code moves to, the next run starts in the scratchpad again.
    let (_d, ctx) = setup(RUN, "cwd", json!({ "backend": "embedded" }));
    run(&ctx, "import os\nos.chdir('/')").await.unwrap();
    let text = run(&ctx, "import os\nos.getcwd()").await.unwrap();
    let scratch = ctx.workspace.scratchpad().unwrap();
    assert_eq!(text, format!("[result]\n'{}'\n", scratch.display()));
    // Later runs of a session go without its folders (the embedded driver keeps them from
    // the first): OUTPUT_DIR still comes back, and tracebacks still show paths short.
    run(&ctx, "del OUTPUT_DIR").await.unwrap();
    let output = ctx.workspace.output_dir().unwrap();
    let text = run(&ctx, "OUTPUT_DIR").await.unwrap();
    assert_eq!(text, format!("[result]\n'{}'\n", output.display()));
    std::fs::write(
        scratch.join("boom.py"),
        "def f():\n    raise ValueError('x')\n",
    )
    .unwrap();
    let text = run(&ctx, "import boom\nboom.f()").await.unwrap();
    assert!(
        text.contains("File \".toolbox/sessions/cwd/scratchpad/boom.py\", line 2"),
        "{text}"
    );
    assert!(
        !text.contains(&ctx.workspace.root().display().to_string()),
        "{text}"
    );
    // Another session of the same workspace gets its own folders.
    let other = other_session(&ctx, "cwd2");
    let text = run(&other, "import os\nos.getcwd(), OUTPUT_DIR")
        .await
        .unwrap();
    assert_eq!(
        text,
        format!(
            "[result]\n('{}', '{}')\n",
            other.workspace.scratchpad().unwrap().display(),
            other.workspace.output_dir().unwrap().display()
        )
    );
}

#[tokio::test]
async fn scripts_run_as_main_with_args_and_leave_their_names() {
    let _serial = serial().await;
    for backend in BACKENDS {
        let (_d, ctx) = setup(RUN, "script", json!({ "backend": backend }));
        std::fs::create_dir_all(ctx.workspace.root().join("tools")).unwrap();
        std::fs::write(
            ctx.workspace.root().join("tools/count.py"),
            "import sys\nresult = len(sys.argv) - 1\nif __name__ == '__main__':\n    print('main', sys.argv[1:])\n",
        )
        .unwrap();
        let text = call(
            &ctx,
            RUN,
            json!({"script_path": "tools/count.py", "args": ["a", "b c"]}),
        )
        .await
        .unwrap();
        assert_eq!(text, "[stdout]\nmain ['a', 'b c']\n", "{backend}");
        assert_eq!(run(&ctx, "result").await.unwrap(), "[result]\n2\n");
        std::fs::write(ctx.workspace.root().join("tools/bad.py"), "x = 1\n1 / 0\n").unwrap();
        let text = call(&ctx, RUN, json!({"script_path": "tools/bad.py"}))
            .await
            .unwrap();
        assert!(
            text.contains("File \"tools/bad.py\", line 2, in <module>"),
            "{backend}: {text}"
        );
        assert!(!text.contains("runpy"), "{backend}: {text}");
    }
}

#[tokio::test]
async fn figures_are_saved_as_png_under_output() {
    let _serial = serial().await;
    let venv = test_venv();
    for backend in BACKENDS {
        let (_d, ctx) = setup(
            RUN,
            "fig",
            json!({ "backend": backend, "venv": venv.to_string_lossy() }),
        );
        let text = run(
            &ctx,
            "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nplt.figure()\nplt.bar(['a'], [1])\nprint(plt.get_backend().lower())",
        )
        .await
        .unwrap();
        assert_eq!(
            text,
            "[stdout]\nagg\n[display_data]\nimage/png .toolbox/sessions/fig/output/figure-1.png (output/figure-1.png)\nimage/png .toolbox/sessions/fig/output/figure-2.png (output/figure-2.png)\n",
            "{backend}"
        );
        for n in [1, 2] {
            let png = std::fs::read(
                ctx.workspace
                    .resolve(&format!("output/figure-{n}.png"))
                    .unwrap(),
            )
            .unwrap();
            assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{backend}");
        }
        // Figures were closed: nothing is saved twice, and numbering goes on.
        assert_eq!(
            run(&ctx, "len(plt.get_fignums())").await.unwrap(),
            "[result]\n0\n"
        );
        let text = run(&ctx, "plt.plot([3, 1]);").await.unwrap();
        assert_eq!(
            text, "[display_data]\nimage/png .toolbox/sessions/fig/output/figure-3.png (output/figure-3.png)\n",
            "{backend}"
        );
        // A DataFrame's repr, as df.head() shows it in a notebook.
        let text = run(
            &ctx,
            "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]}).head()",
        )
        .await
        .unwrap();
        assert_eq!(text, "[result]\n   a  b\n0  1  3\n1  2  4\n", "{backend}");
    }
}

#[tokio::test]
async fn embedded_timeouts_interrupt_and_keep_the_session() {
    let _serial = serial().await;
    let (_d, ctx) = setup(RUN, "timeout", json!({ "backend": "embedded" }));
    run(&ctx, "kept = 'yes'").await.unwrap();
    // A busy pure-Python loop.
    let started = Instant::now();
    let e = call(
        &ctx,
        RUN,
        json!({"code": "n = 0\nprint('started')\nwhile True:\n    n += 1", "timeout_ms": 300}),
    )
    .await
    .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1800), "{took:?}");
    assert!(
        e.starts_with("run_python_code timed out after 300 ms: the code was interrupted"),
        "{e}"
    );
    assert!(e.contains("The session is intact"), "{e}");
    assert!(
        e.contains("[stdout]\nstarted\n"),
        "partial output kept: {e}"
    );
    assert!(
        e.contains("[error] ExecutionInterrupted: run_python_code timed out after 300 ms"),
        "{e}"
    );
    assert!(e.contains("File \"<cell>\", line "), "{e}");
    assert!(
        e.contains("\nExecutionInterrupted: run_python_code timed out after 300 ms\n"),
        "{e}"
    );
    // A blocking system call is woken by the signal and interrupted too.
    let started = Instant::now();
    let e = call(
        &ctx,
        RUN,
        json!({"code": "import time\ntime.sleep(1000)", "timeout_ms": 300}),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{:?}",
        started.elapsed()
    );
    assert!(e.contains("the code was interrupted"), "{e}");
    // So is waiting for a subprocess (subprocess.run kills the child on the way out).
    let started = Instant::now();
    let e = call(
        &ctx,
        RUN,
        json!({"code": "import subprocess\nsubprocess.run(['sleep', '100'])", "timeout_ms": 300}),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{:?}",
        started.elapsed()
    );
    assert!(e.contains("the code was interrupted"), "{e}");
    // `except Exception` does not swallow it; a bare except is hit again.
    let e = call(
        &ctx,
        RUN,
        json!({"code": "while True:\n    try:\n        sum(range(1000))\n    except Exception:\n        pass", "timeout_ms": 200}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("the code was interrupted"), "{e}");
    // Everything before is still there and the interpreter is free.
    let text = run(&ctx, "(kept, n > 0)").await.unwrap();
    assert_eq!(text, "[result]\n('yes', True)\n");
}

#[tokio::test]
async fn cancellation_interrupts_embedded_runs() {
    let _serial = serial().await;
    let (d, ctx) = setup(RUN, "cancel", json!({ "backend": "embedded" }));
    let cancel = ctx.cancel.clone();
    // Cancelled once the loop runs: a busy interpreter (another test's cell, a slow start
    // on a loaded machine) would otherwise see the call cancelled before it started.
    let marker = d.path().join("looping");
    let code = format!(
        "open({:?}, 'w').close()\nwhile True: pass",
        marker.display().to_string()
    );
    tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !marker.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.cancel();
    });
    let e = run(&ctx, &code).await.unwrap_err();
    assert!(
        e.starts_with("run_python_code was cancelled: the code was interrupted"),
        "{e}"
    );
}

#[tokio::test]
async fn isolated_timeouts_kill_and_restart_the_session() {
    let _serial = serial().await;
    let (_d, ctx) = setup(RUN, "hard", json!({ "backend": "isolated" }));
    run(&ctx, "lost = 1").await.unwrap();
    let started = Instant::now();
    // Even code that ignores every interrupt, blocked in C, is stopped.
    let e = call(
        &ctx,
        RUN,
        json!({"code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(1000)", "timeout_ms": 400}),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        e,
        "run_python_code timed out after 400 ms: the worker process was killed; the session \
         was restarted and its state (variables, imports) is lost; the next call starts a \
         fresh worker."
    );
    let text = run(&ctx, "'lost' in globals()").await.unwrap();
    assert!(text.starts_with("note: this session's previous Python worker timed out after 400 ms and was killed; a new one was started"), "{text}");
    assert!(text.ends_with("[result]\nFalse\n"), "{text}");
}

#[tokio::test]
async fn isolated_crashes_do_not_touch_the_host() {
    let _serial = serial().await;
    let (_d, ctx) = setup(RUN, "crash", json!({ "backend": "isolated" }));
    run(&ctx, "state = 1").await.unwrap();
    let e = run(&ctx, "import os\nos._exit(3)").await.unwrap_err();
    assert!(
        e.starts_with("run_python_code: the Python worker process exited with status 3"),
        "{e}"
    );
    assert!(
        e.contains("the session was restarted and its state (variables, imports) is lost"),
        "{e}"
    );
    let text = run(&ctx, "'state' in globals()").await.unwrap();
    assert!(text.contains("previous Python worker crashed"), "{text}");
    assert!(text.ends_with("[result]\nFalse\n"), "{text}");
    // A segmentation fault: the worker dies with SIGSEGV and says where.
    let e = run(&ctx, "import ctypes\nctypes.string_at(0)")
        .await
        .unwrap_err();
    assert!(e.contains("killed by signal 11 (SIGSEGV"), "{e}");
    assert!(e.contains("Fatal Python error: Segmentation fault"), "{e}");
    assert!(e.contains("the session was restarted"), "{e}");
    assert_eq!(
        run(&ctx, "2 * 21").await.unwrap().lines().last(),
        Some("42")
    );
}

#[tokio::test]
async fn isolated_captures_output_written_to_file_descriptors() {
    let _serial = serial().await;
    let (_d, ctx) = setup(RUN, "fd", json!({ "backend": "isolated" }));
    let text = run(
        &ctx,
        "import os, subprocess\nprint('a', flush=True)\nos.system('echo b')\nsubprocess.run(['sh', '-c', 'echo c >&2'])\nprint('d')",
    )
    .await
    .unwrap();
    assert_eq!(text, "[stdout]\na\nb\nd\n[stderr]\nc\n");
}

#[tokio::test]
async fn embedded_interpreter_is_the_interpreter_found_at_run_time() {
    let _serial = serial().await;
    let python = found();
    let info = crate::embedded::info(None).await.unwrap();
    assert_eq!(info["version"], python.version);
    assert_eq!(info["prefix"], python.prefix.to_str().unwrap());
    assert_eq!(info["executable"], python.executable.to_str().unwrap());
    let prefix = python.prefix.to_str().unwrap();
    for key in ["stdlib", "os_module"] {
        let path = info[key].as_str().unwrap();
        assert!(path.starts_with(prefix), "{key} {path} not under {prefix}");
    }
    let lib = info["libpython"].as_str().unwrap();
    assert_eq!(
        std::path::Path::new(lib),
        python.library.as_ref().unwrap(),
        "the libpython loaded is the one found"
    );
    assert_eq!(info["signal_interrupts"], true);
    // The isolated worker is the same Python.
    let (_d, ctx) = setup(RUN, "who", json!({ "backend": "isolated" }));
    let text = run(
        &ctx,
        "import sys\n(sys.version.replace('\\n', ' '), sys.prefix)",
    )
    .await
    .unwrap();
    assert_eq!(
        text,
        format!("[result]\n({:?}, {:?})\n", python.version, prefix).replace('"', "'")
    );
}

/// A minimal pure-Python wheel, written by hand (no setuptools, no network); shared with
/// the jupyter tests of tests/tests/python_jupyter.rs.
const WHEEL_BUILDER: &str = include_str!("../../tests/make_wheel.py");

pub(crate) fn build_wheel(dir: &std::path::Path, name: &str) {
    let status = std::process::Command::new(&found().executable)
        .args(["-c", WHEEL_BUILDER, name, "0.1.0"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn kernel_install_from_a_local_wheel_imports_without_restart() {
    let _serial = serial().await;
    for backend in BACKENDS {
        let (dir, mut ctx) = setup(RUN, "pkg", json!({}));
        let wheels = dir.path().join("wheels");
        std::fs::create_dir(&wheels).unwrap();
        let name = format!("toolbox_demo_{backend}");
        build_wheel(&wheels, &name);
        // A fresh venv (created on first use) so nothing reaches the found interpreter, and
        // pip pointed at the local folder only: offline.
        ctx.config = std::sync::Arc::new(json!({"python": {
            "backend": backend,
            "venv": ".venv",
            "pip_args": ["--no-index", "--find-links", wheels.to_string_lossy()],
        }}));
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = events.clone();
        ctx.events = toolbox_host::EventSink::new(move |event| {
            if let toolbox_host::ToolEvent::Progress { message, .. } = event {
                seen.lock().unwrap().push(message);
            }
        });

        // Importing first also fills the import system's negative caches.
        let text = run(&ctx, &format!("import {name}")).await.unwrap();
        assert!(text.contains("ModuleNotFoundError"), "{backend}: {text}");

        let requirement = format!("{}==0.1.0", name.replace('_', "-"));
        let text = call(
            &ctx,
            crate::install::NAME,
            json!({ "packages": [requirement] }),
        )
        .await
        .unwrap();
        assert!(
            text.starts_with("Installed into the venv "),
            "{backend}: {text}"
        );
        assert!(
            text.contains(&format!(
                "Successfully installed {}-0.1.0",
                name.replace('_', "-")
            )),
            "{backend}: {text}"
        );
        let progress = events.lock().unwrap().clone();
        assert!(
            progress.iter().any(|m| m.contains("-m pip install")),
            "{progress:?}"
        );
        assert!(
            progress
                .iter()
                .any(|m| m.starts_with("Processing ") || m.contains("Successfully installed")),
            "pip's own lines stream as progress: {progress:?}"
        );

        // The live session imports it now.
        let text = run(&ctx, &format!("import {name}\n{name}.hello()"))
            .await
            .unwrap();
        assert_eq!(
            text,
            format!("[result]\n'hello from {name}'\n"),
            "{backend}"
        );
        // It went into the venv, not into the found interpreter.
        let site = PythonConfig::from_value(Some(&json!({"venv": ".venv"})), ctx.workspace.root())
            .unwrap()
            .site_packages()
            .unwrap();
        assert!(site.join(&name).join("__init__.py").is_file(), "{backend}");
        let base = std::process::Command::new(&found().executable)
            .args(["-c", &format!("import {name}")])
            .output()
            .unwrap();
        assert!(
            !base.status.success(),
            "{backend}: the found interpreter was changed"
        );

        // pip's failure is reported with its words.
        let e = call(
            &ctx,
            "kernel_install",
            json!({ "packages": ["toolbox-no-such-package"] }),
        )
        .await
        .unwrap_err();
        assert!(e.starts_with("kernel_install: pip install failed"), "{e}");
        assert!(
            e.contains("No matching distribution found for toolbox-no-such-package"),
            "{e}"
        );
    }
}

/// The same cells on every backend: the rendered results must be identical (workspace paths
/// aside), and match what a notebook user expects.
#[tokio::test]
async fn the_same_cells_render_the_same_on_every_backend() {
    let _serial = serial().await;
    let venv = test_venv();
    // (code or script, expected text on every backend; None: only compared across backends)
    let cases: &[(&str, Option<&str>)] = &[
        ("x = 1", Some("(no output)\n")),
        ("x + 1", Some("[result]\n2\n")),
        (
            "import sys\nprint('hello')\nprint('warn', file=sys.stderr)\n{'a': [1, 2]}",
            Some("[stdout]\nhello\n[stderr]\nwarn\n[result]\n{'a': [1, 2]}\n"),
        ),
        ("None", Some("(no output)\n")),
        ("1 + 1;", Some("(no output)\n")),
        ("print('héllo ✓')", Some("[stdout]\nhéllo ✓\n")),
        (
            "display('shown'); 3",
            Some("[display_data]\n'shown'\n[result]\n3\n"),
        ),
        (
            "class Frame:\n    def __repr__(self):\n        return '   a  b\\n0  1  2'\nFrame()",
            Some("[result]\n   a  b\n0  1  2\n"),
        ),
        ("def f(n):\n    return 10 / n", Some("(no output)\n")),
        // Compiled once when the last statement is certainly not an expression (see
        // tests/cell_tail.py), through the AST otherwise: the same results either way.
        ("z = 1; 42", Some("[result]\n42\n")),
        ("z = 1\n42", Some("[result]\n42\n")),
        ("'a docstring'", Some("[result]\n'a docstring'\n")),
        ("z = 2\nif z:\n    z = 3", Some("(no output)\n")),
        ("from os import path as _p\nz: int = 4", Some("(no output)\n")),
        ("z  # shown\n# a trailing comment\n", Some("[result]\n4\n")),
        ("print('before')\ny = 5\nf(0)", None),
        ("y", Some("[result]\n5\n")),
        ("for i in range(3)\n    pass", None),
        ("raise ValueError('bad value')", None),
        ("import os\nprint(os.getcwd())\nOUTPUT_DIR", None),
        (
            "open('helper_mod.py', 'w').write('VALUE = 7\\n')\nimport helper_mod\nhelper_mod.VALUE",
            Some("[result]\n7\n"),
        ),
        ("script:tools/count.py a|b c", Some("[stdout]\nmain ['a', 'b c']\n")),
        ("result", Some("[result]\n2\n")),
        ("script:tools/bad.py", None),
        (
            "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nplt.figure()\nplt.bar(['a'], [1]);",
            Some("[display_data]\nimage/png .toolbox/sessions/same/output/figure-1.png (output/figure-1.png)\nimage/png .toolbox/sessions/same/output/figure-2.png (output/figure-2.png)\n"),
        ),
        ("len(plt.get_fignums())", Some("[result]\n0\n")),
        (
            "plt.plot([3, 1]);",
            Some("[display_data]\nimage/png .toolbox/sessions/same/output/figure-3.png (output/figure-3.png)\n"),
        ),
        (
            "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]}).head()",
            Some("[result]\n   a  b\n0  1  3\n1  2  4\n"),
        ),
    ];
    let mut rendered: Vec<(&str, Vec<String>)> = Vec::new();
    for backend in ALL_BACKENDS {
        let table = backend_table(backend, json!({ "venv": venv.to_string_lossy() }));
        let (_d, ctx) = setup(RUN, "same", table);
        let root = ctx.workspace.root().to_string_lossy().into_owned();
        std::fs::create_dir_all(ctx.workspace.root().join("tools")).unwrap();
        std::fs::write(
            ctx.workspace.root().join("tools/count.py"),
            "import sys\nresult = len(sys.argv) - 1\nif __name__ == '__main__':\n    print('main', sys.argv[1:])\n",
        )
        .unwrap();
        std::fs::write(ctx.workspace.root().join("tools/bad.py"), "x = 1\n1 / 0\n").unwrap();
        let mut texts = Vec::new();
        for (code, want) in cases {
            let outcome = match code.strip_prefix("script:") {
                Some(script) => {
                    let (path, args) = script.split_once(' ').unwrap_or((script, ""));
                    let args: Vec<&str> = args.split('|').filter(|a| !a.is_empty()).collect();
                    call(&ctx, RUN, json!({"script_path": path, "args": args})).await
                }
                None => run(&ctx, code).await,
            };
            let text = outcome
                .unwrap_or_else(|e| panic!("{backend}: {code:?} failed: {e}"))
                .replace(&root, "<root>");
            if let Some(want) = want {
                assert_eq!(&text, want, "{backend}: {code:?}");
            }
            texts.push(text);
        }
        for n in 1..=3 {
            let png = std::fs::read(
                ctx.workspace
                    .resolve(&format!("output/figure-{n}.png"))
                    .unwrap(),
            )
            .unwrap();
            assert!(
                png.starts_with(b"\x89PNG\r\n\x1a\n"),
                "{backend}: figure {n}"
            );
        }
        rendered.push((backend, texts));
    }
    let (reference, expected) = &rendered[0];
    for (backend, texts) in &rendered[1..] {
        for ((code, _), (want, got)) in cases.iter().zip(expected.iter().zip(texts)) {
            assert_eq!(got, want, "{backend} differs from {reference} on {code:?}");
        }
    }
    // The shared error cases, as all of them show them.
    let text = |code: &str| {
        let at = cases.iter().position(|(c, _)| *c == code).unwrap();
        expected[at].clone()
    };
    assert_eq!(
        text("print('before')\ny = 5\nf(0)"),
        "[stdout]\nbefore\n[error] ZeroDivisionError: division by zero\nTraceback (most recent call last):\n  File \"<cell>\", line 3, in <module>\n    f(0)\n  File \"<cell In[9]>\", line 2, in f\n    return 10 / n\n           ~~~^~~\nZeroDivisionError: division by zero\n"
    );
    assert_eq!(
        text("for i in range(3)\n    pass"),
        "[error] SyntaxError: expected ':' (<cell>, line 1)\n  File \"<cell>\", line 1\n    for i in range(3)\n                     ^\nSyntaxError: expected ':'\n"
    );
    assert_eq!(
        text("import os\nprint(os.getcwd())\nOUTPUT_DIR"),
        "[stdout]\n<root>/.toolbox/sessions/same/scratchpad\n[result]\n'<root>/.toolbox/sessions/same/output'\n"
    );
    assert!(
        text("script:tools/bad.py").contains("File \"tools/bad.py\", line 2, in <module>\n"),
        "{}",
        text("script:tools/bad.py")
    );
}

#[tokio::test]
async fn jupyter_timeouts_interrupt_the_kernel_and_keep_the_session() {
    let (_d, ctx) = setup(RUN, "jtimeout", backend_table("jupyter", json!({})));
    run(&ctx, "kept = 'yes'").await.unwrap();
    // A blocking system call: SIGINT to the kernel's process group wakes it.
    let e = call(
        &ctx,
        RUN,
        json!({"code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "timeout_ms": 2000}),
    )
    .await
    .unwrap_err();
    assert!(
        e.starts_with(
            "run_python_code timed out after 2000 ms: the code was interrupted (KeyboardInterrupt \
             was raised inside it). The session is intact"
        ),
        "{e}"
    );
    assert!(
        e.contains("[stdout]\nstarted\n"),
        "partial output kept: {e}"
    );
    assert!(
        e.contains("[error] KeyboardInterrupt: \nTraceback (most recent call last):\n  File \"<cell>\", line 3, in <module>\n    time.sleep(60)\n"),
        "{e}"
    );
    // A busy pure-Python loop.
    let e = call(
        &ctx,
        RUN,
        json!({"code": "n = 0\nwhile True:\n    n += 1", "timeout_ms": 1000}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("the code was interrupted"), "{e}");
    // The kernel is usable and kept everything.
    assert_eq!(
        run(&ctx, "(kept, n > 0)").await.unwrap(),
        "[result]\n('yes', True)\n"
    );
}

#[tokio::test]
async fn jupyter_cancellation_interrupts_the_kernel() {
    let (_d, ctx) = setup(RUN, "jcancel", backend_table("jupyter", json!({})));
    run(&ctx, "before = 1").await.unwrap();
    // Cancelled once the code is running (it says so by creating a file).
    let mark = ctx.workspace.root().join("running");
    let seen = mark.clone();
    let cancel = ctx.cancel.clone();
    let canceller = tokio::spawn(async move {
        for _ in 0..6000 {
            if seen.exists() {
                cancel.cancel();
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    });
    let code = format!(
        "import time\nopen({:?}, 'w').close()\ntime.sleep(60)",
        mark.to_str().unwrap()
    );
    let e = run(&ctx, &code).await.unwrap_err();
    assert!(canceller.await.unwrap(), "the code never ran");
    assert!(
        e.starts_with("run_python_code was cancelled: the code was interrupted"),
        "{e}"
    );
}

/// The kernel's pid, asked of the kernel.
async fn kernel_pid(ctx: &toolbox_host::ToolContext) -> i32 {
    let text = run(ctx, "import os\nos.getpid()").await.unwrap();
    text.trim()
        .rsplit_once("[result]\n")
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}

#[tokio::test]
async fn jupyter_kernel_killed_mid_call_is_reported_and_restarted() {
    let (_d, ctx) = setup(RUN, "jdeath", backend_table("jupyter", json!({})));
    run(&ctx, "lost = 1").await.unwrap();
    let pid = kernel_pid(&ctx).await;
    // Killed once the code is running (it says so by creating a file).
    let mark = ctx.workspace.root().join("running");
    let seen = mark.clone();
    let killer = tokio::spawn(async move {
        for _ in 0..6000 {
            if seen.exists() {
                // SAFETY: plain kill(2) of the kernel toolbox started for this test.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    });
    let code = format!(
        "import time\nprint('working', flush=True)\nopen({:?}, 'w').close()\ntime.sleep(60)",
        mark.to_str().unwrap()
    );
    let e = run(&ctx, &code).await.unwrap_err();
    assert!(killer.await.unwrap(), "the code never ran");
    assert!(
        e.starts_with(&format!(
            "run_python_code: the kernel toolbox started from kernelspec \"python3\" (pid \
             {pid}) died during the call (its process was killed by signal 9 (SIGKILL)"
        )),
        "{e}"
    );
    assert!(
        e.contains("The session's state (variables, imports) is lost. A new kernel was started for this session"),
        "{e}"
    );
    assert!(
        e.contains("Output before that:\n[stdout]\nworking\n"),
        "{e}"
    );
    // The next call runs in the new kernel, says so, and the old state is gone.
    let text = run(&ctx, "'lost' in globals()").await.unwrap();
    assert!(
        text.starts_with("note: this session's kernel was restarted after the previous call"),
        "{text}"
    );
    assert!(text.ends_with("[result]\nFalse\n"), "{text}");
    assert_ne!(kernel_pid(&ctx).await, pid);
}

#[tokio::test]
async fn jupyter_kernel_that_ignores_interrupts_is_killed_and_restarted() {
    let (_d, ctx) = setup(RUN, "jstuck", backend_table("jupyter", json!({})));
    let pid = kernel_pid(&ctx).await;
    let e = call(
        &ctx,
        RUN,
        json!({"code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(1000)", "timeout_ms": 2000}),
    )
    .await
    .unwrap_err();
    assert!(
        e.starts_with(
            "run_python_code timed out after 2000 ms and the kernel toolbox started from \
             kernelspec \"python3\""
        ) && e.contains("did not stop within 5 s of being interrupted, so it was killed"),
        "{e}"
    );
    assert!(
        e.contains("A new kernel was started for this session"),
        "{e}"
    );
    assert_ne!(kernel_pid(&ctx).await, pid);
    assert!(
        !crate::jupyter::tests_support_running(pid),
        "the old kernel still runs"
    );
}

#[tokio::test]
async fn jupyter_kernelspecs_asking_for_message_interrupts_get_interrupt_request() {
    // A kernelspec of its own (found through [python] venv's share/jupyter): the test venv's
    // ipykernel, with interrupt_mode "message".
    let prefix = tempfile::tempdir().unwrap();
    let spec = prefix.path().join("share/jupyter/kernels/by-message");
    std::fs::create_dir_all(&spec).unwrap();
    let python = test_venv().join("bin/python");
    std::fs::write(
        spec.join("kernel.json"),
        json!({"argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
               "display_name": "by message", "language": "python",
               "interrupt_mode": "message"})
        .to_string(),
    )
    .unwrap();
    let (_d, ctx) = setup(
        RUN,
        "jmessage",
        json!({"backend": "jupyter", "kernel_name": "by-message",
               "venv": prefix.path().to_string_lossy()}),
    );
    run(&ctx, "kept = 2").await.unwrap();
    let e = call(
        &ctx,
        RUN,
        json!({"code": "import time\ntime.sleep(60)", "timeout_ms": 2000}),
    )
    .await
    .unwrap_err();
    assert!(
        e.starts_with(
            "run_python_code timed out after 2000 ms: the code was interrupted (KeyboardInterrupt"
        ),
        "{e}"
    );
    assert_eq!(run(&ctx, "kept").await.unwrap(), "[result]\n2\n");
    // The venv named only a place to find kernelspecs: nothing was created there.
    assert!(!prefix.path().join("pyvenv.cfg").exists());
}

#[tokio::test]
async fn jupyter_without_a_kernelspec_says_where_it_looked() {
    let (_d, ctx) = setup(
        RUN,
        "jnospec",
        backend_table("jupyter", json!({"kernel_name": "no-such-kernel"})),
    );
    let e = run(&ctx, "1").await.unwrap_err();
    assert!(
        e.starts_with(
            "run_python_code: [python] kernel_name \"no-such-kernel\": no such kernelspec in "
        ),
        "{e}"
    );
    assert!(e.contains("installed: ") && e.contains("python3"), "{e}");
}
