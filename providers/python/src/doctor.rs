//! The python provider's part of `toolbox doctor`: the interpreter toolbox was built with,
//! the configured backend, the interpreter that pip and workers use, and whether the embedded
//! interpreter starts (with the libpython it loaded).

use std::path::Path;

use serde_json::Value;
use toolbox_host::doctor::{DoctorFuture, Finding};

use crate::config::{Backend, PythonConfig};
use crate::{BUILD_PYTHON_EXECUTABLE, BUILD_PYTHON_VERSION};

toolbox_host::register_doctor_check!("python", check);

fn check<'a>(config: &'a Value, workspace: &'a Path) -> DoctorFuture<'a> {
    Box::pin(async move {
        let version = BUILD_PYTHON_VERSION
            .split_whitespace()
            .next()
            .unwrap_or(BUILD_PYTHON_VERSION);
        let mut found = vec![if Path::new(BUILD_PYTHON_EXECUTABLE).is_file() {
            Finding::ok(
                "build interpreter",
                format!("{BUILD_PYTHON_EXECUTABLE} (Python {version})"),
            )
        } else {
            Finding::missing(
                "build interpreter",
                format!(
                    "{BUILD_PYTHON_EXECUTABLE} (Python {version}) is not there any more; the \
                     embedded backend cannot start"
                ),
            )
        }];
        let settings = match PythonConfig::from_value(config.get("python"), workspace) {
            Ok(settings) => settings,
            Err(e) => {
                found.push(Finding::missing("[python]", format!("{e:#}")));
                return found;
            }
        };
        let backend = match settings.backend {
            Backend::Embedded => "embedded",
            Backend::Isolated => "isolated",
            Backend::Jupyter => "jupyter",
        };
        found.push(Finding::ok("backend", backend));
        let interpreter = settings.interpreter();
        found.push(if interpreter.is_file() {
            Finding::ok(
                "interpreter for pip and workers",
                interpreter.display().to_string(),
            )
        } else {
            Finding::missing(
                "interpreter for pip and workers",
                format!("{} does not exist", interpreter.display()),
            )
        });
        if settings.backend == Backend::Embedded {
            found.push(match crate::embedded::info().await {
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
            });
        }
        found
    })
}
