//! Blocking work (file walks, SQLite, PDF parsing) off the async threads.

/// Runs `work` on tokio's blocking pool and waits for it. `what` names the work for the
/// error a panic inside it becomes, e.g. `pdf_read: the PDF task` gives `pdf_read: the PDF
/// task stopped unexpectedly: …`.
pub async fn blocking<T: Send + 'static>(
    what: String,
    work: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| anyhow::anyhow!("{what} stopped unexpectedly: {e}"))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_panic_is_an_error_naming_the_work() {
        assert_eq!(super::blocking("t".into(), || 7).await.unwrap(), 7);
        let e = super::blocking("pdf_read: the PDF task".into(), || -> u8 { panic!("bad") })
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("pdf_read: the PDF task stopped unexpectedly: "),
            "{e}"
        );
    }
}
