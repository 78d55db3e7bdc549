use std::cell::RefCell;

use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};

static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();

/// Untrusted tool arguments with errors that name the tool and the argument.
///
/// A tool reads its arguments through their declarations ([`Arg`](crate::Arg)), e.g.
/// `CODE.str(&args)`, and every name and alias read is remembered as known. A tool reads all its
/// arguments first, then calls [`finish`](Self::finish), which refuses any argument no
/// accessor asked for: the names a tool accepts are exactly the names it reads, so there is
/// no second list to keep in step. A JSON `null` counts as absent in every accessor, so a
/// strict-mode client (which must send every property, `null` for the ones it leaves out)
/// gets the same call as one that omits them. Models often quote numbers and booleans, so
/// `"10"` is accepted for an integer and `"true"` for a boolean.
///
/// ```
/// use serde_json::json;
/// use toolbox_core::{Arg, Args};
///
/// const PATH: Arg = Arg::string("path").aliases(&["file_path"]).required();
/// const LIMIT: Arg = Arg::integer("limit", 1, None);
/// const OFFSET: Arg = Arg::integer("offset", 0, None);
///
/// let value = json!({"file_path": "notes.md", "limit": "20"});
/// let args = Args::new("read_file", &value)?;
/// // The alias is accepted for the canonical name; the quoted number is read as a number.
/// assert_eq!(PATH.str(&args)?, "notes.md");
/// assert_eq!(LIMIT.opt_u64(&args)?, Some(20));
/// assert_eq!(OFFSET.opt_u64(&args)?, None);
///
/// // Errors name the tool and the argument, so the model knows what to fix.
/// let value = json!({"limit": "all"});
/// let args = Args::new("read_file", &value)?;
/// // A missing required argument names what was given instead, so a misspelling shows.
/// assert_eq!(
///     PATH.str(&args).unwrap_err().to_string(),
///     "read_file requires path (also given: limit)"
/// );
/// assert_eq!(
///     LIMIT.opt_u64(&args).unwrap_err().to_string(),
///     "read_file: argument `limit` must be a non-negative integer, got a string \"all\""
/// );
///
/// // An argument nothing read is refused by `finish`, which lists the ones that were read.
/// let value = json!({"path": "a.md", "limt": 5});
/// let args = Args::new("read_file", &value)?;
/// PATH.str(&args)?;
/// LIMIT.opt_u64(&args)?;
/// assert_eq!(
///     args.finish().unwrap_err().to_string(),
///     "read_file: unknown argument `limt` (expected one of: path, file_path, limit)"
/// );
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug)]
pub struct Args<'a> {
    tool: &'a str,
    map: &'a Map<String, Value>,
    /// Every name and alias an accessor asked for, in the order asked, each once.
    known: RefCell<Vec<&'static str>>,
}

impl<'a> Args<'a> {
    /// Arguments must be a JSON object; `null` is read as `{}`.
    pub fn new(tool: &'a str, value: &'a Value) -> Result<Self> {
        let map = match value {
            Value::Object(map) => map,
            Value::Null => EMPTY.get_or_init(Map::new),
            other => bail!(
                "{tool}: arguments must be a JSON object, got {}",
                json_kind(other)
            ),
        };
        Ok(Args {
            tool,
            map,
            known: RefCell::new(Vec::new()),
        })
    }

    /// The tool these arguments are for, as errors name it.
    pub fn tool(&self) -> &str {
        self.tool
    }

    /// Refuses any argument that no accessor has asked for, so a misspelt name is not
    /// silently ignored. Call it once every argument has been read (before the tool acts,
    /// and before any branch that reads only some of them), so that it knows them all.
    pub fn finish(&self) -> Result<()> {
        let known = self.known.borrow();
        if let Some(key) = self.map.keys().find(|key| !known.contains(&key.as_str())) {
            if known.is_empty() {
                bail!(
                    "{}: unknown argument `{key}` (it takes no arguments)",
                    self.tool
                );
            }
            bail!(
                "{}: unknown argument `{key}` (expected one of: {})",
                self.tool,
                known.join(", ")
            );
        }
        Ok(())
    }

