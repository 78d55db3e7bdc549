//! What each provider finds around it, for `toolbox doctor`: which Python and which backend,
//! which language servers, which optional programs. A provider registers a check with
//! [`register_doctor_check!`](crate::register_doctor_check); the check reads the operator's
//! configuration, looks (it must change nothing), and says what it found, one [`Finding`]
//! per thing, each with whether it is usable.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use serde::Serialize;
use serde_json::Value;

use crate::inventory;

/// One thing a check looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What was looked at, e.g. `embedded interpreter` or `language server pylsp`.
    pub subject: String,
    /// Whether it can be used as configured.
    pub ok: bool,
    /// What was found (a path, a version) or why it cannot be used.
    pub detail: String,
}

impl Finding {
    /// Something usable, with what was found.
    pub fn ok(subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Finding {
            subject: subject.into(),
            ok: true,
            detail: detail.into(),
        }
    }

    /// Something not usable, with why.
    pub fn missing(subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Finding {
            subject: subject.into(),
            ok: false,
            detail: detail.into(),
        }
    }
}

/// The future a check returns.
pub type DoctorFuture<'a> = Pin<Box<dyn Future<Output = Vec<Finding>> + Send + 'a>>;

/// A provider's check: the whole configuration (as `ToolContext::config`) and the workspace
/// root in, what it found out.
pub struct DoctorCheck {
    /// The provider that registered it, e.g. `python`.
    pub provider: &'static str,
    /// Looks, and says what it found.
    pub check: for<'a> fn(config: &'a Value, workspace: &'a Path) -> DoctorFuture<'a>,
}

inventory::collect!(DoctorCheck);

/// Every linked check, sorted by provider.
pub fn doctor_checks() -> Vec<&'static DoctorCheck> {
    let mut all: Vec<_> = inventory::iter::<DoctorCheck>.into_iter().collect();
    all.sort_by_key(|c| c.provider);
    all
}

/// Registers a [`DoctorCheck`] at link time.
///
/// ```ignore
/// fn check<'a>(config: &'a Value, workspace: &'a Path) -> DoctorFuture<'a> {
///     Box::pin(async move { vec![Finding::ok("clock", "the system clock")] })
/// }
/// toolbox_host::register_doctor_check!("clock", check);
/// ```
#[macro_export]
macro_rules! register_doctor_check {
    ($provider:expr, $check:expr) => {
        $crate::inventory::submit! {
            $crate::doctor::DoctorCheck { provider: $provider, check: $check }
        }
    };
}
