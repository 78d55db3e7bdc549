//! The shell provider's part of `toolbox doctor`: the `bash` every command runs in, and
//! whether this kernel can enforce the OS sandbox (`[shell] sandbox`, `--sandbox`).

use std::path::Path;

use serde_json::Value;
use toolbox_host::doctor::{DoctorFuture, Finding};

toolbox_host::register_doctor_check!("shell", check);

fn check<'a>(_config: &'a Value, _workspace: &'a Path) -> DoctorFuture<'a> {
    Box::pin(async move {
        vec![
            match toolbox_host::find_program("bash") {
                Some(bash) => Finding::ok("bash", bash.display().to_string()),
                None => Finding::missing("bash", "not on PATH: the shell tool cannot run commands"),
            },
            match toolbox_host::sandbox::availability() {
                Ok(()) => Finding::ok("OS sandbox", "available (Landlock)"),
                Err(e) => Finding::missing(
                    "OS sandbox",
                    format!("{e:#}; [shell] sandbox and --sandbox cannot be enforced here"),
                ),
            },
        ]
    })
}
