//! The python provider's part of `toolbox doctor`: which interpreter it found at run time
//! (and how), the configured backend, the interpreter that pip and workers use, and the
//! backend a call would really run on: for the embedded one, whether it starts, with the
//! libpython it loaded.

use std::path::Path;

use serde_json::Value;
use toolbox_host::doctor::{DoctorFuture, Finding};

use crate::config::{Backend, PythonConfig};

toolbox_host::register_doctor_check!("python", check);

fn check<'a>(config: &'a Value, workspace: &'a Path) -> DoctorFuture<'a> {
    Box::pin(async move {
        let mut found = Vec::new();
        let settings = match PythonConfig::from_value(config.get("python"), workspace) {
            Ok(settings) => settings,
            Err(e) => {
                found.push(Finding::missing("[python]", format!("{e:#}")));
                return found;
            }
        };
        let python = match settings.found() {
            Ok(python) => python,
            Err(e) => {
                found.push(Finding::missing("interpreter", format!("{e:#}")));
                return found;
            }
        };
        found.push(Finding::ok("interpreter", python.describe()));
        let backend = match settings.backend {
            Backend::Embedded => "embedded",
            Backend::Isolated => "isolated",
            Backend::Jupyter => "jupyter",
        };
        found.push(Finding::ok("backend", backend));
        match settings.python() {
            Ok(program) if program.is_file() => found.push(Finding::ok(
                "interpreter for pip and workers",
                program.display().to_string(),
            )),
            Ok(program) => found.push(Finding::missing(
                "interpreter for pip and workers",
                format!("{} does not exist", program.display()),
            )),
            Err(e) => found.push(Finding::missing(
                "interpreter for pip and workers",
                format!("{e:#}"),
            )),
        }
        if settings.backend == Backend::Embedded {
            found.push(match crate::embedded::unavailable(&settings).await {
                Ok(None) => match crate::embedded::info(settings.interpreter.as_deref()).await {
                    Ok(info) => Finding::ok(
                        "embedded interpreter",
                        format!(
                            "Python {} from {}",
                            info["version"]
                                .as_str()
                                .and_then(|v| v.split_whitespace().next())
                                .unwrap_or("?"),
                            info["libpython"].as_str().unwrap_or("(unknown)")
                        ),
                    ),
                    Err(e) => Finding::missing("embedded interpreter", format!("{e:#}")),
                },
                Ok(Some(why)) => Finding::missing(
                    "embedded interpreter",
                    format!("{why}; run_python_code uses the isolated backend instead"),
                ),
                Err(e) => Finding::missing("embedded interpreter", format!("{e:#}")),
            });
        }
        found
    })
}
