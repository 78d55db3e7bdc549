use crate::inventory;

/// Turns a document's bytes into text, registered by one provider and usable by others.
///
/// **Architecture Invariant:** providers never depend on each other (nor on the executor);
/// a provider crate depends on `toolbox-core` and `toolbox-host` only. One provider uses another's ability
/// through a link-time hook like this one, and degrades to a clear error when the other is
/// not built in. This is how `web_fetch` reads a PDF response with the pdf provider's
/// extractor when (and only when) that provider is built in.
pub struct ContentExtractor {
    /// Who registered it, e.g. `pdf`.
    pub provider: &'static str,
    /// MIME types it reads, e.g. `["application/pdf"]`.
    pub mime_types: &'static [&'static str],
    /// Reads a document's bytes and returns its text.
    pub extract: fn(&[u8]) -> anyhow::Result<String>,
}

inventory::collect!(ContentExtractor);

/// The extractor for a MIME type (parameters such as `; charset=` are ignored), if one is linked.
pub fn find_extractor(mime: &str) -> Option<&'static ContentExtractor> {
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    inventory::iter::<ContentExtractor>
        .into_iter()
        .find(|e| e.mime_types.iter().any(|m| *m == essence))
}

/// Registers a [`ContentExtractor`] at link time.
///
/// ```ignore
/// toolbox_host::register_extractor!("pdf", &["application/pdf"], extract_pdf_text);
/// ```
#[macro_export]
macro_rules! register_extractor {
    ($provider:expr, $mimes:expr, $extract:expr) => {
        $crate::inventory::submit! {
            $crate::ContentExtractor { provider: $provider, mime_types: $mimes, extract: $extract }
        }
    };
}
