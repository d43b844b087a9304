//! Streaming deltas across nodes. A streaming request waits on the node that accepted it,
//! while the partition's owner runs the turn: the owner publishes each delta of its turns
//! on core NATS ([`export`], on [`delta_subject`]), every node takes the other nodes' deltas
//! into its reply hub ([`import`]). Lossy like the local fan-out: the hub queues at most
//! `DELTA_EXPORT_BUFFER` deltas for [`export`] and drops (and counts) the rest, core NATS
//! keeps nothing for a slow subscriber, and the turn never waits; the final reply still comes
//! through the changelog, always.

use std::sync::Arc;

use async_nats::Client;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::names::{delta_subject, DELTA_SUBJECTS};
use super::partition_of;
use super::publish::publish_each;
use super::record::DeltaEnvelope;
use crate::replies::Delta;
use crate::runtime::Runtime;

/// Publishes this node's (`node`) deltas from `deltas` on their partitions' subjects until
/// the hub or the task goes.
pub(super) async fn export(
    client: Client,
    node: String,
    partitions: u32,
    deltas: mpsc::Receiver<Arc<Delta>>,
) {
    publish_each(client, deltas, "delta", |delta| {
        let subject = delta_subject(partition_of(&delta.session_key, partitions));
        (subject, DeltaEnvelope::of(&node, delta))
    })
    .await;
}

/// Hands the other nodes' deltas to `runtime`'s waiters until aborted (`node` is this one).
pub(super) async fn import(client: Client, node: String, runtime: Runtime) {
    let mut deltas = match client.subscribe(DELTA_SUBJECTS).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot subscribe to deltas: waiters here get other nodes' replies only whole");
            return;
        }
    };
    while let Some(message) = deltas.next().await {
        let envelope: DeltaEnvelope = match serde_json::from_slice(&message.payload) {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(error = %e, "undecodable delta: skipped");
                continue;
            }
        };
        if envelope.node != node {
            runtime.publish_remote_delta(envelope.into_delta());
        }
    }
}
