//! [`Arg`]: one tool argument, declared once.
//!
//! A declaration holds what the schema states and what parsing enforces: the name, the
//! aliases, the JSON type, the bounds, the default, and whether the argument is required.
//! The tool's schema is built from it ([`Arg::doc`], [`schema::object`](crate::schema::object))
//! and the tool's arguments are read through it ([`Arg::u64`] and the other readers), so a
//! bound stated in the schema is the bound a call is held to, and a name cannot be spelt one
//! way in the schema and another in the code.
//!
//! ```
//! use serde_json::json;
//! use toolbox_core::schema::object;
//! use toolbox_core::{Arg, Args};
//!
//! const PATH: Arg = Arg::string("path").aliases(&["file_path"]).required();
//! const LIMIT: Arg = Arg::integer("limit", 1, Some(100)).default(20);
//!
//! let schema = object(&[
//!     PATH.doc("File to read."),
//!     LIMIT.doc("How many lines (default 20)."),
//! ]);
//! assert_eq!(schema["properties"]["limit"]["maximum"], 100);
//! assert_eq!(schema["required"], json!(["path"]));
//!
//! let value = json!({"file_path": "a.md"});
//! let args = Args::new("read", &value)?;
//! assert_eq!(PATH.str(&args)?, "a.md");
//! assert_eq!(LIMIT.u64(&args)?, 20);
//! args.finish()?;
//!
//! let value = json!({"path": "a.md", "limit": 500});
//! let args = Args::new("read", &value)?;
//! assert_eq!(
//!     LIMIT.u64(&args).unwrap_err().to_string(),
//!     "read: argument `limit` must be between 1 and 100, got 500"
//! );
//! # Ok::<(), anyhow::Error>(())
//! ```

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::Args;

/// The JSON type of an [`Arg`], with what the type declares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgKind {
    /// A string.
    String,
    /// One of a fixed set of strings.
    Choice(&'static [&'static str]),
    /// A boolean (`"true"` and `"false"` are read too), with its default.
    Boolean {
        /// The value when the argument is not given.
        default: Option<bool>,
    },
    /// A non-negative integer in `min..=max` (no upper bound when `max` is `None`).
    Integer {
        /// The least value.
        min: u64,
        /// The greatest value, if there is one.
        max: Option<u64>,
        /// The value when the argument is not given.
        default: Option<u64>,
    },
    /// A finite number in `min..=max`.
    Number {
        /// The least value, if there is one.
        min: Option<f64>,
        /// The greatest value, if there is one.
        max: Option<f64>,
    },
    /// An array of strings (a lone string is read as an array of one).
    StringList,
    /// Any JSON value with a structure of its own, which the tool parses further; its schema
    /// is written out in full with [`Arg::schema`].
    Json,
}

/// One tool argument: see the [module](self) documentation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arg {
    /// The canonical name, as the schema states it.
    pub name: &'static str,
    /// Other names accepted for it (never listed in the schema).
    pub aliases: &'static [&'static str],
    /// Its type, bounds and default.
    pub kind: ArgKind,
    /// Whether a call must give it.
    pub required: bool,
}

/// One property of a tool's input schema, made by [`Arg::doc`] or [`Arg::schema`].
#[derive(Debug, Clone, PartialEq)]
pub struct Prop {
    /// The property's name.
    pub name: &'static str,
    /// Its JSON Schema.
    pub schema: Value,
    /// Whether it is in the schema's `required` list.
    pub required: bool,
}

impl Arg {
    const fn of(name: &'static str, kind: ArgKind) -> Arg {
        Arg {
            name,
            aliases: &[],
            kind,
            required: false,
        }
    }

    /// A string argument.
    pub const fn string(name: &'static str) -> Arg {
        Arg::of(name, ArgKind::String)
    }

