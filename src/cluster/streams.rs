//! The two replicated streams of a cluster, created by the first node that starts (and
//! opened by the rest): the inboxes and the changelogs (see [`super::names`]).

use std::time::Duration;

use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy, StorageType, Stream};
use async_nats::jetstream::Context;

use super::error::ClusterError;
use super::lease::REPLICAS;
use super::names::{INBOX_STREAM, INBOX_SUBJECTS, LOG_STREAM, LOG_SUBJECTS};

/// Most unanswered messages the inbox stream holds across all partitions; past it a publish
/// is refused (the client gets `503`) rather than growing the stream without bound.
pub(super) const MAX_INBOX_MESSAGES: i64 = 1_000_000;

/// Largest message either stream takes: NATS's default `max_payload` (a message is at most
/// tens of KiB after validation; a turn's entries somewhat more).
pub(super) const MAX_RECORD_BYTES: i32 = 1024 * 1024;

/// Tries at opening a stream: the first nodes of a new cluster may ask before JetStream has
/// elected its meta leader, and a request then times out.
const OPEN_ATTEMPTS: u32 = 20;

/// Pause between those tries.
const OPEN_RETRY: Duration = Duration::from_millis(500);

/// The inbox stream: a work queue, so a message is gone once its owner acknowledged it (its
/// answer is in the changelog), and the stream holds only what is unanswered. Its message-id
/// window drops a redelivered message (a platform's retry) for `duplicate_window`.
pub(super) async fn inbox(
    js: &Context,
    duplicate_window: Duration,
) -> Result<Stream, ClusterError> {
    open(
        js,
        stream::Config {
            name: INBOX_STREAM.into(),
            subjects: vec![INBOX_SUBJECTS.into()],
            retention: RetentionPolicy::WorkQueue,
            discard: DiscardPolicy::New,
            max_messages: MAX_INBOX_MESSAGES,
            max_message_size: MAX_RECORD_BYTES,
            storage: StorageType::File,
            num_replicas: REPLICAS,
            duplicate_window,
            ..Default::default()
        },
    )
    .await
}

/// The changelog stream: every turn of every session, by partition, kept until the
/// partitions' snapshots cover it (`snapshots` purges below their floor): with the snapshot,
/// it is what a node restores a partition from.
pub(super) async fn changelog(js: &Context) -> Result<Stream, ClusterError> {
    open(
        js,
        stream::Config {
            name: LOG_STREAM.into(),
            subjects: vec![LOG_SUBJECTS.into()],
            retention: RetentionPolicy::Limits,
            max_message_size: MAX_RECORD_BYTES,
            storage: StorageType::File,
            num_replicas: REPLICAS,
            allow_direct: true,
            ..Default::default()
        },
    )
    .await
}

async fn open(js: &Context, config: stream::Config) -> Result<Stream, ClusterError> {
    let mut attempt = 1;
    loop {
        match js.get_or_create_stream(config.clone()).await {
            Ok(stream) => return Ok(stream),
            Err(e) if attempt < OPEN_ATTEMPTS => {
                tracing::info!(stream = %config.name, error = %e, attempt, "opening the stream: retrying");
                attempt += 1;
                tokio::time::sleep(OPEN_RETRY).await;
            }
            Err(e) => {
                return Err(ClusterError::Stream {
                    stream: config.name,
                    source: Box::new(e),
                })
            }
        }
    }
}
