//! The skill provider through the executor, on real skill folders: lookup, loading, reading
//! a skill's files jailed to its folder, running its scripts with the real python provider,
//! and the operator's `[skill] dirs` (which a workspace cannot add to).

use std::path::Path;

use serde_json::json;
use toolbox_executor::{ExecutorConfig, PermissionMode};
use toolbox_tests::{
    assert_err_contains, call, executor, executor_with, fails, ok, write_file, write_skill, SESSION,
};

// Links every provider of the full bundle (skill and python among them).
use toolbox as _;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

const REPORT_PY: &str = r#"import os
import sys
from pathlib import Path

here = Path(__file__).resolve().parent.parent
title = (here / "references" / "guide.md").read_text().splitlines()[0]
out = Path(OUTPUT_DIR) / "report.txt"
out.write_text("report for " + " ".join(sys.argv[1:]) + " / " + title + "\n")
print("cwd", os.getcwd())
print("wrote", out.name)
"#;

/// The skills every test here starts from, in the workspace's `skills/`:
/// - `pdf-report`: instructions, a script, a reference, a PNG asset;
/// - `cn-charts`: a Chinese description and body;
/// - `broken`: frontmatter that is not YAML;
/// - `wrong-name`: a SKILL.md naming another skill.
fn skills(root: &Path) {
    let pdf = write_skill(
        root,
        "skills/pdf-report",
        "pdf-report",
        "Build PDF reports from CSV data. Use when the user asks for a report.",
        "# PDF reports\n\n1. Read references/guide.md.\n2. Run scripts/report.py with the quarter.",
    );
    write_file(&pdf, "scripts/report.py", REPORT_PY);
    write_file(
        &pdf,
        "references/guide.md",
        "Guide title\nsecond line\nthird line\n",
    );
    write_file(&pdf, "assets/logo.png", PNG);
    write_skill(
        root,
        "skills/cn-charts",
        "cn-charts",
        "用中文生成销售图表和月度报告。当用户需要中文图表时使用。",
        "# 中文图表\n\n先读取数据，再画图。",
    );
    write_file(
        root,
        "skills/broken/SKILL.md",
        "---\nname: broken\ndescription: [unclosed\n---\nbody\n",
    );
    write_skill(
        root,
        "skills/wrong-name",
        "right-name",
        "Named wrongly.",
        "x",
    );
}

#[tokio::test]
async fn skills_are_looked_up_ranked_and_loaded() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    skills(dir.path());

    // Everything, and what was skipped with the reason.
    let all = ok(&exec, "skill_lookup", json!({})).await;
    assert!(
        all.starts_with("2 skills:\n- cn-charts: 用中文生成销售图表"),
        "{all}"
    );
    assert!(
        all.contains("- pdf-report: Build PDF reports from CSV data."),
        "{all}"
    );
    assert!(all.contains("skipped (2; fix them to use them):"), "{all}");
    assert!(
        all.contains("- skills/broken/SKILL.md: the frontmatter is not valid"),
        "{all}"
    );
    assert!(
        all.contains(
            "- skills/wrong-name/SKILL.md: `name` is \"right-name\" but the folder is \"wrong-name\""
        ),
        "{all}"
    );

    // Ranked by words, Chinese ones too (no spaces to split on).
    let cn = ok(&exec, "skill_lookup", json!({"query": "销售图表"})).await;
    assert!(cn.starts_with("1 of 2 skills match \"销售图表\""), "{cn}");
    assert!(cn.contains("- cn-charts:"), "{cn}");
    let cn = ok(&exec, "skill_lookup", json!({"query": "月度销售报告"})).await;
    assert!(cn.contains("- cn-charts:"), "{cn}");
    let pdf = ok(&exec, "skill_lookup", json!({"query": "PDF report"})).await;
    assert!(pdf.contains("- pdf-report:"), "{pdf}");
    assert!(!pdf.contains("- cn-charts:"), "{pdf}");
    let none = ok(&exec, "skill_lookup", json!({"query": "kubernetes"})).await;
    assert!(
        none.starts_with("no skill matches \"kubernetes\""),
        "{none}"
    );
    let one = ok(&exec, "skill_lookup", json!({"limit": 1})).await;
    assert!(one.contains("… 1 more (raise limit"), "{one}");

    // Loading: the instructions, the files, how to use them. `Skill` is an alias.
    let loaded = ok(&exec, "skill", json!({"name": "pdf-report"})).await;
    assert!(
        loaded.starts_with("skill pdf-report (skills/pdf-report)\n"),
        "{loaded}"
    );
    assert!(
        loaded.contains("--- instructions (SKILL.md) ---\n# PDF reports"),
        "{loaded}"
    );
    for file in [
        "assets/logo.png (",
        "references/guide.md (",
        "scripts/report.py (",
    ] {
        assert!(loaded.contains(file), "{file}: {loaded}");
    }
    assert!(
        loaded.contains(r#"run_python_code {"script_path": "skill:pdf-report/scripts/report.py""#),
        "{loaded}"
    );
    let cn = ok(&exec, "Skill", json!({"name": "cn-charts"})).await;
    assert!(cn.contains("先读取数据，再画图。"), "{cn}");

    // A skipped skill says why; an unknown one lists the names; a hostile one is refused
    // before any path is built.
    fails(
        &exec,
        "skill",
        json!({"name": "wrong-name"}),
        "skill: skill wrong-name cannot be used: skills/wrong-name/SKILL.md: `name` is \"right-name\"",
    )
    .await;
    fails(
        &exec,
        "skill",
        json!({"name": "broken"}),
        "skill broken cannot be used: skills/broken/SKILL.md: the frontmatter is not valid",
    )
    .await;
    fails(
        &exec,
        "skill",
        json!({"name": "nope"}),
        "there is no skill named nope (skills: cn-charts, pdf-report;",
    )
    .await;
    for hostile in [
        "../skills/pdf-report",
        "/etc",
        "pdf-report/../cn-charts",
        "PDF-Report",
    ] {
        fails(
            &exec,
            "skill",
            json!({"name": hostile}),
            "invalid skill name",
        )
        .await;
    }
    fails(&exec, "skill", json!({}), "skill requires name").await;
}

