//! Session reads across nodes. A node keeps only the partitions it replicates (`follower`),
//! so a read of a session in another partition, or in one it is still catching up with,
//! ([`ReadClient`]) is asked over core NATS (request-reply on [`read_subject`]); every node
//! subscribes and those that keep the partition and have caught up answer ([`serve`]) with
//! the JSON the API shows; the first answer wins. Any replica rather than only the owner, so
//! reads go on while a dead owner's partition moves (its standby keeps it throughout). A
//! standby's copy may lag the owner's by its follower's delay, as reads on a replica always
//! could.

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
    pub(super) fn new(
        client: Client,
        partitions: u32,
        position: watch::Receiver<Progress>,
    ) -> Self {
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
                        "no node keeping partition {partition} answered the read (its \
                         replicas may be catching up); retry"
                    ),
                    _ => format!("the read did not reach partition {partition}'s replicas: {e}"),
                })
            })?;
        let answer: ReadAnswer = serde_json::from_slice(&answer.payload).map_err(|e| {
            Error::Replication(format!(
                "undecodable answer from a replica of partition {partition}: {e}"
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
        self.position.borrow().keeps(partition)
    }

    fn read<'a>(&'a self, read: &'a SessionRead) -> BoxFuture<'a, Result<Option<Value>, Error>> {
        Box::pin(self.ask(read))
    }
}

/// Answers the reads of the partitions this node keeps and has caught up with (by its
/// follower's `position`) until aborted; the others get no answer here.
pub(super) async fn serve(
    client: Client,
    runtime: Runtime,
    changelog: Arc<Changelog>,
    position: watch::Receiver<Progress>,
) {
    let requests = match client.subscribe(READ_SUBJECTS).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot subscribe to reads: other nodes cannot read this node's partitions");
            return;
        }
    };
    requests
        .for_each_concurrent(MAX_CONCURRENT_READS, |request| {
            let (client, runtime, changelog, position) = (&client, &runtime, &changelog, &position);
            async move {
                let (Some(partition), Some(reply)) =
                    (partition_of_subject(&request.subject), request.reply)
                else {
                    return;
                };
                if !position.borrow().keeps(partition) {
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

/// A replica's answer to one read of `partition`.
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
