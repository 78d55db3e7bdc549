//! The driver compiles a cell once, without an AST, when the compiled module shows that its
//! last statement is not an expression (`_may_end_in_expression` in driver.py). That reading
//! of bytecode is checked against the AST by `cell_tail.py`, on thousands of cells cut from
//! each interpreter's own standard library: the test interpreter, and every CPython 3.x that
//! pyenv holds on this machine (the isolated backend may run any of them).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn interpreters() -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from(
        std::env::var_os("TOOLBOX_TEST_PYTHON").unwrap_or_else(|| "python3".into()),
    )];
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pyenv")));
    if let Some(Ok(versions)) = pyenv.map(|root| std::fs::read_dir(root.join("versions"))) {
        let mut more: Vec<PathBuf> = versions
            .flatten()
            .filter(|v| supported(&v.file_name().to_string_lossy()))
            .map(|v| v.path().join("bin/python3"))
            .filter(|python| python.is_file())
            .collect();
        more.sort();
        found.extend(more);
    }
    found
}

/// CPython 3.8 or later: what the driver runs on.
fn supported(version: &str) -> bool {
    let mut parts = version.split('.');
    parts.next() == Some("3")
        && parts
            .next()
            .and_then(|minor| minor.parse::<u32>().ok())
            .is_some_and(|minor| minor >= 8)
}

#[test]
fn one_compile_cells_agree_with_the_ast_on_every_interpreter_here() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = manifest.join("tests/cell_tail.py");
    let driver = manifest.join("src/driver.py");
    // All at once: each takes a few seconds.
    let runs: Vec<_> = interpreters()
        .into_iter()
        .map(|python| {
            let child = Command::new(&python)
                .arg(&script)
                .arg(&driver)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            (python, child)
        })
        .collect();
    let mut checked = 0;
    for (python, output) in runs {
        let output = output
            .and_then(|child| child.wait_with_output())
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{}:\n{stdout}\n{stderr}",
            python.display()
        );
        eprintln!("{}: {}", python.display(), stdout.trim());
        checked += 1;
    }
    assert!(checked >= 1);
}
