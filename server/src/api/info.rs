//! What this server offers: `GET /api/health`, `GET /api/tools` (the schemas, in a format
//! and mode), `GET /api/agents`.

use std::collections::BTreeSet;

use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use toolbox_executor::{PermissionMode, Permissions, SchemaFormat};

use super::{AppResult, Shared};
use crate::ApiError;

pub(super) async fn health(State(state): Shared) -> Json<Value> {
    let executor = state.runtime.executor();
    let providers: BTreeSet<&str> = executor
        .registry()
        .tools()
        .iter()
        .map(|t| t.provider_name())
        .collect();
    let session_server = state.options.session_server.as_ref().map(|s| {
        json!({
            "session": s.session().as_str(),
            "epoch": s.epoch(),
            "last_sync": s.last_sync(),
        })
    });
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "providers": providers,
        "mode": executor.permissions().mode,
        "workspace": executor.workspace().root(),
        // `host` is the same object under its old name, kept for placement adapters that
        // read it (deprecated: read `session_server`).
        "host": session_server.clone(),
        "session_server": session_server,
        // OpenTelemetry export: what happened to the spans so far (null when it is off).
        "otel": toolbox_host::telemetry::counts(),
    }))
}

#[derive(Deserialize)]
pub(super) struct ToolsQuery {
    toolsets: Option<String>,
    format: Option<String>,
    mode: Option<String>,
    strict: Option<bool>,
}

pub(super) async fn tools(
    State(state): Shared,
    Query(query): Query<ToolsQuery>,
) -> AppResult<Json<Value>> {
    let format: SchemaFormat = match query.format.as_deref() {
        None | Some("") => SchemaFormat::OpenAi,
        Some(f) => f
            .parse()
            .map_err(|e: anyhow::Error| ApiError::bad_request(format!("format: {e}")))?,
    };
    let executor = state.runtime.executor();
    let mode: PermissionMode = match query.mode.as_deref() {
        None | Some("") => executor.permissions().mode,
        Some(m) => m
            .parse()
            .map_err(|e: anyhow::Error| ApiError::bad_request(format!("mode: {e}")))?,
    };
    let sets: Option<Vec<&str>> = query.toolsets.as_deref().map(|s| {
        s.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    });
    let rendering = format.strict(query.strict.unwrap_or(format.strict_by_default()));
    let schemas = executor
        .resolve_agent_tool_schemas(sets.as_deref(), Permissions::from(mode), rendering)
        .map_err(|e| ApiError::bad_request(format!("toolsets: {e:#}")))?;
    Ok(Json(Value::Array(schemas)))
}

pub(super) async fn agents(State(state): Shared) -> Json<Value> {
    let executor = state.runtime.executor();
    let config = Value::Object(executor.config().providers.clone());
    Json(toolbox_host::discover_agents(executor.workspace(), &config).summary())
}
