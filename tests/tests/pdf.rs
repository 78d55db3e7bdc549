//! The pdf provider through the executor, on PDFs generated during the test with fpdf2
//! (installed from tests/requirements.txt; `TOOLBOX_TEST_PYTHON` names the interpreter).

use std::path::Path;

use serde_json::{json, Value};
use toolbox_executor::{PermissionMode, ToolExecutor};

use toolbox as _;
use toolbox_tests::{assert_err_contains, executor, fails, ok};

/// Writes the test PDFs into `dir`:
/// - `multi.pdf`: 3 pages, metadata, non-ASCII text on every page, `needleN` on page N;
/// - `owner.pdf`: encrypted with an owner password only (opens without a password);
/// - `locked.pdf`: encrypted with a user password;
/// - `corrupt.pdf`: the first half of multi.pdf, then garbage;
/// - `no_mediabox.pdf`: well-formed, but its page lacks the MediaBox pdf-extract insists on.
const MAKE_PDFS: &str = r#"
import sys, os
from fpdf import FPDF
out = sys.argv[1]

def make(name, pages, **enc):
    pdf = FPDF()
    pdf.set_title("Test Title café")
    pdf.set_author("Ana Müller")
    pdf.set_subject("toolbox pdf tests")
    pdf.set_keywords("crab, ferris")
    pdf.set_creator("toolbox test suite")
    pdf.set_producer("fpdf2 for toolbox")
    pdf.set_font("Helvetica", size=12)
    for i in range(1, pages + 1):
        pdf.add_page()
        pdf.multi_cell(0, 8, f"Page {i} says hello. café naïve Zürich. needle{i} is here.\nSecond line of page {i}.")
    if enc:
        pdf.set_encryption(**enc)
    pdf.output(os.path.join(out, name))