    /// A string that must be one of `choices`.
    pub const fn choice(name: &'static str, choices: &'static [&'static str]) -> Arg {
        Arg::of(name, ArgKind::Choice(choices))
    }

    /// A boolean argument, `false` unless given (see [`Arg::default_bool`]).
    pub const fn boolean(name: &'static str) -> Arg {
        Arg::of(name, ArgKind::Boolean { default: None })
    }

    /// A non-negative integer in `min..=max`.
    pub const fn integer(name: &'static str, min: u64, max: Option<u64>) -> Arg {
        Arg::of(
            name,
            ArgKind::Integer {
                min,
                max,
                default: None,
            },
        )
    }

    /// A finite number in `min..=max`.
    pub const fn number(name: &'static str, min: Option<f64>, max: Option<f64>) -> Arg {
        Arg::of(name, ArgKind::Number { min, max })
    }

    /// An array of strings.
    pub const fn strings(name: &'static str) -> Arg {
        Arg::of(name, ArgKind::StringList)
    }

    /// Any JSON value, with a schema written by hand ([`Arg::schema`]).
    pub const fn json(name: &'static str) -> Arg {
        Arg::of(name, ArgKind::Json)
    }

    /// Other names accepted for this one.
    pub const fn aliases(mut self, aliases: &'static [&'static str]) -> Arg {
        self.aliases = aliases;
        self
    }

    /// A call must give it.
    pub const fn required(mut self) -> Arg {
        self.required = true;
        self
    }

    /// The value of an integer argument that is not given.
    pub const fn default(mut self, default: u64) -> Arg {
        match self.kind {
            ArgKind::Integer { min, max, .. } => {
                self.kind = ArgKind::Integer {
                    min,
                    max,
                    default: Some(default),
                }
            }
            _ => panic!("Arg::default is for integers"),
        }
        self
    }

    /// The value of a boolean argument that is not given.
    pub const fn default_bool(mut self, default: bool) -> Arg {
        match self.kind {
            ArgKind::Boolean { .. } => {
                self.kind = ArgKind::Boolean {
                    default: Some(default),
                }
            }
            _ => panic!("Arg::default_bool is for booleans"),
        }
        self
    }

    /// The schema property: the type, the bounds and the choices from the declaration, with
    /// `description`.
    pub fn doc(&self, description: impl AsRef<str>) -> Prop {
        let description = description.as_ref();
        let schema = match self.kind {
            ArgKind::String => json!({"type": "string", "description": description}),
            ArgKind::Choice(choices) => {
                json!({"type": "string", "enum": choices, "description": description})
            }
            ArgKind::Boolean { .. } => json!({"type": "boolean", "description": description}),
            ArgKind::Integer { min, max, .. } => {
                let mut schema =
                    json!({"type": "integer", "minimum": min, "description": description});
                if let Some(max) = max {
                    schema["maximum"] = json!(max);
                }
                schema
            }
            ArgKind::Number { min, max } => {
                let mut schema = json!({"type": "number", "description": description});
                if let Some(min) = min {
                    schema["minimum"] = json!(min);
                }
                if let Some(max) = max {
                    schema["maximum"] = json!(max);
                }
                schema
            }
            ArgKind::StringList => json!({
                "type": "array", "items": {"type": "string"}, "description": description
            }),
            ArgKind::Json => panic!(
                "argument `{}` is any JSON: give its schema with Arg::schema",
                self.name
            ),
        };
        self.prop(schema)
    }

    /// The schema property written out in full, for an argument whose structure the
    /// declaration does not capture (an array of objects, a choice of types).
    pub fn schema(&self, schema: Value) -> Prop {
        self.prop(schema)
    }

    fn prop(&self, schema: Value) -> Prop {
        Prop {
            name: self.name,
            schema,
            required: self.required,
        }
    }

    fn is(&self, kind: &str, ok: bool) {
        debug_assert!(ok, "argument `{}` is not declared as {kind}", self.name);
    }

