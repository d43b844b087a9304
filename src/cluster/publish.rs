//! Sending a node's own items to the other nodes on core NATS (streaming deltas, final
//! replies): one task per kind drains the hub's bounded queue and publishes each item on its
//! partition's subject. Lossy by design — an item that cannot be encoded or published is
//! skipped (core NATS keeps nothing anyway); the turn that made it never waits here.

use async_nats::Client;
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::mpsc;

/// Publishes each item of `items` as `encode` makes it (subject, envelope) until the queue's
/// sender goes; `what` names the kind in logs.
pub(super) async fn publish_each<T, E: Serialize>(
    client: Client,
    mut items: mpsc::Receiver<T>,
    what: &'static str,
    encode: impl Fn(&T) -> (String, E),
) {
    while let Some(item) = items.recv().await {
        let (subject, envelope) = encode(&item);
        let body = match serde_json::to_vec(&envelope) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, what, "cannot encode: not sent to the other nodes");
                continue;
            }
        };
        if let Err(e) = client.publish(subject, Bytes::from(body)).await {
            tracing::debug!(error = %e, what, "not sent to the other nodes");
        }
    }
}
