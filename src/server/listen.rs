//! The accept loop: HTTP/1.1 connections served by hyper over [`ConnIo`] (read deadlines),
//! at most `max_connections` at once. Past the cap a connection takes one of the
//! `health_connections`, which answer only the probes (every other path: `503`, then close);
//! when those are all taken the oldest is closed for the newcomer, so a flood of idle
//! connections cannot keep `/healthz` from answering — with a `503` of its own unless it had
//! begun a response, so no client is left without an answer (`ConnIo`'s drop). When `closing` turns true the loop stops
//! accepting, asks every connection to finish its request and close, and returns once all have.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt;

use super::auth::PUBLIC_PATHS;
use super::conn_io::{Activity, ConnIo, InFlight, ReadBounds};
use crate::metrics;

/// Pause after a failed `accept` (e.g. out of file descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The connection bounds of one server (from `[server]`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ConnectionBounds {
    pub(super) read: ReadBounds,
    pub(super) max_connections: usize,
    pub(super) health_connections: usize,
}

/// What a connection was admitted as.
enum Slot {
    /// Under the cap: everything is served.
    Full(OwnedSemaphorePermit),
    /// Past the cap: probes only; closed when the sender of `evicted` is dropped.
    Health { evicted: oneshot::Receiver<()> },
}

/// Serves `router` on `listener` until `closing` turns true (or its sender is dropped), then
/// drains the connections.
pub(super) async fn run(
    listener: TcpListener,
    router: Router,
    bounds: ConnectionBounds,
    mut closing: watch::Receiver<bool>,
) {
    // A permit per served connection, taken with `try_acquire`: the loop never waits for one,
    // since a loop waiting would leave new connections (the probes') in the kernel's backlog.
    let full = Arc::new(Semaphore::new(bounds.max_connections));
    // Senders of the health connections' eviction signals, oldest first (at most
    // `health_connections`; a dropped sender closes its connection).
    let mut health: VecDeque<oneshot::Sender<()>> = VecDeque::new();
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = closing.wait_for(|c| *c) => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let slot = match Arc::clone(&full).try_acquire_owned() {
            Ok(permit) => Slot::Full(permit),
            Err(_) => {
                metrics::http_rejected("connection_cap");
                health.retain(|evict| !evict.is_closed());
                if health.len() >= bounds.health_connections {
                    health.pop_front();
                }
                let (evict, evicted) = oneshot::channel();
                health.push_back(evict);
                Slot::Health { evicted }
            }
        };
        connections.spawn(serve_connection(
            stream,
            peer,
            router.clone(),
            bounds.read,
            slot,
            closing.clone(),
        ));
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    read: ReadBounds,
    slot: Slot,
    mut closing: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::default());
    let probes_only = matches!(slot, Slot::Health { .. });
    let io = TokioIo::new(ConnIo::new(stream, Arc::clone(&activity), read));
    let evictable = Arc::clone(&activity);
    let service = service_fn(move |mut request: Request<Incoming>| {
        let in_flight = activity.begin();
        request.extensions_mut().insert(ConnectInfo(peer));
        let router = router.clone();
        async move {
            let response = if probes_only && !PUBLIC_PATHS.contains(&request.uri().path()) {
                super::edge::over_capacity()
            } else {
                match router.oneshot(request.map(Body::new)).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            };
            Ok::<_, Infallible>(response.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        }
    });
    let mut builder = http1::Builder::new();
    builder.keep_alive(!probes_only);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let (_permit, mut evicted) = match slot {
        Slot::Full(permit) => (Some(permit), None),
        Slot::Health { evicted } => (None, Some(evicted)),
    };
    let mut draining = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
                return;
            }
            _ = closing.wait_for(|c| *c), if !draining => {
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
            () = until_evicted(&mut evicted) => {
                // The socket answers `503` as it closes, unless a response was begun.
                evictable.evict();
                return;
            }
        }
    }
}

/// Resolves when a health connection is evicted; never for a connection under the cap.
async fn until_evicted(evicted: &mut Option<oneshot::Receiver<()>>) {
    match evicted {
        Some(rx) => {
            let _ = rx.await;
        }
        None => std::future::pending().await,
    }
}

/// A response body that keeps its request counted as in flight until hyper drops it (sent, or
/// the connection ended).
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
