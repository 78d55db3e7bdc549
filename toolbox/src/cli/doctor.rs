//! `toolbox doctor`: what each linked provider finds around it (which Python and backend,
//! which language servers), as a table or JSON. It looks and changes nothing.

use std::process::ExitCode;

use serde_json::{json, Value};
use toolbox::host::doctor::doctor_checks;

use super::{load_config, out, Common, UsageError};

#[derive(clap::Args)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    common: Common,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// `toolbox doctor`: every linked provider's findings. Exits 0 whatever was found: what is
/// missing matters only to the tools that need it.
pub(super) async fn run(args: DoctorArgs) -> Result<ExitCode, UsageError> {
    let config = load_config(&args.common)?;
    let providers = Value::Object(config.providers.clone());
    let mut rows = Vec::new();
    // toolbox's own: where its traces go (main started the exporter before this).
    rows.push((
        "toolbox",
        match toolbox::host::telemetry::target() {
            Some(target) => toolbox::host::doctor::Finding::ok(
                "OpenTelemetry export",
                format!("spans to {target}"),
            ),
            None => toolbox::host::doctor::Finding::ok(
                "OpenTelemetry export",
                "off (set OTEL_EXPORTER_OTLP_ENDPOINT or [otel] endpoint; see docs/observability.md)",
            ),
        },
    ));
    for check in doctor_checks() {
        for finding in (check.check)(&providers, &config.workspace).await {
            rows.push((check.provider, finding));
        }
    }
    if args.json {
        let rows: Vec<Value> = rows
            .iter()
            .map(|(provider, f)| {
                json!({"provider": provider, "subject": f.subject, "ok": f.ok, "detail": f.detail})
            })
            .collect();
        out(&format!("{}\n", Value::Array(rows)));
    } else {
        let width = rows.iter().map(|(_, f)| f.subject.len()).max().unwrap_or(7);
        let mut table = format!(
            "{:8}  {:width$}  {:7}  DETAIL\n",
            "PROVIDER", "SUBJECT", "STATUS"
        );
        for (provider, f) in &rows {
            let status = if f.ok { "ok" } else { "missing" };
            table.push_str(&format!(
                "{provider:8}  {:width$}  {status:7}  {}\n",
                f.subject, f.detail
            ));
        }
        out(&table);
    }
    Ok(ExitCode::SUCCESS)
}
