//! `toolbox skills [--check]`: the skills (through `toolbox::skill`), or every problem of
//! theirs.

use std::process::ExitCode;

#[cfg(feature = "skill")]
use serde_json::Value;

use super::{load_config, Common, UsageError};
#[cfg(feature = "skill")]
use super::{out, usage};

#[derive(clap::Args)]
pub(crate) struct SkillsArgs {
    #[command(flatten)]
    common: Common,
    /// Validate every skill folder: print each problem as `FILE: RULE`, exit 1 if there is any.
    #[arg(long)]
    check: bool,
}

/// `toolbox skills [--check]`: the skills and what was skipped, or with `--check` every
/// problem as `FILE: RULE` and exit code 1 if there is any.
pub(super) fn run(args: SkillsArgs) -> Result<ExitCode, UsageError> {
    let config = load_config(&args.common)?;
    #[cfg(feature = "skill")]
    {
        use toolbox::skill::{render_check, render_listing, SkillSet};
        let workspace = toolbox::host::Workspace::new(&config.workspace).map_err(usage)?;
        let set =
            SkillSet::discover(&workspace, &Value::Object(config.providers)).map_err(usage)?;
        if !args.check {
            out(&render_listing(&set));
            return Ok(ExitCode::SUCCESS);
        }
        let (report, ok) = render_check(&set);
        out(&report);
        Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    }
    #[cfg(not(feature = "skill"))]
    {
        let _ = (config, args.check);
        Err(UsageError(
            "this toolbox was built without the skill provider (Cargo feature `skill`)".into(),
        ))
    }
}
