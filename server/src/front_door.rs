//! `toolbox serve`'s use of the shared front door (`toolbox-front-door`): the accept loop,
//! header timeouts, the connection cap and the eviction of connections that never
//! authenticated, as `toolbox router` has them too; plus what only a server that runs tools
//! needs: a connection from toolbox's own code (the process itself, where the embedded
//! interpreter runs, or anything it started: shell commands, workers, their detached
//! helpers) is refused with 403 before a byte of it is read, on loopback too, token or not
//! ([`toolbox_host::peer`]). Model-run code cannot answer its own approvals. So is a local
//! connection whose client is already gone (nobody can be told apart then).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

pub use toolbox_front_door::{ConnectionAuth, FrontDoor, BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT};

/// Why a connection is refused as coming from toolbox's own code, if it is.
pub fn own_code(local: SocketAddr, peer: SocketAddr) -> Option<String> {
    use toolbox_host::peer::{tcp_peer, Peer};
    match tcp_peer(local, peer) {
        Peer::Remote | Peer::Elsewhere => None,
        Peer::OwnCode(pid) => {
            tracing::warn!(target: "toolbox", "refused a connection from {peer}: process {pid} is toolbox's own code");
            Some(format!(
                "this connection comes from a process toolbox started (pid {pid}): code a \
                 tool runs may not use this server (it could answer its own approvals)"
            ))
        }
        Peer::Unknown => Some(
            "this connection comes from this machine, but its client could not be found (it \
             closed before the server looked): refused, as it could be code a tool runs"
                .to_string(),
        ),
    }
}

/// The front door of `toolbox serve`: the descriptor limit's cap, and [`own_code`] refused.
pub fn door() -> FrontDoor {
    FrontDoor {
        refuse: Some(Arc::new(own_code)),
        ..FrontDoor::from_descriptor_limit()
    }
}

/// Serves `app` on `listener` through `door` until `stop`; see the crate
/// `toolbox-front-door` for what the door does.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    door: FrontDoor,
    stop: CancellationToken,
    grace: Duration,
) {
    let make = move |connection: toolbox_front_door::Connection| {
        let app = app.clone();
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(connection.peer));
            request.extensions_mut().insert(connection.auth.clone());
            let app = app.clone();
            async move { app.oneshot(request.map(axum::body::Body::new)).await }
        })
    };
    toolbox_front_door::serve(listener, make, door, stop, grace).await;
}
