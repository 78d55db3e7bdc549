//! `toolbox mcp`: every visible tool over the Model Context Protocol on stdio (rmcp).
//!
//! Tool failures of any kind (errors, denials, timeouts, panics) are tool results with
//! `isError: true`; only a name that is no tool at all is a protocol error, as MCP asks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use toolbox_core::{ToolInfo, ToolRisk};
use toolbox_executor::{ToolExecutor, ToolRequest};

/// The MCP face of one executor.
#[derive(Clone)]
pub struct McpServer {
    executor: ToolExecutor,
    session: String,
    tools: Arc<Vec<Tool>>,
    calls: Arc<AtomicU64>,
}

impl McpServer {
    pub fn new(executor: ToolExecutor, session: impl Into<String>) -> Self {
        let tools = executor
            .visible_tools()
            .into_iter()
            .map(|t| to_mcp_tool(&t.info))
            .collect();
        McpServer {
            executor,
            session: session.into(),
            tools: Arc::new(tools),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Serves on stdin/stdout until the client closes stdin.
    ///
    /// The protocol gets a private copy of stdout and file descriptor 1 is pointed at stderr
    /// first: code that writes straight to the terminal (a subprocess started from embedded
    /// Python, a C library) would otherwise corrupt the JSON-RPC stream.
    pub async fn serve_stdio(self) -> anyhow::Result<()> {
        let protocol_out = private_stdout()?;
        let service = self.serve((tokio::io::stdin(), protocol_out)).await?;
        service.waiting().await?;
        Ok(())
    }
}

/// Duplicates fd 1 for the protocol and redirects fd 1 to stderr.
fn private_stdout() -> anyhow::Result<tokio::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain descriptor syscalls; the duplicate is owned by the File below and
    // nothing else closes it.
    unsafe {
        let fd = libc::dup(1);
        if fd < 0 {
            anyhow::bail!(
                "cannot duplicate stdout: {}",
                std::io::Error::last_os_error()
            );
        }
        if libc::dup2(2, 1) < 0 {
            anyhow::bail!(
                "cannot redirect stdout to stderr: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(tokio::fs::File::from_std(std::fs::File::from_raw_fd(fd)))
    }
}

fn to_mcp_tool(info: &ToolInfo) -> Tool {
    let schema = match &info.input_schema {
        Value::Object(map) => map.clone(),
        _ => Default::default(),
    };
    let read_only = info.risk == ToolRisk::Read;
    Tool::new(
        info.name.clone(),
        info.description.clone(),
        Arc::new(schema),
    )
    .with_annotations(
        ToolAnnotations::new()
            .read_only(read_only)
            .destructive(!read_only)
            .open_world(matches!(info.risk, ToolRisk::Python | ToolRisk::Shell)),
    )
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "toolbox tools run inside one workspace folder; paths are relative to it.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if self.executor.registry().get(&name).is_none() {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {name}"),
                None,
            ));
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let arguments = request
            .arguments
            .map(Value::Object)
            .unwrap_or(Value::Object(Default::default()));
        let call =
            ToolRequest::new(format!("mcp-{n}"), name, arguments).session(self.session.clone());
        let info = self
            .executor
            .run_cancellable(call, context.ct.clone())
            .await;
        let content = vec![ContentBlock::text(info.result)];
        let result = if info.status == toolbox_executor::CallStatus::Done {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        };
        Ok(result.into())
    }
}
