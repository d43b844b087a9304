//! Final replies across nodes. A request waiting on a node gets its reply through that
//! node's follower when the node keeps the session's partition; otherwise the node that ran
//! the turn publishes it on core NATS ([`export`], on [`reply_subject`], after its local
//! commit) and every node hands the replies of partitions it does not keep to its waiters
//! ([`import`]). Bounded and lossy like the deltas (`REPLY_EXPORT_BUFFER`, core NATS keeps
//! nothing): a lost one leaves the waiter to its timeout, while the reply is stored in the
//! changelog and on the partition's replicas, so a read (forwarded, `reads`) shows it.

use std::sync::Arc;

use async_nats::Client;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use super::follower::Progress;
use super::names::{partition_of_subject, reply_subject, REPLY_SUBJECTS};
use super::partition_of;
use super::publish::publish_each;
use super::record::ReplyEnvelope;
use crate::replies::Reply;
use crate::runtime::Runtime;

/// Publishes this node's (`node`) final replies from `replies` on their partitions' subjects
/// until the hub or the task goes.
pub(super) async fn export(
    client: Client,
    node: String,
    partitions: u32,
    replies: mpsc::Receiver<Arc<Reply>>,
) {
    publish_each(client, replies, "reply", |reply| {
        let subject = reply_subject(partition_of(&reply.session_key, partitions));
        let envelope = ReplyEnvelope {
            node: node.clone(),
            reply: Reply::clone(reply),
        };
        (subject, envelope)
    })
    .await;
}

/// Hands the other nodes' replies of partitions this node does not keep or is still catching
/// up with (by the follower's `position`) to `runtime`'s waiters until aborted (`node` is
/// this one).
pub(super) async fn import(
    client: Client,
    node: String,
    runtime: Runtime,
    position: watch::Receiver<Progress>,
) {
    let mut replies = match client.subscribe(REPLY_SUBJECTS).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot subscribe to replies: waiters here hear only the partitions this node keeps");
            return;
        }
    };
    while let Some(message) = replies.next().await {
        let Some(partition) = partition_of_subject(&message.subject) else {
            continue;
        };
        if position.borrow().keeps(partition) {
            // The follower hands it over once applied here. A partition still catching up
            // takes it from here too (its follower may be far behind), so `/v1/events` may
            // then hear it twice.
            continue;
        }
        match serde_json::from_slice::<ReplyEnvelope>(&message.payload) {
            Ok(envelope) if envelope.node != node => runtime.publish_remote_reply(envelope.reply),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "undecodable reply: skipped"),
        }
    }
}