#[tokio::test]
async fn skill_resource_reads_text_inside_the_skill_folder_only() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    let root = dir.path();
    skills(root);
    let pdf = root.join("skills/pdf-report");
    let outside = tempfile::tempdir().unwrap();
    write_file(outside.path(), "secret.md", "TOP SECRET\n");
    std::os::unix::fs::symlink(
        outside.path().join("secret.md"),
        pdf.join("references/abs.md"),
    )
    .unwrap();
    std::os::unix::fs::symlink("../../cn-charts/SKILL.md", pdf.join("references/up.md")).unwrap();
    std::os::unix::fs::symlink("guide.md", pdf.join("references/same.md")).unwrap();
    std::os::unix::fs::symlink(outside.path(), pdf.join("outdir")).unwrap();

    let read = |path: &str| json!({"name": "pdf-report", "path": path});
    assert_eq!(
        ok(&exec, "skill_resource", read("references/guide.md")).await,
        "     1\tGuide title\n     2\tsecond line\n     3\tthird line"
    );
    assert_eq!(
        ok(
            &exec,
            "skill_resource",
            json!({"name": "pdf-report", "path": "./references//guide.md", "offset": 2, "limit": 1})
        )
        .await,
        "     2\tsecond line\n[lines 2-2 of 3; use offset=3 to read more]"
    );
    // A link that stays inside the skill is followed.
    assert!(ok(&exec, "skill_resource", read("references/same.md"))
        .await
        .contains("Guide title"));

    // Out of the folder: by `..`, by an absolute path, by a link (absolute or relative, to
    // a file or a folder). Nothing outside comes back.
    for (path, want) in [
        ("../cn-charts/SKILL.md", "has `..`"),
        ("references/../../cn-charts/SKILL.md", "has `..`"),
        ("/etc/passwd", "is not a path inside the skill"),
        ("references/abs.md", "leads outside the skill's folder"),
        ("references/up.md", "leads outside the skill's folder"),
        ("outdir/secret.md", "leads outside the skill's folder"),
    ] {
        let e = fails(&exec, "skill_resource", read(path), want).await;
        assert!(!e.contains("TOP SECRET") && !e.contains("中文"), "{e}");
    }
    fails(
        &exec,
        "skill_resource",
        read("assets/logo.png"),
        "pdf-report/assets/logo.png is a PNG image (",
    )
    .await;
    fails(
        &exec,
        "skill_resource",
        read("SKILL.md"),
        "SKILL.md is the skill's instructions: load them with skill {\"name\": \"pdf-report\"}",
    )
    .await;
    fails(
        &exec,
        "skill_resource",
        read("references"),
        "references is a folder of skill pdf-report",
    )
    .await;
    fails(
        &exec,
        "skill_resource",
        read("nothing.md"),
        "skill pdf-report has no file nothing.md",
    )
    .await;
    fails(
        &exec,
        "skill_resource",
        json!({"name": "wrong-name", "path": "x.md"}),
        "skill wrong-name cannot be used",
    )
    .await;
}

