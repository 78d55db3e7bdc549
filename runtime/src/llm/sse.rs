//! A Server-Sent Events parser. (Stub.)
