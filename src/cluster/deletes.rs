//! Deleting a session in a cluster. Every node keeps a copy and the changelog would bring a
//! session back, so a delete is a changelog record ([`LogRecord::Delete`]), and only the
//! partition's owner appends it: any node asks the owner over core NATS ([`DeleteClient`],
//! on [`delete_subject`]), and the owner ([`serve`]) does under its partition's append lock
//! what a single node does — refuses while a turn of the session runs, has the lane drop its
//! queue — then appends the record, deletes its own copy and acknowledges the session's
//! held inbox messages, all before the next append of the partition. So on the owner, as on
//! every node that applies the record (`follower`), the delete comes after the turns
//! appended before it and before those appended after it. The asking node answers once its
//! follower has applied the record.
//!
//! Why not let any node append the record: the owner's appends are fenced by the subject's
//! last sequence, so a foreign record would read as a new owner; and the owner would have to
//! order its own turns' local commits around a delete it learns of only through its follower.

use std::sync::Arc;
use std::time::Duration;

use async_nats::client::RequestErrorKind;
use async_nats::Client;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::changelog::Changelog;
use super::follower::Progress;
use super::names::{delete_subject, partition_of_subject, DELETE_SUBJECTS};
use super::record::{DeleteAnswer, DeleteRequest};
use super::{partition_of, Partition};
use crate::error::Error;
use crate::pipeline::ReplicationError;
use crate::runtime::{ClusterDeletes, Deleted, Runtime};

/// Room beyond a lease for a delete: the owner retries its append while its tenure lasts (at
/// most a lease), then deletes its copy and waits for the flush.
const DELETE_SLACK: Duration = Duration::from_secs(5);

/// How long a node waits for the owner's answer to a delete, and then for its own follower
/// to apply it.
pub(super) fn delete_timeout(lease: Duration) -> Duration {
    lease + DELETE_SLACK
}

/// A node's way to delete a session: ask the owner, then wait until the follower has
/// applied the delete here.
pub(super) struct DeleteClient {
    client: Client,
    partitions: u32,
    /// The follower's position (the last changelog sequence it processed).
    position: watch::Receiver<Progress>,
    timeout: Duration,
}

impl DeleteClient {
    /// Asks through `client`; `position` is this node's follower's.
    pub(super) fn new(
        client: Client,
        partitions: u32,
        position: watch::Receiver<Progress>,
        timeout: Duration,
    ) -> Self {
        Self {
            client,
            partitions,
            position,
            timeout,
        }
    }

    async fn delete_session(&self, session_key: &str) -> Result<Option<Deleted>, Error> {
        let partition = partition_of(session_key, self.partitions);
        let body = serde_json::to_vec(&DeleteRequest {
            session_key: session_key.to_string(),
        })
        .map_err(|e| Error::Replication(format!("cannot encode the delete: {e}")))?;
        let request = async_nats::Request::new()
            .payload(Bytes::from(body))
            .timeout(Some(self.timeout));
        let answer = self
            .client
            .send_request(delete_subject(partition), request)
            .await
            .map_err(|e| {
                Error::Replication(match e.kind() {
                    RequestErrorKind::NoResponders => format!(
                        "no node serves partition {partition}'s deletes: nothing was deleted; \
                         retry"
                    ),
                    RequestErrorKind::TimedOut => format!(
                        "partition {partition}'s owner did not answer the delete in {:?} (the \
                         partition may be moving, or the changelog has no quorum); retry",
                        self.timeout
                    ),
                    _ => format!("the delete did not reach partition {partition}'s owner: {e}"),
                })
            })?;
        let answer: DeleteAnswer = serde_json::from_slice(&answer.payload).map_err(|e| {
            Error::Replication(format!(
                "undecodable answer from partition {partition}'s owner: {e}"
            ))
        })?;
        match answer {
            DeleteAnswer::Deleted {
                seq,
                entries,
                pending_messages,
            } => {
                let mut position = self.position.clone();
                let applied =
                    tokio::time::timeout(self.timeout, position.wait_for(|p| p.seq >= seq))
                        .await
                        .is_ok_and(|waited| waited.is_ok());
                if !applied {
                    return Err(Error::Timeout(
                        "this node to apply the delete (its owner has deleted the session)",
                    ));
                }
                Ok(Some(Deleted {
                    session_key: session_key.to_string(),
                    entries,
                    pending_messages,
                }))
            }
            DeleteAnswer::NotFound => Ok(None),
            DeleteAnswer::Busy => Err(Error::Conflict(format!(
                "session {session_key:?} is running a turn; retry when it has finished"
            ))),
            DeleteAnswer::Failed { reason } => Err(Error::Replication(reason)),
        }
    }
}

