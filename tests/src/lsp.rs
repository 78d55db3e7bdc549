//! What the lsp tests share (`tests/tests/lsp.rs` through the executor, `toolbox/tests/lsp_cli.rs`
//! through `toolbox mcp`): the language servers they start and the small C project clangd
//! reads.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::{test_python, write_file};

/// The first `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// clangd on `PATH` (scripts/test.sh installs it).
pub fn clangd() -> String {
    which("clangd")
        .unwrap_or_else(|| {
            panic!("clangd is not on PATH: scripts/test.sh installs it (apt clangd)")
        })
        .display()
        .to_string()
}

/// pylsp: `TOOLBOX_TEST_PYLSP`, else the one beside the test venv's python.
pub fn pylsp() -> String {
    if let Ok(p) = std::env::var("TOOLBOX_TEST_PYLSP") {
        return p;
    }
    let python = test_python();
    let p = python.parent().unwrap().join("pylsp");
    assert!(
        p.exists(),
        "{} is missing: scripts/test.sh installs python-lsp-server (tests/requirements.txt)",
        p.display()
    );
    p.display().to_string()
}

/// basedpyright's language server: `TOOLBOX_TEST_BASEDPYRIGHT`, else the one beside the test
/// venv's python (tests/requirements.txt installs basedpyright, which brings its own Node.js).
pub fn basedpyright() -> String {
    if let Ok(p) = std::env::var("TOOLBOX_TEST_BASEDPYRIGHT") {
        return p;
    }
    let p = test_python()
        .parent()
        .unwrap()
        .join("basedpyright-langserver");
    assert!(
        p.exists(),
        "{} is missing: scripts/test.sh installs basedpyright (tests/requirements.txt)",
        p.display()
    );
    p.display().to_string()
}

/// python3 on `PATH`, which runs the fake server.
pub fn python3() -> String {
    which("python3")
        .expect("python3 on PATH")
        .display()
        .to_string()
}

/// `tests/fake_lsp.py`: a server that misbehaves on purpose (never answers, crashes, is
/// killed, changes its answer…); its first argument picks how, its docstring lists them.
pub fn fake_lsp() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/fake_lsp.py").to_string()
}

/// Writes a small C project clangd can index into `dir`: `util.h` declares
/// `int add(int a, int b);` (line 2), `util.c` defines it (line 3), `main.c` calls it
/// (`return add(1, 2);`, line 4, column 12), and `compile_commands.json` compiles both
/// `.c` files in `dir`.
pub fn write_c_project(dir: &Path) {
    write_file(dir, "util.h", "#pragma once\nint add(int a, int b);\n");
    write_file(
        dir,
        "util.c",
        "#include \"util.h\"\n\nint add(int a, int b) { return a + b; }\n",
    );
    write_file(
        dir,
        "main.c",
        "#include \"util.h\"\n\nint main(void) {\n    return add(1, 2);\n}\n",
    );
    let folder = dir.display().to_string();
    let db: Vec<Value> = ["util.c", "main.c"]
        .iter()
        .map(|f| json!({"directory": folder, "file": format!("{folder}/{f}"), "arguments": ["cc", "-c", f]}))
        .collect();
    write_file(
        dir,
        "compile_commands.json",
        serde_json::to_string(&db).unwrap(),
    );
}