make("multi.pdf", 3)
make("owner.pdf", 2, owner_password="owner-secret")
make("locked.pdf", 2, owner_password="owner-secret", user_password="user-secret")
data = open(os.path.join(out, "multi.pdf"), "rb").read()
open(os.path.join(out, "corrupt.pdf"), "wb").write(data[: len(data) // 2] + b"\x00garbage\xff" * 20)

# A well-formed file whose one page has no MediaBox: it loads, but pdf-extract panics
# (`expect("MediaBox")`) when it lays the page out.
objs = [
    b"<< /Type /Catalog /Pages 2 0 R >>",
    b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
    b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
    b"<< /Length 36 >>\nstream\nBT /F1 12 Tf 72 712 Td (Hello) Tj ET\nendstream",
    b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
]
pdf = bytearray(b"%PDF-1.4\n")
offsets = []
for i, body in enumerate(objs, 1):
    offsets.append(len(pdf))
    pdf += b"%d 0 obj\n" % i + body + b"\nendobj\n"
xref = len(pdf)
pdf += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
for off in offsets:
    pdf += b"%010d 00000 n \n" % off
pdf += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
open(os.path.join(out, "no_mediabox.pdf"), "wb").write(pdf)
"#;

fn python() -> String {
    std::env::var("TOOLBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Generates the PDFs, failing loudly when fpdf2 is missing: these tests must not pass by
/// skipping.
pub fn make_pdfs(dir: &Path) {
    let out = std::process::Command::new(python())
        .arg("-c")
        .arg(MAKE_PDFS)
        .arg(dir)
        .output()
        .expect("cannot run python (set TOOLBOX_TEST_PYTHON)");
    assert!(
        out.status.success(),
        "generating test PDFs failed (is fpdf2 installed? pip install -r tests/requirements.txt): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn setup() -> (tempfile::TempDir, ToolExecutor) {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    make_pdfs(dir.path());
    (dir, exec)
}

#[tokio::test]
async fn info_reports_pages_metadata_and_encryption() {
    let (_dir, exec) = setup();
    let r = ok(&exec, "pdf__info", json!({"path": "multi.pdf"})).await;
    assert!(r.contains("file: multi.pdf"), "{r}");
    assert!(r.contains("pages: 3"), "{r}");
    assert!(r.contains("encrypted: no"), "{r}");
    assert!(r.contains("title: Test Title café"), "{r}");
    assert!(r.contains("author: Ana Müller"), "{r}");
    assert!(r.contains("subject: toolbox pdf tests"), "{r}");
    assert!(r.contains("keywords: crab, ferris"), "{r}");
    assert!(r.contains("creator: toolbox test suite"), "{r}");
    assert!(r.contains("producer: fpdf2 for toolbox"), "{r}");
    // Dates are shown readably, not as D:YYYYMMDD...
    let date = r
        .lines()
        .find(|l| l.starts_with("creation date: "))
        .unwrap_or_else(|| panic!("no creation date in {r}"));
    assert!(
        date.len() >= "creation date: 2024-01-01 00:00:00".len()
            && date.contains(':')
            && !date.contains("D:"),
        "{date}"
    );

    let r = ok(&exec, "pdf__info", json!({"path": "owner.pdf"})).await;
    assert!(
        r.contains("encrypted: yes, but it opens without a password"),
        "{r}"
    );
    assert!(r.contains("pages: 2"), "{r}");

    let r = ok(&exec, "pdf__info", json!({"path": "locked.pdf"})).await;
    assert!(r.contains("encrypted: yes, with a password"), "{r}");
}

#[tokio::test]
async fn read_gives_page_markers_and_non_ascii_text() {
    let (_dir, exec) = setup();
    let r = ok(&exec, "pdf__read", json!({"path": "multi.pdf"})).await;
    assert!(r.starts_with("multi.pdf: pages 1-3 of 3"), "{r}");
    let p1 = r.find("--- page 1 ---").expect("page 1 marker");
    let p2 = r.find("--- page 2 ---").expect("page 2 marker");
    let p3 = r.find("--- page 3 ---").expect("page 3 marker");
    assert!(p1 < p2 && p2 < p3, "{r}");
    assert!(r[p1..p2].contains("needle1"), "{r}");
    assert!(r[p2..p3].contains("needle2"), "{r}");
    assert_eq!(r.matches("café naïve Zürich").count(), 3, "{r}");

    // A page selection reads only those pages; a bare number works too.
    let r = ok(
        &exec,
        "pdf__read",
        json!({"path": "multi.pdf", "pages": "3,1"}),
    )
    .await;
    assert!(r.starts_with("multi.pdf: pages 1, 3 of 3"), "{r}");
    assert!(
        r.contains("needle1") && r.contains("needle3") && !r.contains("needle2"),
        "{r}"
    );
    let r = ok(&exec, "pdf__read", json!({"path": "multi.pdf", "pages": 2})).await;
    assert!(
        r.contains("--- page 2 ---") && !r.contains("--- page 1 ---"),
        "{r}"
    );
    let r = ok(
        &exec,
        "pdf__read",
        json!({"path": "multi.pdf", "pages": "2-"}),
    )
    .await;
    assert!(
        r.contains("needle2") && r.contains("needle3") && !r.contains("needle1"),
        "{r}"
    );

    // The owner-password-only file reads like any other.
    let r = ok(&exec, "pdf__read", json!({"path": "owner.pdf"})).await;
    assert!(
        r.contains("café naïve Zürich") && r.contains("needle2"),
        "{r}"
    );
}

#[tokio::test]
async fn read_is_capped_with_a_note_on_how_to_continue() {
    let (_dir, exec) = setup();
    let r = ok(
        &exec,
        "pdf__read",
        json!({"path": "multi.pdf", "max_chars": 120}),
    )
    .await;
    let (body, note) = r
        .split_once("\n\n[truncated at 120 characters")
        .unwrap_or_else(|| panic!("{r}"));
    let body = body.split_once('\n').map(|(_, b)| b).unwrap_or("");
    assert!(body.chars().count() <= 120, "{body}");
    assert!(note.contains("pdf__read with pages=\""), "{note}");
    assert!(!r.contains("needle3"), "{r}");
}

#[tokio::test]
async fn bad_page_specs_are_explained() {
    let (_dir, exec) = setup();
    for (pages, want) in [
        ("0", "numbered from 1"),
        ("3-2", "runs backwards"),
        ("x", "is not a page number"),
        ("4", "past the last page"),
        ("1-9", "past the last page"),
    ] {
        let r = fails(
            &exec,
            "pdf__read",
            json!({"path": "multi.pdf", "pages": pages}),
            want,
        )
        .await;
        assert!(
            r.contains("argument `pages`") && r.contains("the PDF has 3 pages"),
            "{r}"
        );
    }
    fails(
        &exec,
        "pdf__read",
        json!({"path": "multi.pdf", "pages": ["1"]}),
        "argument `pages` must be a string",
    )
    .await;
    fails(
        &exec,
        "pdf__read",
        json!({"path": "multi.pdf", "page_range": "1"}),
        "unknown argument `page_range`",
    )
    .await;
    fails(&exec, "pdf__read", json!({}), "pdf__read requires path").await;
}

#[tokio::test]
async fn search_finds_matches_with_pages_and_context() {
    let (_dir, exec) = setup();
    let r = ok(
        &exec,
        "pdf__search",
        json!({"path": "multi.pdf", "query": "ZÜRICH"}),
    )
    .await;
    assert!(
        r.starts_with("3 matches for \"ZÜRICH\" in multi.pdf (3 pages searched)"),
        "{r}"
    );
    for page in 1..=3 {
        assert!(r.contains(&format!("\npage {page}: ")), "{r}");
    }
    assert!(r.contains("café naïve **Zürich**"), "{r}");

    let r = ok(
        &exec,
        "pdf__search",
        json!({"path": "multi.pdf", "query": "Needle2"}),
    )
    .await;
    assert!(r.starts_with("1 match for"), "{r}");
    assert!(r.contains("page 2: ") && r.contains("**needle2**"), "{r}");

    // A phrase broken across lines in the PDF is found; max_results limits what is shown.
    let r = ok(
        &exec,
        "pdf__search",
        json!({"path": "multi.pdf", "query": "is here. second line", "max_results": 1}),
    )
    .await;
    assert!(
        r.starts_with("3 matches") && r.contains("showing the first 1"),
        "{r}"
    );
    assert_eq!(r.matches("\npage ").count(), 1, "{r}");

    let r = ok(
        &exec,
        "pdf__search",
        json!({"path": "multi.pdf", "query": "needle1", "pages": "2-3"}),
    )
    .await;
    assert!(
        r.starts_with("No matches for \"needle1\" in multi.pdf (2 pages searched)"),
        "{r}"
    );
    fails(
        &exec,
        "pdf__search",
        json!({"path": "multi.pdf"}),
        "pdf__search requires query",
    )
    .await;
    fails(
        &exec,
        "pdf__search",
        json!({"path": "multi.pdf", "query": "  "}),
        "argument `query` is empty",
    )
    .await;
}

#[tokio::test]
async fn encrypted_corrupt_and_non_pdf_files_get_clear_errors() {
    let (dir, exec) = setup();
    std::fs::write(dir.path().join("notes.txt"), "just text").unwrap();
    // Each tool with the arguments it needs besides `path`.
    let with = |tool: &str, path: &str| -> Value {
        if tool == "pdf__search" {
            json!({"path": path, "query": "x"})
        } else {
            json!({"path": path})
        }
    };
    for tool in ["pdf__read", "pdf__search"] {
        fails(
            &exec,
            tool,
            with(tool, "locked.pdf"),
            "locked.pdf is encrypted and needs a password",
        )
        .await;
    }
    for tool in ["pdf__info", "pdf__read", "pdf__search"] {
        fails(&exec, tool, with(tool, "corrupt.pdf"), "corrupt.pdf").await;
        fails(
            &exec,
            tool,
            with(tool, "notes.txt"),
            "notes.txt is not a PDF file",
        )
        .await;
        fails(&exec, tool, with(tool, "missing.pdf"), "missing.pdf").await;
        fails(
            &exec,
            tool,
            with(tool, "../escape.pdf"),
            "outside the workspace",
        )
        .await;
    }
    // A page without a MediaBox makes pdf-extract panic inside; that page gets a note that
    // names it, the call still answers, and nothing crashes.
    let r = ok(&exec, "pdf__read", json!({"path": "no_mediabox.pdf"})).await;
    assert!(r.contains("--- page 1 ---\n(the text of this page could not be extracted: extracting page 1 failed: the PDF library gave up on this file (MediaBox)"), "{r}");
    let r = ok(
        &exec,
        "pdf__search",
        json!({"path": "no_mediabox.pdf", "query": "hello"}),
    )
    .await;
    assert!(
        r.contains("No matches") && r.contains("the text of page 1 could not be extracted"),
        "{r}"
    );
    let r = ok(&exec, "pdf__info", json!({"path": "no_mediabox.pdf"})).await;
    assert!(r.contains("pages: 1"), "{r}");
}

#[tokio::test]
async fn tools_are_read_only_in_the_documents_toolset_and_the_extractor_is_linked() {
    let (dir, exec) = setup();
    let schemas = exec
        .resolve_agent_tool_schemas(
            Some(&["documents"]),
            PermissionMode::ReadOnly,
            toolbox_executor::SchemaFormat::Anthropic,
        )
        .unwrap();
    let mut names: Vec<&str> = schemas.iter().filter_map(|s| s["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, vec!["pdf__info", "pdf__read", "pdf__search"]);

    let extractor = toolbox_host::find_extractor("application/pdf; charset=binary")
        .expect("the pdf extractor is registered");
    assert_eq!(extractor.provider, "pdf");
    let bytes = std::fs::read(dir.path().join("multi.pdf")).unwrap();
    let text = (extractor.extract)(&bytes).unwrap();
    assert!(
        text.contains("--- page 3 ---") && text.contains("café naïve Zürich"),
        "{text}"
    );
    assert_err_contains((extractor.extract)(b"%PDF-1.4 nonsense"), &["PDF"]);
}
