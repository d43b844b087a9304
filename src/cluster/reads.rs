//! Session reads across nodes. A node keeps only the partitions it replicates (`follower`),
//! so a read of a session in another partition ([`ReadClient`]) is asked of that partition's
//! owner over core NATS (request-reply on [`read_subject`]; every node subscribes, only the
//! current owner answers — [`serve`]), which answers with the JSON the API shows. The owner,
//! not a standby: it has committed every turn whose reply it published, so a client that got
//! an answer on one node reads that turn on any node.

use std::sync::Arc;
use std::time::Duration;

use async_nats::client::RequestErrorKind;
use async_nats::Client;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use super::changelog::Changelog;
use super::follower::Progress;
use super::names::{partition_of_subject, read_subject, READ_SUBJECTS};
use super::partition_of;
use super::record::ReadAnswer;
use crate::error::Error;
use crate::runtime::{ClusterReads, Runtime, SessionRead};

/// How long a node waits for the owner's answer to a read. A read is one sled lookup there;
/// longer means the owner is gone or moving, and the client had better retry.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Forwarded reads one node answers at once; more wait in the subscription's buffer.
const MAX_CONCURRENT_READS: usize = 32;

/// A node's way to read the sessions it does not keep.
pub(super) struct ReadClient {
    client: Client,
    partitions: u32,
    /// The follower's progress: which partitions this node keeps.
    position: watch::Receiver<Progress>,
}

impl ReadClient {
    /// Asks through `client`; `position` is this node's follower's.
    pub(super) fn new(client: Client, partitions: u32, position: watch::Receiver<Progress>) -> Self {
        Self {
            client,
            partitions,
            position,
        }
    }

    async fn ask(&self, read: &SessionRead) -> Result<Option<Value>, Error> {
        let partition = partition_of(&read.session_key(), self.partitions);
        let body = serde_json::to_vec(read)
            .map_err(|e| Error::Replication(format!("cannot encode the read: {e}")))?;
        let request = async_nats::Request::new()
            .payload(Bytes::from(body))
            .timeout(Some(READ_TIMEOUT));
        let answer = self
            .client
            .send_request(read_subject(partition), request)
            .await
            .map_err(|e| {
                Error::Replication(match e.kind() {
                    RequestErrorKind::NoResponders | RequestErrorKind::TimedOut => format!(
                        "partition {partition}'s owner did not answer the read (the partition \
                         may be moving); retry"
                    ),
                    _ => format!("the read did not reach partition {partition}'s owner: {e}"),
                })
            })?;
        let answer: ReadAnswer = serde_json::from_slice(&answer.payload).map_err(|e| {
            Error::Replication(format!(
                "undecodable answer from partition {partition}'s owner: {e}"
            ))
        })?;
        match answer {
            ReadAnswer::Found { body } => Ok(Some(body)),
            ReadAnswer::NotFound => Ok(None),
            ReadAnswer::Failed { reason } => Err(Error::Replication(reason)),
        }
    }
}

impl ClusterReads for ReadClient {
    fn keeps(&self, session_key: &str) -> bool {
        let partition = partition_of(session_key, self.partitions);
        self.position.borrow().followed.contains(&partition)
    }

    fn read<'a>(&'a self, read: &'a SessionRead) -> BoxFuture<'a, Result<Option<Value>, Error>> {
        Box::pin(self.ask(read))
    }
}

/// Answers the reads of the partitions this node owns (a tenure begun: caught up) until
/// aborted. A read of another partition gets no answer here (its owner answers).
pub(super) async fn serve(client: Client, runtime: Runtime, changelog: Arc<Changelog>) {
    let requests = match client.subscribe(READ_SUBJECTS).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot subscribe to reads: other nodes cannot read this node's partitions");
            return;
        }
    };
    requests
        .for_each_concurrent(MAX_CONCURRENT_READS, |request| {
            let (client, runtime, changelog) = (&client, &runtime, &changelog);
            async move {
                let (Some(partition), Some(reply)) =
                    (partition_of_subject(&request.subject), request.reply)
                else {
                    return;
                };
                if !changelog.owns(partition) {
                    return;
                }
                let answer = answer(runtime, changelog, partition, &request.payload);
                let body = match serde_json::to_vec(&answer) {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode a read's answer");
                        return;
                    }
                };
                if let Err(e) = client.publish(reply, Bytes::from(body)).await {
                    tracing::debug!(partition, error = %e, "could not answer a read");
                }
            }
        })
        .await;
}

/// The owner's answer to one read of `partition`.
fn answer(runtime: &Runtime, changelog: &Changelog, partition: u32, payload: &[u8]) -> ReadAnswer {
    let read: SessionRead = match serde_json::from_slice(payload) {
        Ok(r) => r,
        Err(e) => {
            return ReadAnswer::Failed {
                reason: format!("undecodable read request: {e}"),
            }
        }
    };
    if changelog.partition_of(&read.session_key()) != partition {
        return ReadAnswer::Failed {
            reason: format!("that session is not in partition {partition}"),
        };
    }
    match runtime.read_here(&read) {
        Ok(Some(body)) => ReadAnswer::Found { body },
        Ok(None) => ReadAnswer::NotFound,
        Err(e) => ReadAnswer::Failed {
            reason: e.to_string(),
        },
    }
}