impl ClusterDeletes for DeleteClient {
    fn delete<'a>(&'a self, session_key: &'a str) -> BoxFuture<'a, Result<Option<Deleted>, Error>> {
        Box::pin(self.delete_session(session_key))
    }
}

/// Answers the deletes of the partitions this node owns, one at a time, until aborted. A
/// request for a partition it does not own gets no answer (its owner answers).
pub(super) async fn serve(client: Client, runtime: Runtime, changelog: Arc<Changelog>) {
    let mut requests = match client.subscribe(DELETE_SUBJECTS).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot subscribe to deletes: this node's partitions answer none");
            return;
        }
    };
    while let Some(request) = requests.next().await {
        let (Some(partition), Some(reply)) = (
            partition_of_subject(&request.subject),
            request.reply.clone(),
        ) else {
            continue;
        };
        let Some(answer) = answer(&runtime, &changelog, partition, &request.payload).await else {
            continue;
        };
        let body = match serde_json::to_vec(&answer) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a delete's answer");
                continue;
            }
        };
        if let Err(e) = client.publish(reply, Bytes::from(body)).await {
            tracing::warn!(partition, error = %e, "could not answer a delete");
        }
    }
}

/// The owner's handling of one delete of `partition`; `None` when this node does not own it.
async fn answer(
    runtime: &Runtime,
    changelog: &Changelog,
    partition: Partition,
    payload: &[u8],
) -> Option<DeleteAnswer> {
    let failed = |reason: String| Some(DeleteAnswer::Failed { reason });
    let request: DeleteRequest = match serde_json::from_slice(payload) {
        Ok(r) => r,
        Err(e) => return failed(format!("undecodable delete request: {e}")),
    };
    let key = request.session_key;
    if changelog.partition_of(&key) != partition {
        return failed(format!("session {key:?} is not in partition {partition}"));
    }
    // Held until the local delete is done: no append of the partition comes between.
    let mut lock = changelog.lock(partition).await?;
    match runtime.discard_for_delete(&key).await {
        Ok(()) => {}
        Err(Error::Conflict(_)) => return Some(DeleteAnswer::Busy),
        Err(e) => return failed(format!("could not stop the session's lane: {e}")),
    }
    match runtime.stores_session(&key) {
        Ok(true) => {}
        Ok(false) => return Some(DeleteAnswer::NotFound),
        Err(e) => return failed(format!("could not read the session: {e}")),
    }
    let seq = match changelog.append_delete(&mut lock, &key).await {
        Ok(seq) => seq,
        // No longer the owner: the new one answers (or nobody, and the asker retries).
        Err(ReplicationError::Fenced { .. }) => return None,
        Err(ReplicationError::Failed(reason)) => return failed(reason),
    };
    let deleted = match runtime.delete_stored(&key).await {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(session_key = %key, seq, error = %e, "the delete is in the changelog but this owner could not delete its copy");
            return failed(format!(
                "the delete is in the changelog, but its owner could not delete its copy: {e}"
            ));
        }
    };
    changelog.drop_held(&key).await;
    drop(lock);
    let (entries, pending_messages) = deleted.map_or((0, 0), |d| (d.entries, d.pending_messages));
    Some(DeleteAnswer::Deleted {
        seq,
        entries,
        pending_messages,
    })
}
