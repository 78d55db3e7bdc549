//! The names toolbox exports under, pinned to the OpenTelemetry GenAI semantic conventions
//! **v0.1.0** (<https://github.com/open-telemetry/semantic-conventions-genai>, every item at
//! Development status; it builds on semantic-conventions v1.45.0). The
//! `opentelemetry-semantic-conventions` crate only has the GenAI names as deprecated and
//! experimental, without their values, so they are written out here. Names of toolbox's own
//! start with `toolbox.`.

/// The URL of the schema these names follow, sent with every span.
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.45.0";
/// The conventions' release, as the docs name it.
pub const GENAI_CONVENTIONS: &str = "semantic-conventions-genai v0.1.0";

/// `gen_ai.operation.name`: what the span does.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// The operation of a tool call.
pub const OP_EXECUTE_TOOL: &str = "execute_tool";
/// The operation of an agent's turn.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";
/// The operation of a model request.
pub const OP_CHAT: &str = "chat";

/// The tool's name.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// The id the model gave the call.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function` for toolbox's tools.
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// The call's arguments (opt-in).
pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// The call's result (opt-in).
pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";

/// The agent's name.
pub const AGENT_NAME: &str = "gen_ai.agent.name";
/// The agent's id.
pub const AGENT_ID: &str = "gen_ai.agent.id";
/// The conversation (toolbox's session).
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// The model provider (`openai`, `anthropic`, …).
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The model asked for.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// The model that answered.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Why the model stopped.
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Input tokens.
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Output tokens.
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Input tokens read from the provider's cache.
pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";

/// The class of an error (stable, from the core conventions).
pub const ERROR_TYPE: &str = "error.type";
/// The address of the server called.
pub const SERVER_ADDRESS: &str = "server.address";

/// MCP: the method (`tools/call`).
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
/// MCP: the JSON-RPC request id.
pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";

/// toolbox's risk class of the tool (`read`, `write`, `execute`, …).
pub const TOOLBOX_RISK: &str = "toolbox.tool.risk";
/// The permission decision for the call: `allow`, `ask` or `deny`.
pub const TOOLBOX_DECISION: &str = "toolbox.permission.decision";
/// Seconds the call waited for a person's approval.
pub const TOOLBOX_APPROVAL_WAIT: &str = "toolbox.approval.wait_s";
/// Who answered the approval (`person`, `rule`, …).
pub const TOOLBOX_APPROVED_BY: &str = "toolbox.approval.answered_by";
/// The name the model called the tool by, when it was an alias.
pub const TOOLBOX_CALLED_AS: &str = "toolbox.tool.called_as";
/// The session the call ran in.
pub const TOOLBOX_SESSION: &str = "toolbox.session.id";
/// Whether a result went to a spool file.
pub const TOOLBOX_SPOOLED: &str = "toolbox.result.spooled";
/// Characters of the result text.
pub const TOOLBOX_RESULT_CHARS: &str = "toolbox.result.chars";

/// The tool-duration histogram (seconds).
pub const METRIC_TOOL_DURATION: &str = "gen_ai.execute_tool.duration";
/// Its bucket boundaries, as the conventions advise.
pub const TOOL_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// The agent-turn histogram (seconds).
pub const METRIC_AGENT_DURATION: &str = "gen_ai.invoke_agent.duration";
/// Its bucket boundaries.
pub const AGENT_DURATION_BUCKETS: &[f64] = &[
    0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6,
];
