//! toolbox-mcp: every visible tool of one executor over the Model Context Protocol, on stdio
//! ([`stdio`], `toolbox mcp`) and streamable HTTP ([`http`], `/mcp` of `toolbox serve`).

pub mod http;
pub mod jsonrpc;
pub mod stdio;
