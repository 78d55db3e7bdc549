//! Errors as one line for people and models.

/// An error and its causes, `a: b: c`, leaving out a cause whose text its parent already
/// quoted (many errors repeat their source in their own message). For an error that is not
/// owned, where anyhow's `{:#}` cannot be used: a `reqwest::Error` still asked
/// `is_timeout()` afterwards, say.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let s = e.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn causes_are_joined_once() {
        let io = std::io::Error::other("refused");
        let outer = anyhow::Error::new(io).context("connect failed");
        let e: &(dyn std::error::Error + 'static) = outer.as_ref();
        assert_eq!(super::chain(e), "connect failed: refused");
        let quoted = anyhow::anyhow!("connect failed: refused").context("request");
        assert_eq!(
            super::chain(quoted.as_ref()),
            "request: connect failed: refused"
        );
    }
}
