//! `pdf__info`: page count, metadata and encryption of a PDF file.

use anyhow::Result;
use serde_json::{json, Map, Value};
use toolbox_core::schema::object;
use toolbox_core::{Args, ToolInfo, ToolOutput};
use toolbox_host::ToolContext;

use crate::{doc, open, path_prop, PATH, TOOLSET};

pub(crate) const NAME: &str = "pdf__info";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Describe a PDF file: page count, metadata (title, author, subject, creator, \
         producer, creation and modification dates) and whether it is encrypted. Cheap; \
         use it before reading a long document.",
        object(&[path_prop()]),
    )
    .toolsets(&[TOOLSET])
    .output_schema(output_schema())
}

/// The structured result beside the text: what a program reads instead of parsing lines.
fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "file": {"type": "string", "description": "The file, as the workspace shows it."},
            "pages": {"type": ["integer", "null"], "description": "Page count; null when the file is locked."},
            "encrypted": {"type": "boolean"},
            "locked": {"type": "boolean", "description": "Encrypted with a user password: text and metadata cannot be read."},
            "pdf_version": {"type": "string"},
            "metadata": {
                "type": "object",
                "description": "Document information by key (title, author, subject, keywords, creator, producer, creation_date, modification_date); only the keys the file has.",
                "additionalProperties": {"type": "string"}
            }
        },
        "required": ["file", "pages", "encrypted", "locked", "pdf_version", "metadata"]
    })
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
    let args = Args::new(NAME, &args)?;
    let given = PATH.str(&args)?;
    args.finish()?;
    let (pdf, shown) = open(NAME, given, ctx).await?;
    let mut out = format!("file: {shown}\n");
    let mut structured = json!({
        "file": shown,
        "pages": (!pdf.locked).then_some(pdf.page_count),
        "encrypted": pdf.encrypted || pdf.locked,
        "locked": pdf.locked,
        "pdf_version": pdf.doc.version,
    });
    let mut metadata = Map::new();
    if pdf.locked {
        out.push_str("pages: unknown (the file is encrypted)\n");
        out.push_str(
            "encrypted: yes, with a password — its text and metadata cannot be read without it\n",
        );
    } else {
        out.push_str(&format!("pages: {}\n", pdf.page_count));
        out.push_str(if pdf.encrypted {
            "encrypted: yes, but it opens without a password (owner password only), so it can be read\n"
        } else {
            "encrypted: no\n"
        });
    }
    out.push_str(&format!("PDF version: {}\n", pdf.doc.version));
    if !pdf.locked {
        let meta = toolbox_host::blocking(format!("{NAME}: the PDF task"), move || {
            doc::guarded("reading metadata", || Ok(pdf.metadata()))
        })
        .await??;
        if meta.is_empty() {
            out.push_str("metadata: none\n");
        }
        for (label, value) in meta {
            out.push_str(&format!("{label}: {value}\n"));
            metadata.insert(label.replace(' ', "_"), Value::String(value));
        }
    }
    structured["metadata"] = Value::Object(metadata);
    Ok(ToolOutput::new(out.trim_end(), structured))
}
