//! `pdf__info`: page count, metadata and encryption of a PDF file.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object_schema;
use toolbox_core::{Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::{doc, open, path_prop, TOOLSET};

pub(crate) const NAME: &str = "pdf__info";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Describe a PDF file: page count, metadata (title, author, subject, creator, \
         producer, creation and modification dates) and whether it is encrypted. Cheap; \
         use it before reading a long document.",
        object_schema(&[("path", path_prop())], &["path"]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let given = args.str("path", &["file_path"])?;
    args.finish()?;
    let (pdf, shown) = open(NAME, given, ctx).await?;
    let mut out = format!("file: {shown}\n");
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
        }
    }
    Ok(Value::String(out.trim_end().to_string()))
}
