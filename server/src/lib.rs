//! toolbox-server is `toolbox serve`: the HTTP sidecar over the agent runtime.
//!
//! It only translates: HTTP, SSE and MCP in; runtime calls and runtime events out. See
//! docs/server.md for the API.

#![deny(missing_docs)]

pub mod mcp;