    fn lookup(&self, name: &'static str, aliases: &[&'static str]) -> Option<(&'a str, &'a Value)> {
        {
            let mut known = self.known.borrow_mut();
            for key in std::iter::once(&name).chain(aliases) {
                if !known.contains(key) {
                    known.push(key);
                }
            }
        }
        std::iter::once(name)
            .chain(aliases.iter().copied())
            .find_map(|key| {
                self.map
                    .get_key_value(key)
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.as_str(), v))
            })
    }

    fn wrong(&self, key: &str, want: &str, got: &Value) -> anyhow::Error {
        anyhow!(
            "{}: argument `{key}` must be {want}, got {}",
            self.tool,
            describe(got)
        )
    }

    /// `TOOL requires NAME`, naming the arguments given that nothing has read yet: when a
    /// model misspells a required argument, it sees the name it used.
    pub fn missing(&self, name: &str) -> anyhow::Error {
        let known = self.known.borrow();
        let unread: Vec<&str> = self
            .map
            .keys()
            .map(String::as_str)
            .filter(|key| !known.contains(key))
            .collect();
        if unread.is_empty() {
            anyhow!("{} requires {name}", self.tool)
        } else {
            anyhow!(
                "{} requires {name} (also given: {})",
                self.tool,
                unread.join(", ")
            )
        }
    }

    /// The string argument `name` (or one of its `aliases`), if given; another type is an
    /// error naming the argument.
    pub(crate) fn opt_str(
        &self,
        name: &'static str,
        aliases: &[&'static str],
    ) -> Result<Option<&'a str>> {
        match self.lookup(name, aliases) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s)),
            Some((key, other)) => Err(self.wrong(key, "a string", other)),
        }
    }

    /// An optional string where an empty or blank string also means absent: paths, ids and
    /// choices, for which `""` can only mean "not given". Clients that make every property
    /// required without allowing `null` send `""` for the ones they leave out.
    pub(crate) fn opt_nonempty_str(
        &self,
        name: &'static str,
        aliases: &[&'static str],
    ) -> Result<Option<&'a str>> {
        Ok(self
            .opt_str(name, aliases)?
            .filter(|s| !s.trim().is_empty()))
    }

    /// The boolean argument `name` (or one of its `aliases`), if given; the strings `"true"`
    /// and `"false"` are accepted too.
    pub(crate) fn opt_bool(
        &self,
        name: &'static str,
        aliases: &[&'static str],
    ) -> Result<Option<bool>> {
        match self.lookup(name, aliases) {
            None => Ok(None),
            Some((_, Value::Bool(b))) => Ok(Some(*b)),
            Some((_, Value::String(s))) if s == "true" => Ok(Some(true)),
            Some((_, Value::String(s))) if s == "false" => Ok(Some(false)),
            Some((key, other)) => Err(self.wrong(key, "a boolean", other)),
        }
    }

    /// A non-negative integer.
    pub(crate) fn opt_u64(
        &self,
        name: &'static str,
        aliases: &[&'static str],
    ) -> Result<Option<u64>> {
        match self.lookup(name, aliases) {
            None => Ok(None),
            Some((key, value)) => {
                let parsed = match value {
                    Value::Number(n) => n.as_u64().or_else(|| {
                        // 10.0 is a fine way to say 10.
                        n.as_f64()
                            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                            .map(|f| f as u64)
                    }),
                    Value::String(s) => s.trim().parse::<u64>().ok(),
                    _ => None,
                };
                parsed
                    .map(Some)
                    .ok_or_else(|| self.wrong(key, "a non-negative integer", value))
            }
        }
    }

    /// A finite number (an integer, a fraction, or either quoted).
    pub(crate) fn opt_f64(
        &self,
        name: &'static str,
        aliases: &[&'static str],
    ) -> Result<Option<f64>> {
        match self.lookup(name, aliases) {
            None => Ok(None),
            Some((key, value)) => {
                let parsed = match value {
                    Value::Number(n) => n.as_f64(),
                    Value::String(s) => s.trim().parse::<f64>().ok(),
                    _ => None,
                };
                parsed
                    .filter(|f| f.is_finite())
                    .map(Some)
                    .ok_or_else(|| self.wrong(key, "a number", value))
            }
        }
    }

    /// Any JSON value but `null` (an object, an array, …), for arguments with a structure of
    /// their own that the tool parses further (a schema, a template, a list of steps).
    pub(crate) fn opt_value(
        &self,
        name: &'static str,
        aliases: &[&'static str],
    ) -> Option<&'a Value> {
        self.lookup(name, aliases).map(|(_, value)| value)
    }

    /// An array of strings; a lone string is read as a one-element array.
    pub(crate) fn opt_str_list(
        &self,
        name: &'static str,
        aliases: &[&'static str],
    ) -> Result<Option<Vec<&'a str>>> {
        match self.lookup(name, aliases) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(vec![s.as_str()])),
            Some((key, Value::Array(items))) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .ok_or_else(|| self.wrong(key, "an array of strings", item))
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some((key, other)) => Err(self.wrong(key, "an array of strings", other)),
        }
    }
}