#[tokio::test]
async fn a_skill_script_runs_through_run_python_code_and_writes_under_output() {
    let (dir, exec) = executor(PermissionMode::Full);
    let root = dir.path();
    skills(root);
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran.txt");
    write_file(
        outside.path(),
        "evil.py",
        format!("open({:?}, 'w').write('ran')\n", marker.to_str().unwrap()),
    );
    std::os::unix::fs::symlink(
        outside.path().join("evil.py"),
        root.join("skills/pdf-report/scripts/evil.py"),
    )
    .unwrap();

    let out = ok(
        &exec,
        "run_python_code",
        json!({"script_path": "skill:pdf-report/scripts/report.py", "args": ["Q3"]}),
    )
    .await;
    assert!(out.contains("wrote report.txt"), "{out}");
    let scratchpad = root.join(format!(".toolbox/sessions/{SESSION}/scratchpad"));
    let cwd = std::fs::canonicalize(scratchpad).unwrap();
    assert!(out.contains(&format!("cwd {}", cwd.display())), "{out}");
    let written = std::fs::read_to_string(
        root.join(format!(".toolbox/sessions/{SESSION}/output/report.txt")),
    )
    .unwrap();
    assert_eq!(written, "report for Q3 / Guide title\n");
    let shown = ok(
        &exec,
        "file_manager__read",
        json!({"path": "output/report.txt"}),
    )
    .await;
    assert!(shown.contains("report for Q3"), "{shown}");

    for (path, want) in [
        (
            "skill:pdf-report/scripts/evil.py",
            "scripts/evil.py of skill pdf-report leads outside the skill's folder",
        ),
        ("skill:pdf-report/../cn-charts/x.py", "has `..`"),
        (
            "skill:../pdf-report/scripts/report.py",
            "invalid skill name",
        ),
        ("skill:pdf-report", "names no file"),
        ("skill:nope/scripts/x.py", "there is no skill named nope"),
        (
            "skill:wrong-name/scripts/x.py",
            "skill wrong-name cannot be used",
        ),
        (
            "skill:pdf-report/scripts/missing.py",
            "skill pdf-report has no file scripts/missing.py",
        ),
        ("skill:pdf-report/references/guide.md", "is not a .py file"),
    ] {
        let e = fails(&exec, "run_python_code", json!({"script_path": path}), want).await;
        assert!(e.starts_with("run_python_code: "), "{e}");
    }
    assert!(!marker.exists(), "the script behind the link ran");
}

#[tokio::test]
async fn configured_dirs_are_the_operators_and_a_workspace_cannot_add_one() {
    let user = tempfile::tempdir().unwrap();
    write_skill(
        user.path(),
        "user-wide",
        "user-wide",
        "A skill for every workspace.",
        "Hi.",
    );
    let user_root = std::fs::canonicalize(user.path()).unwrap();
    let (dir, exec) = executor_with(
        PermissionMode::ReadOnly,
        &[("skill", json!({"dirs": [user_root.to_str().unwrap()]}))],
    );
    write_skill(
        dir.path(),
        "skills/local",
        "local",
        "A workspace skill.",
        "Local.",
    );
    // The workspace's own `.toolbox/skills` is a root too.
    write_skill(
        dir.path(),
        ".toolbox/skills/tb",
        "tb",
        "In toolbox's folder.",
        "TB.",
    );
    let all = ok(&exec, "skill_lookup", json!({})).await;
    assert!(all.starts_with("3 skills:"), "{all}");
    assert!(
        all.contains(&format!(
            "- user-wide: A skill for every workspace. [{}/user-wide]",
            user_root.display()
        )),
        "{all}"
    );
    assert!(
        all.contains("- tb: In toolbox's folder. [.toolbox/skills/tb]"),
        "{all}"
    );
    assert!(ok(&exec, "skill", json!({"name": "user-wide"}))
        .await
        .contains("Hi."));

    // A bad table is an error naming it.
    let (_d, bad) = executor_with(PermissionMode::ReadOnly, &[("skill", json!({"dirs": "x"}))]);
    let info = call(&bad, "skill_lookup", json!({})).await;
    assert!(
        info.result
            .contains("[skill] dirs must be a list of strings"),
        "{}",
        info.result
    );

    // An untrusted workspace's toolbox.toml may not point toolbox at other folders.
    let ws = tempfile::tempdir().unwrap();
    write_file(
        ws.path(),
        "toolbox.toml",
        format!("[skill]\ndirs = [{:?}]\n", user_root.to_str().unwrap()),
    );
    let mut config = ExecutorConfig::new(ws.path());
    assert_err_contains(
        config.apply_workspace_restrictions(),
        &["[skill] dirs = [", "a workspace may not set this key"],
    );
}

#[test]
fn the_system_prompt_index_names_every_valid_skill() {
    let dir = tempfile::tempdir().unwrap();
    skills(dir.path());
    let ws = toolbox_host::Workspace::new(dir.path()).unwrap();
    let index = toolbox::skill::system_prompt_index(&ws, &serde_json::Value::Null).unwrap();
    assert!(index.starts_with("## Skills\n\n"), "{index}");
    assert!(
        index.contains("load the skill with the `skill` tool"),
        "{index}"
    );
    assert!(
        index.ends_with(
            "- cn-charts: 用中文生成销售图表和月度报告。当用户需要中文图表时使用。\n\
         - pdf-report: Build PDF reports from CSV data. Use when the user asks for a report.\n"
        ),
        "{index}"
    );
    assert!(
        !index.contains("broken") && !index.contains("right-name"),
        "{index}"
    );
    let empty = tempfile::tempdir().unwrap();
    let ws = toolbox_host::Workspace::new(empty.path()).unwrap();
    assert_eq!(
        toolbox::skill::system_prompt_index(&ws, &serde_json::Value::Null).unwrap(),
        ""
    );
}
