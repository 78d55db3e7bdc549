//! Page specifications such as `1-3,7` or `10-`.

use anyhow::{bail, Result};

/// The pages `spec` names, sorted and without repeats. `None` or `all` means every page.
/// Errors name the part of the spec that is wrong and, for a page past the end, how many
/// pages there are.
pub fn parse(tool: &str, spec: Option<&str>, page_count: u32) -> Result<Vec<u32>> {
    let spec = spec.map(str::trim).unwrap_or("");
    if spec.is_empty() || spec.eq_ignore_ascii_case("all") {
        return Ok((1..=page_count).collect());
    }
    let bad = |part: &str, why: &str| -> anyhow::Error {
        anyhow::anyhow!(
            "{tool}: argument `pages` is {spec:?}: {part:?} {why} (use page numbers and ranges like \"1-3,7\" or \"10-\"; the PDF has {page_count} page{})",
            if page_count == 1 { "" } else { "s" }
        )
    };
    let number = |part: &str, text: &str| -> Result<u32> {
        let n: u32 = text
            .trim()
            .parse()
            .map_err(|_| bad(part, "is not a page number"))?;
        if n == 0 {
            return Err(bad(part, "is not a page: pages are numbered from 1"));
        }
        if n > page_count {
            return Err(bad(part, "is past the last page"));
        }
        Ok(n)
    };
    let mut pages = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        if part.is_empty() {
            bail!(bad(part, "is empty"));
        }
        match part.split_once('-') {
            None => pages.push(number(part, part)?),
            Some((from, to)) => {
                let from = number(part, from)?;
                let to = if to.trim().is_empty() {
                    page_count
                } else {
                    number(part, to)?
                };
                if from > to {
                    return Err(bad(part, "runs backwards"));
                }
                pages.extend(from..=to);
            }
        }
    }
    pages.sort_unstable();
    pages.dedup();
    Ok(pages)
}

/// `[1,2,3,7,9,10]` → `1-3, 7, 9-10`: how a page list is shown back to the model.
pub fn describe(pages: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let start = pages[i];
        let mut end = start;
        while i + 1 < pages.len() && pages[i + 1] == end + 1 {
            i += 1;
            end = pages[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_specs() {
        assert_eq!(parse("t", None, 3).unwrap(), vec![1, 2, 3]);
        assert_eq!(parse("t", Some("all"), 2).unwrap(), vec![1, 2]);
        assert_eq!(parse("t", Some("1-3,7"), 9).unwrap(), vec![1, 2, 3, 7]);
        assert_eq!(parse("t", Some(" 7 , 2-3, 3 "), 9).unwrap(), vec![2, 3, 7]);
        assert_eq!(parse("t", Some("8-"), 9).unwrap(), vec![8, 9]);
        assert_eq!(parse("t", Some("4-4"), 9).unwrap(), vec![4]);
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, want) in [
            ("0", "numbered from 1"),
            ("5-2", "runs backwards"),
            ("x", "is not a page number"),
            ("1,,2", "is empty"),
            ("10", "past the last page"),
            ("2-12", "past the last page"),
            ("-3", "is not a page number"),
        ] {
            let e = parse("pdf__read", Some(spec), 9).unwrap_err().to_string();
            assert!(e.contains(want), "{spec}: {e}");
            assert!(e.contains("pdf__read: argument `pages`"), "{e}");
            assert!(e.contains("the PDF has 9 pages"), "{e}");
        }
    }

    #[test]
    fn describing() {
        assert_eq!(describe(&[1, 2, 3, 7, 9, 10]), "1-3, 7, 9-10");
        assert_eq!(describe(&[4]), "4");
    }
}