/// What kind of JSON value `v` is, for messages: "a string", "an array", "null", ….
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The length of `value` as compact JSON text, counted as it is written: no text is built.
/// 0 if it cannot be serialised.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(0, |()| count.0)
}

fn describe(v: &Value) -> String {
    let mut shown = v.to_string();
    if shown.len() > 60 {
        let cut = (0..=60)
            .rev()
            .find(|i| shown.is_char_boundary(*i))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push('…');
    }
    format!("{} {shown}", json_kind(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PATH: crate::Arg = crate::Arg::string("path")
        .aliases(&["file_path"])
        .required();

    #[test]
    fn required_string_names_tool_and_argument() {
        let v = json!({});
        let args = Args::new("file_manager__read", &v).unwrap();
        let err = PATH.str(&args).unwrap_err().to_string();
        assert_eq!(err, "file_manager__read requires path");
        // A misspelt required argument is named beside the one that is missing.
        let v = json!({"paht": "a.txt", "limit": 3});
        let args = Args::new("file_manager__read", &v).unwrap();
        args.opt_u64("limit", &[]).unwrap();
        let err = PATH.str(&args).unwrap_err().to_string();
        assert_eq!(err, "file_manager__read requires path (also given: paht)");
    }

    #[test]
    fn aliases_and_null_handling() {
        let v = json!({"path": null, "file_path": "a.txt"});
        let args = Args::new("t", &v).unwrap();
        assert_eq!(PATH.str(&args).unwrap(), "a.txt");
    }

    #[test]
    fn null_is_absent_in_every_accessor() {
        let v = json!({"s": null, "b": null, "n": null, "f": null, "l": null, "p": null});
        let args = Args::new("t", &v).unwrap();
        assert_eq!(args.opt_str("s", &[]).unwrap(), None);
        assert_eq!(args.opt_nonempty_str("p", &[]).unwrap(), None);
        assert_eq!(args.opt_bool("b", &[]).unwrap(), None);
        assert!(crate::Arg::boolean("b")
            .default_bool(true)
            .bool(&args)
            .unwrap());
        assert_eq!(args.opt_u64("n", &[]).unwrap(), None);
        assert_eq!(
            crate::Arg::integer("n", 1, Some(10))
                .default(7)
                .u64(&args)
                .unwrap(),
            7
        );
        assert_eq!(args.opt_f64("f", &[]).unwrap(), None);
        assert_eq!(args.opt_str_list("l", &[]).unwrap(), None);
        assert_eq!(
            crate::Arg::string("s").str(&args).unwrap_err().to_string(),
            "t requires s"
        );
        // A null canonical name falls through to an alias that has a value.
        let v = json!({"cwd": null, "workdir": "sub"});
        let args = Args::new("t", &v).unwrap();
        assert_eq!(
            args.opt_nonempty_str("cwd", &["workdir"]).unwrap(),
            Some("sub")
        );
    }

    #[test]
    fn blank_strings_are_absent_where_they_can_only_mean_absent() {
        let v = json!({"a": "", "b": "  ", "c": "x", "d": 3});
        let args = Args::new("t", &v).unwrap();
        assert_eq!(args.opt_nonempty_str("a", &[]).unwrap(), None);
        assert_eq!(args.opt_nonempty_str("b", &[]).unwrap(), None);
        assert_eq!(args.opt_nonempty_str("c", &[]).unwrap(), Some("x"));
        assert!(args.opt_nonempty_str("d", &[]).is_err());
        // Plain strings keep the empty string: empty content is content.
        assert_eq!(args.opt_str("a", &[]).unwrap(), Some(""));
    }

    #[test]
    fn numbers_with_fractions() {
        let v = json!({"a": 0.5, "b": "2.25", "c": 3, "d": "soon", "e": true});
        let args = Args::new("t", &v).unwrap();
        assert_eq!(args.opt_f64("a", &[]).unwrap(), Some(0.5));
        assert_eq!(args.opt_f64("b", &[]).unwrap(), Some(2.25));
        assert_eq!(args.opt_f64("c", &[]).unwrap(), Some(3.0));
        let e = args.opt_f64("d", &[]).unwrap_err().to_string();
        assert!(
            e.contains("`d` must be a number, got a string \"soon\""),
            "{e}"
        );
        assert!(args.opt_f64("e", &[]).is_err());
    }

    #[test]
    fn wrong_types_are_described() {
        let v = json!({"limit": "ten", "flag": 3, "items": [1]});
        let args = Args::new("t", &v).unwrap();
        let e = args.opt_u64("limit", &[]).unwrap_err().to_string();
        assert!(
            e.contains("`limit` must be a non-negative integer, got a string \"ten\""),
            "{e}"
        );
        let e = args.opt_bool("flag", &[]).unwrap_err().to_string();
        assert!(e.contains("`flag` must be a boolean"), "{e}");
        let e = args.opt_str_list("items", &[]).unwrap_err().to_string();
        assert!(e.contains("`items` must be an array of strings"), "{e}");
    }

    #[test]
    fn lenient_scalars() {
        let v = json!({"n": "12", "m": 3.0, "b": "true"});
        let args = Args::new("t", &v).unwrap();
        assert_eq!(args.opt_u64("n", &[]).unwrap(), Some(12));
        assert_eq!(args.opt_u64("m", &[]).unwrap(), Some(3));
        assert_eq!(args.opt_bool("b", &[]).unwrap(), Some(true));
    }

    #[test]
    fn non_objects_and_unknown_arguments_are_refused() {
        let v = json!([1, 2]);
        assert!(Args::new("t", &v)
            .unwrap_err()
            .to_string()
            .contains("must be a JSON object"));
        let v = json!({"paht": "x"});
        let args = Args::new("t", &v).unwrap();
        assert_eq!(args.opt_str("path", &["file_path"]).unwrap(), None);
        let e = args.finish().unwrap_err().to_string();
        assert_eq!(
            e,
            "t: unknown argument `paht` (expected one of: path, file_path)"
        );
        // A null unknown argument is still unknown; nothing read means no arguments at all.
        let v = json!({"x": null});
        let e = Args::new("t", &v)
            .unwrap()
            .finish()
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t: unknown argument `x` (it takes no arguments)");
        assert!(Args::new("t", &json!({})).unwrap().finish().is_ok());
    }

    #[test]
    fn every_name_and_alias_read_is_known_whatever_was_given() {
        let v = json!({"file_path": "a", "n": null, "schema": {"type": "object"}});
        let args = Args::new("t", &v).unwrap();
        PATH.str(&args).unwrap();
        assert_eq!(args.opt_u64("n", &["count"]).unwrap(), None);
        assert_eq!(
            args.opt_value("schema", &[]),
            Some(&json!({"type": "object"}))
        );
        args.opt_str("path", &[]).unwrap();
        args.finish().unwrap();
        assert_eq!(
            *args.known.borrow(),
            ["path", "file_path", "n", "count", "schema"]
        );
    }

    #[test]
    fn range_checks() {
        let v = json!({"depth": 99});
        let args = Args::new("t", &v).unwrap();
        let e = crate::Arg::integer("depth", 1, Some(10))
            .u64(&args)
            .unwrap_err()
            .to_string();
        assert!(e.contains("between 1 and 10, got 99"), "{e}");
    }
}
