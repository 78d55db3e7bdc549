//! `toolbox skills [--check]` through the real binary: the listing, every problem named as
//! `FILE: RULE` with exit code 1, the operator's `[skill] dirs`, and a workspace that may
//! not add any.

use std::path::Path;
use std::process::Command;

mod common;
use common::toolbox;

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("toolbox runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn skill(root: &Path, folder: &str, name: &str, description: &str) {
    write(
        &root.join(folder).join("SKILL.md"),
        &format!("---\nname: {name}\ndescription: {description}\n---\nInstructions.\n"),
    );
}

#[test]
fn skills_lists_and_check_passes_on_valid_folders() {
    let ws = tempfile::tempdir().unwrap();
    skill(
        ws.path(),
        "skills/pdf-report",
        "pdf-report",
        "Build PDF reports.",
    );
    skill(ws.path(), "skills/cn-charts", "cn-charts", "生成中文图表");
    let (code, out, err) = run(toolbox(ws.path()).arg("skills"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "cn-charts   生成中文图表  [skills/cn-charts]\n\
         pdf-report  Build PDF reports.  [skills/pdf-report]\n"
    );
    let (code, out, err) = run(toolbox(ws.path()).args(["skills", "--check"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "ok: 2 skills valid (looked in skills, .toolbox/skills)\n"
    );
    // No skills at all is not a problem.
    let empty = tempfile::tempdir().unwrap();
    let (code, out, _) = run(toolbox(empty.path()).args(["skills", "--check"]));
    assert_eq!(code, 0);
    assert!(out.starts_with("ok: 0 skills valid"), "{out}");
}

#[test]
fn check_names_the_file_and_the_rule_and_exits_1() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    skill(root, "skills/good", "good", "Fine.");
    skill(
        root,
        "skills/other",
        "not-other",
        "A name unlike its folder.",
    );
    skill(root, "skills/Upper", "Upper", "Upper-case.");
    write(
        &root.join("skills/broken/SKILL.md"),
        "---\nname: broken\ndescription: \"open\n---\n",
    );
    write(&root.join("skills/no-front/SKILL.md"), "# Just markdown\n");
    std::fs::create_dir_all(root.join("skills/empty")).unwrap();
    write(
        &root.join("skills/long/SKILL.md"),
        &format!("---\nname: long\ndescription: {}\n---\n", "x".repeat(1025)),
    );

    let (code, out, err) = run(toolbox(root).args(["skills", "--check"]));
    assert_eq!(code, 1, "{out}{err}");
    for line in [
        "skills/other/SKILL.md: `name` is \"not-other\" but the folder is \"other\": they must be the same\n",
        "skills/Upper/SKILL.md: `name`: invalid skill name \"Upper\": it has upper-case letters;",
        "skills/broken/SKILL.md: the frontmatter is not valid: ",
        "skills/no-front/SKILL.md: SKILL.md must begin with YAML frontmatter",
        "skills/empty: there is no SKILL.md in this folder\n",
        "skills/long/SKILL.md: `description` is 1025 characters, more than 1024\n",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    assert!(!out.contains("skills/good"), "{out}");
    assert!(
        out.ends_with("6 problems in 6 skill folders; 1 skill is valid\n"),
        "{out}"
    );

    // Without --check the valid skill is listed and the others are skipped, exit 0.
    let (code, out, _) = run(toolbox(root).arg("skills"));
    assert_eq!(code, 0);
    assert!(out.starts_with("good  Fine.  [skills/good]\n"), "{out}");
    assert!(
        out.contains("skipped skills/empty: there is no SKILL.md"),
        "{out}"
    );
}

#[test]
fn dirs_come_from_the_operator_never_from_the_workspace() {
    let ws = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    skill(user.path(), "user-wide", "user-wide", "Everywhere.");
    let user_root = std::fs::canonicalize(user.path()).unwrap();
    let operator = ws.path().join(".operator.toml");
    write(
        &operator,
        &format!("[skill]\ndirs = [{:?}]\n", user_root.to_str().unwrap()),
    );
    let (code, out, err) = run(toolbox(ws.path())
        .arg("skills")
        .env("TOOLBOX_CONFIG", &operator));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "user-wide  Everywhere.  [{}/user-wide]\n",
            user_root.display()
        )
    );

    // The same table in the workspace's own toolbox.toml is refused (exit 2), unless the
    // operator trusts the workspace.
    write(
        &ws.path().join("toolbox.toml"),
        &format!("[skill]\ndirs = [{:?}]\n", user_root.to_str().unwrap()),
    );
    let (code, _, err) = run(toolbox(ws.path()).args(["skills", "--check"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("[skill] dirs = ["), "{err}");
    assert!(err.contains("a workspace may not set this key"), "{err}");
    let (code, out, err) = run(toolbox(ws.path()).args(["skills", "--trust-workspace-config"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("user-wide"), "{out}");
}