    /// A required string.
    pub fn str<'a>(&self, args: &Args<'a>) -> Result<&'a str> {
        self.opt_str(args)?.ok_or_else(|| args.missing(self.name))
    }

    /// A string, if given.
    pub fn opt_str<'a>(&self, args: &Args<'a>) -> Result<Option<&'a str>> {
        self.is("a string", matches!(self.kind, ArgKind::String));
        args.opt_str(self.name, self.aliases)
    }

    /// A string where an empty or blank one means not given (paths, ids, choices: see
    /// [`Args::opt_nonempty_str`]).
    pub fn opt_nonempty_str<'a>(&self, args: &Args<'a>) -> Result<Option<&'a str>> {
        self.is(
            "a string",
            matches!(self.kind, ArgKind::String | ArgKind::Choice(_)),
        );
        args.opt_nonempty_str(self.name, self.aliases)
    }

    /// One of the declared choices, if given (an empty string is not given).
    pub fn opt_choice<'a>(&self, args: &Args<'a>) -> Result<Option<&'a str>> {
        let ArgKind::Choice(choices) = self.kind else {
            panic!("argument `{}` is not declared as a choice", self.name)
        };
        match args.opt_nonempty_str(self.name, self.aliases)? {
            Some(given) if !choices.contains(&given) => bail!(
                "{}: argument `{}` must be one of {}, got {given:?}",
                args.tool(),
                self.name,
                choices.join(", ")
            ),
            given => Ok(given),
        }
    }

    /// A boolean: its default when not given (`false` when it declares none).
    pub fn bool(&self, args: &Args<'_>) -> Result<bool> {
        let ArgKind::Boolean { default } = self.kind else {
            panic!("argument `{}` is not declared as a boolean", self.name)
        };
        Ok(args
            .opt_bool(self.name, self.aliases)?
            .unwrap_or(default.unwrap_or(false)))
    }

    /// A boolean, if given.
    pub fn opt_bool(&self, args: &Args<'_>) -> Result<Option<bool>> {
        self.is("a boolean", matches!(self.kind, ArgKind::Boolean { .. }));
        args.opt_bool(self.name, self.aliases)
    }

    /// An integer within the declared bounds: its default when not given, or, when it has
    /// none, the error that it is required.
    pub fn u64(&self, args: &Args<'_>) -> Result<u64> {
        let ArgKind::Integer { default, .. } = self.kind else {
            panic!("argument `{}` is not declared as an integer", self.name)
        };
        match self.opt_u64(args)? {
            Some(n) => Ok(n),
            None => default.ok_or_else(|| args.missing(self.name)),
        }
    }

    /// An integer within the declared bounds, if given.
    pub fn opt_u64(&self, args: &Args<'_>) -> Result<Option<u64>> {
        let ArgKind::Integer { max, .. } = self.kind else {
            panic!("argument `{}` is not declared as an integer", self.name)
        };
        let Some(n) = self.opt_u64_at_least(args)? else {
            return Ok(None);
        };
        match max {
            Some(max) if n > max => {
                let ArgKind::Integer { min, .. } = self.kind else {
                    unreachable!()
                };
                bail!(
                    "{}: argument `{}` must be between {min} and {max}, got {n}",
                    args.tool(),
                    self.name
                )
            }
            _ => Ok(Some(n)),
        }
    }

    /// An integer held only to its declared minimum, if given: for a tool that caps a
    /// larger value at the declared maximum and says so, rather than refusing it.
    pub fn opt_u64_at_least(&self, args: &Args<'_>) -> Result<Option<u64>> {
        let ArgKind::Integer { min, max, .. } = self.kind else {
            panic!("argument `{}` is not declared as an integer", self.name)
        };
        match args.opt_u64(self.name, self.aliases)? {
            Some(n) if n < min => match max {
                Some(max) => bail!(
                    "{}: argument `{}` must be between {min} and {max}, got {n}",
                    args.tool(),
                    self.name
                ),
                None => bail!(
                    "{}: argument `{}` must be at least {min}, got {n}",
                    args.tool(),
                    self.name
                ),
            },
            given => Ok(given),
        }
    }

    /// A number within the declared bounds, if given.
    pub fn opt_f64(&self, args: &Args<'_>) -> Result<Option<f64>> {
        let ArgKind::Number { min, max } = self.kind else {
            panic!("argument `{}` is not declared as a number", self.name)
        };
        let Some(n) = args.opt_f64(self.name, self.aliases)? else {
            return Ok(None);
        };
        let below = min.is_some_and(|min| n < min);
        let above = max.is_some_and(|max| n > max);
        if below || above {
            let range = match (min, max) {
                (Some(min), Some(max)) => format!("between {min} and {max}"),
                (Some(min), None) => format!("at least {min}"),
                (None, Some(max)) => format!("at most {max}"),
                (None, None) => unreachable!(),
            };
            bail!(
                "{}: argument `{}` must be {range}, got {n}",
                args.tool(),
                self.name
            );
        }
        Ok(Some(n))
    }

    /// An array of strings, if given.
    pub fn opt_str_list<'a>(&self, args: &Args<'a>) -> Result<Option<Vec<&'a str>>> {
        self.is(
            "a list of strings",
            matches!(self.kind, ArgKind::StringList),
        );
        args.opt_str_list(self.name, self.aliases)
    }

    /// The raw JSON value, if given (not `null`): for [`Arg::json`] arguments, and for a
    /// tool that reads an argument in more than one shape.
    pub fn opt_value<'a>(&self, args: &Args<'a>) -> Option<&'a Value> {
        args.opt_value(self.name, self.aliases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::object;

    const N: Arg = Arg::integer("n", 1, Some(4)).default(1);
    const FROM: Arg = Arg::integer("from", 2, None);
    const SCALE: Arg = Arg::number("scale", Some(0.0), Some(1.0));
    const MODE: Arg = Arg::choice("mode", &["a", "b"]);
    const QUIET: Arg = Arg::boolean("quiet").default_bool(true);

    fn err(arg: &Arg, value: Value) -> String {
        let args = Args::new("t", &value).unwrap();
        let result = match arg.kind {
            ArgKind::Integer { .. } => arg.u64(&args).map(|_| ()),
            ArgKind::Number { .. } => arg.opt_f64(&args).map(|_| ()),
            ArgKind::Choice(_) => arg.opt_choice(&args).map(|_| ()),
            _ => unreachable!(),
        };
        result.unwrap_err().to_string()
    }

    #[test]
    fn the_schema_states_what_parsing_enforces() {
        let schema = object(&[
            N.doc("How many."),
            FROM.doc("Start."),
            SCALE.doc("Scale."),
            MODE.doc("Mode."),
            QUIET.doc("Quiet."),
        ]);
        assert_eq!(
            schema["properties"]["n"],
            json!({"type": "integer", "minimum": 1, "maximum": 4, "description": "How many."})
        );
        assert_eq!(schema["properties"]["from"]["minimum"], 2);
        assert!(schema["properties"]["from"].get("maximum").is_none());
        assert_eq!(schema["properties"]["scale"]["maximum"], 1.0);
        assert_eq!(schema["properties"]["mode"]["enum"], json!(["a", "b"]));
        assert_eq!(schema["required"], json!([]));

        assert_eq!(
            err(&N, json!({"n": 5})),
            "t: argument `n` must be between 1 and 4, got 5"
        );
        assert_eq!(
            err(&N, json!({"n": 0})),
            "t: argument `n` must be between 1 and 4, got 0"
        );
        assert_eq!(
            err(&FROM, json!({"from": 1})),
            "t: argument `from` must be at least 2, got 1"
        );
        assert_eq!(err(&FROM, json!({})), "t requires from");
        assert_eq!(
            err(&SCALE, json!({"scale": 1.5})),
            "t: argument `scale` must be between 0 and 1, got 1.5"
        );
        assert_eq!(
            err(&MODE, json!({"mode": "c"})),
            "t: argument `mode` must be one of a, b, got \"c\""
        );

        let value = json!({});
        let args = Args::new("t", &value).unwrap();
        assert_eq!(N.u64(&args).unwrap(), 1);
        assert!(QUIET.bool(&args).unwrap());
        let value = json!({"n": "3", "quiet": "false", "from": 9});
        let args = Args::new("t", &value).unwrap();
        assert_eq!(N.u64(&args).unwrap(), 3);
        assert!(!QUIET.bool(&args).unwrap());
        assert_eq!(FROM.opt_u64_at_least(&args).unwrap(), Some(9));
    }
}
