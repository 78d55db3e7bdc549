//! Permission modes and what they decide for a call: the words every layer shares (the
//! executor decides, host's call context tells a tool, front ends parse and show them).

use std::str::FromStr;

use anyhow::{bail, Result};

/// How risky tools (FileWrite, Python, Shell) are treated. Read tools always run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Risky tools are hidden from every schema and refused when called anyway.
    ReadOnly,
    /// Risky tools ask for approval first; unanswered requests are denied after a timeout.
    #[default]
    Auto,
    /// Everything runs directly.
    Full,
}

impl PermissionMode {
    /// The mode's name in configuration, e.g. `read_only`.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::ReadOnly => "read_only",
            PermissionMode::Auto => "auto",
            PermissionMode::Full => "full",
        }
    }
}

impl PermissionMode {
    /// This mode, or `ceiling` when this one allows more: read_only < auto < full.
    pub fn at_most(self, ceiling: PermissionMode) -> PermissionMode {
        if rank(self) <= rank(ceiling) {
            self
        } else {
            ceiling
        }
    }
}

impl FromStr for PermissionMode {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "read_only" | "read-only" | "readonly" => Ok(PermissionMode::ReadOnly),
            "auto" => Ok(PermissionMode::Auto),
            "full" => Ok(PermissionMode::Full),
            other => bail!("permission mode must be one of read_only, auto, full (got {other:?})"),
        }
    }
}

impl std::fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a permission check concludes for one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call runs.
    Allow,
    /// The call waits for an approval.
    Ask,
    /// The call is refused (and the tool hidden from schemas).
    Deny,
}

impl Decision {
    /// The decision's name: `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much a mode allows: read_only < auto < full.
fn rank(mode: PermissionMode) -> u8 {
    match mode {
        PermissionMode::ReadOnly => 0,
        PermissionMode::Auto => 1,
        PermissionMode::Full => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_rank_and_show() {
        assert_eq!(
            "read-only".parse::<PermissionMode>().unwrap(),
            PermissionMode::ReadOnly
        );
        assert!("root".parse::<PermissionMode>().is_err());
        assert_eq!(
            PermissionMode::Full.at_most(PermissionMode::Auto),
            PermissionMode::Auto
        );
        assert_eq!(
            PermissionMode::ReadOnly.at_most(PermissionMode::Full),
            PermissionMode::ReadOnly
        );
        assert_eq!(Decision::Ask.to_string(), "ask");
        assert_eq!(serde_json::to_value(Decision::Deny).unwrap(), "deny");
    }
}
