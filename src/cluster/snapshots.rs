//! Per-partition snapshots in JetStream, so the changelog stays bounded: the owner of a
//! partition writes one periodically (`[cluster] snapshot_interval_ms`) and on demand
//! (`turnstile cluster snapshot`, a core NATS request on [`SNAPSHOT_SUBJECT`] every node
//! answers); then any node purges the changelog below the floor every partition's newest
//! snapshot covers; a node that must follow a partition past a purged stretch loads the
//! snapshot instead (`follower`).
//!
//! Stored in the 3-replica KV bucket [`SNAPSHOTS_BUCKET`]: per partition a head
//! (`head.<p>`, a `SnapshotHead`) naming chunks `chunk.<p>.<slot>.<i>` of at most
//! `SNAPSHOT_CHUNK_BYTES`, in one of two slots. A new snapshot writes its chunks into the
//! slot the head does not name, then moves the head by compare-and-set on its revision (one
//! at a time, never backwards); so the keys are bounded (two snapshots per partition at
//! most), and a reader still on the older head meets a CRC mismatch, not a wrong state, if
//! the slot is rewritten under it (it reads the head again). Only the owner writes: under its
//! partition's append lock it appends a marker record (a tenure record restating its tenure)
//! that the snapshot is taken as of, so the marker is the partition's last record and an
//! idle partition's snapshot still moves forward with the log. The state itself is the
//! previous snapshot plus the partition's records after it (`PartitionState::apply`); a
//! partition with nothing but markers since keeps its chunks and only moves its head.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::kv::{self, Store};
use async_nats::jetstream::stream::Stream;
use async_nats::jetstream::Context;
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use super::changelog::Changelog;
use super::error::ClusterError;
use super::lease::REPLICAS;
use super::names::log_subject;
use super::record::LogRecord;
use super::snapshot::{
    encode, purge_floor, reassemble, split, PartitionState, SnapshotError, SnapshotHead,
    SNAPSHOT_CHUNK_BYTES,
};
use super::Partition;

/// The KV bucket holding every partition's snapshot.
pub const SNAPSHOTS_BUCKET: &str = "turnstile_snapshots";

/// The core NATS subject `turnstile cluster snapshot` asks every node on: each snapshots the
/// partitions it owns, purges, and answers a [`SnapshotReport`].
pub const SNAPSHOT_SUBJECT: &str = "turnstile.snapshot";

/// Longest wait for one changelog record while a snapshot reads its partition's records.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Heads read at once while computing the purge floor (one KV read per partition).
const HEAD_READS: usize = 16;

/// Largest value the bucket takes: a chunk and room to spare.
const MAX_VALUE_BYTES: i32 = (SNAPSHOT_CHUNK_BYTES + 4096) as i32;

/// What a node did when asked for snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotReport {
    /// The node.
    pub node: String,
    /// Partitions snapshotted: (partition, the sequence it is as of).
    pub taken: Vec<(Partition, u64)>,
    /// Partitions that failed, with why.
    pub failed: Vec<(Partition, String)>,
    /// The changelog's purge floor after this node's purge (`None`: some partition has no
    /// snapshot yet, nothing was purged).
    pub floor: Option<u64>,
}

fn head_key(partition: Partition) -> String {
    format!("head.{partition}")
}

fn chunk_key(partition: Partition, slot: u64, index: u32) -> String {
    format!("chunk.{partition}.{slot}.{index}")
}

fn nats(partition: Partition, op: &'static str) -> impl Fn(NatsBox) -> SnapshotError {
    move |source| SnapshotError::Nats {
        partition,
        op,
        source,
    }
}

type NatsBox = super::NatsError;

/// The snapshots of a cluster, as one node reads and writes them.
#[derive(Clone)]
pub(super) struct Snapshots {
    kv: Store,
    log: Stream,
    partitions: u32,
}

impl Snapshots {
    /// Opens (or creates) the bucket.
    pub(super) async fn open(
        js: &Context,
        log: Stream,
        partitions: u32,
    ) -> Result<Self, ClusterError> {
        let config = kv::Config {
            bucket: SNAPSHOTS_BUCKET.to_string(),
            description: "turnstile partition snapshots".into(),
            history: 1,
            max_value_size: MAX_VALUE_BYTES,
            num_replicas: REPLICAS,
            ..Default::default()
        };
        let mut attempt = 1;
        let kv = loop {
            let opened = match js.get_key_value(SNAPSHOTS_BUCKET).await {
                Ok(store) => Ok(store),
                Err(_) => js
                    .create_key_value(config.clone())
                    .await
                    .map_err(|e| Box::new(e) as NatsBox),
            };
            match opened {
                Ok(store) => break store,
                Err(e) if attempt < 20 => {
                    tracing::info!(error = %e, attempt, "opening the snapshots bucket: retrying");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(source) => {
                    return Err(ClusterError::Bucket {
                        bucket: SNAPSHOTS_BUCKET,
                        source,
                    })
                }
            }
        };
        Ok(Self {
            kv,
            log,
            partitions,
        })
    }

    /// The newest snapshot head of `partition` and its revision, if it has one.
    pub(super) async fn head(
        &self,
        partition: Partition,
    ) -> Result<Option<(SnapshotHead, u64)>, SnapshotError> {
        let entry = self
            .kv
            .entry(head_key(partition))
            .await
            .map_err(|e| nats(partition, "reading the head")(Box::new(e)))?;
        let Some(entry) = entry else { return Ok(None) };
        if entry.operation != kv::Operation::Put {
            return Ok(None);
        }
        let head = serde_json::from_slice(&entry.value).map_err(|e| SnapshotError::Damaged {
            partition,
            seq: 0,
            reason: format!("undecodable head: {e}"),
        })?;
        Ok(Some((head, entry.revision)))
    }

    /// The state `head` of `partition` holds.
    pub(super) async fn load(
        &self,
        partition: Partition,
        head: &SnapshotHead,
    ) -> Result<PartitionState, SnapshotError> {
        let mut chunks = Vec::with_capacity(head.chunks.min(4096) as usize);
        for index in 0..head.chunks {
            let chunk = self
                .kv
                .get(chunk_key(partition, head.chunks_id, index))
                .await
                .map_err(|e| nats(partition, "reading a chunk")(Box::new(e)))?;
            chunks.push(chunk.map(|b| b.to_vec()));
        }
        reassemble(partition, head, chunks)
    }

    /// Applies `partition`'s records after `after` up to `upto` to `state`; whether any
    /// changed it.
    async fn fold(
        &self,
        partition: Partition,
        state: &mut PartitionState,
        after: u64,
        upto: u64,
    ) -> Result<bool, SnapshotError> {
        let err = |op| nats(partition, op);
        let consumer = self
            .log
            .create_consumer(pull::OrderedConfig {
                filter_subject: log_subject(partition),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: after + 1,
                },
                ..Default::default()
            })
            .await
            .map_err(|e| err("reading the changelog")(Box::new(e)))?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| err("reading the changelog")(Box::new(e)))?;
        let mut changed = false;
        loop {
            let next = tokio::time::timeout(READ_TIMEOUT, messages.next())
                .await
                .map_err(|e| err("waiting for a changelog record")(Box::new(e)))?;
            let Some(message) = next else {
                return Err(err("reading the changelog")("the consumer ended".into()));
            };
            let message = message.map_err(|e| err("reading the changelog")(Box::new(e)))?;
            let seq = message
                .info()
                .map_err(|e| err("reading a record's sequence")(e))?
                .stream_sequence;
            if seq > upto {
                return Ok(changed);
            }
            let record: LogRecord =
                serde_json::from_slice(&message.payload).map_err(|e| SnapshotError::Codec {
                    partition,
                    reason: format!("changelog record {seq}: {e}"),
                })?;
            changed |= PartitionState::changes(&record);
            state.apply(record);
            if seq == upto {
                return Ok(changed);
            }
        }
    }

    /// Takes a snapshot of `partition`, which this node must own; the new head.
    pub(super) async fn take(
        &self,
        changelog: &Changelog,
        partition: Partition,
    ) -> Result<SnapshotHead, SnapshotError> {
        let superseded = |reason| SnapshotError::Superseded { partition, reason };
        let Some(mut lock) = changelog.lock(partition).await else {
            return Err(SnapshotError::NotOwner { partition });
        };
        let epoch = Changelog::lock_epoch(&lock);
        let before = Changelog::lock_last(&lock);
        let seq = changelog
            .append_marker(&mut lock)
            .await
            .map_err(|e| match e {
                crate::pipeline::ReplicationError::Fenced { .. } => {
                    superseded("the partition has a new owner")
                }
                other => nats(partition, "appending the marker")(Box::new(other)),
            })?;
        // Records after the marker are the next snapshot's: appends may go on.
        drop(lock);
        let current = self.head(partition).await?;
        // The state to write and the slot for it; `None`: unchanged since the current head.
        let fresh = match &current {
            // Nothing since the last snapshot but its own marker: only the head moves.
            Some((old, _)) if old.seq == before => None,
            Some((old, _)) => {
                let mut state = self.load(partition, old).await?;
                let changed = self.fold(partition, &mut state, old.seq, seq).await?;
                changed.then(|| (state, 1 - old.chunks_id.min(1)))
            }
            None => {
                let mut state = PartitionState::default();
                self.fold(partition, &mut state, 0, seq).await?;
                Some((state, 0))
            }
        };
        let mut head = match (fresh, &current) {
            (None, Some((old, _))) => SnapshotHead {
                node: changelog.node_id().to_string(),
                epoch,
                ..old.clone()
            },
            (fresh, _) => {
                let (state, slot) = fresh.unwrap_or_default();
                self.write_chunks(partition, &state, slot, changelog.node_id(), epoch)
                    .await?
            }
        };
        head.seq = seq;
        if !changelog.is_current(partition, epoch) {
            return Err(superseded("this node's tenure ended"));
        }
        let body = Bytes::from(serde_json::to_vec(&head).map_err(|e| SnapshotError::Codec {
            partition,
            reason: e.to_string(),
        })?);
        let written = match &current {
            Some((old, revision)) => {
                if old.seq >= seq {
                    return Err(superseded("a newer snapshot is there"));
                }
                self.kv
                    .update(head_key(partition), body, *revision)
                    .await
                    .map_err(|e| Box::new(e) as NatsBox)
            }
            None => self
                .kv
                .create(head_key(partition), body)
                .await
                .map_err(|e| Box::new(e) as NatsBox),
        };
        if let Err(e) = written {
            tracing::warn!(partition, error = %e, "snapshot head not moved");
            return Err(superseded("another snapshot moved the head first"));
        }
        Ok(head)
    }

    /// Writes `state` as chunks into `slot`; the head that names them (its `seq` is the
    /// caller's to set).
    async fn write_chunks(
        &self,
        partition: Partition,
        state: &PartitionState,
        slot: u64,
        node: &str,
        epoch: u64,
    ) -> Result<SnapshotHead, SnapshotError> {
        let bytes = encode(partition, state)?;
        let chunks = split(&bytes, SNAPSHOT_CHUNK_BYTES);
        for (index, chunk) in chunks.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            self.kv
                .put(
                    chunk_key(partition, slot, index),
                    Bytes::copy_from_slice(chunk),
                )
                .await
                .map_err(|e| nats(partition, "writing a chunk")(Box::new(e)))?;
        }
        Ok(SnapshotHead {
            seq: 0,
            chunks_id: slot,
            chunks: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
            sessions: state.sessions.len() as u64,
            node: node.to_string(),
            epoch,
        })
    }

    /// Purges the changelog below the floor every partition's newest snapshot covers; the
    /// floor (`None`: a partition has no snapshot yet, nothing is purged).
    pub(super) async fn purge(&self) -> Result<Option<u64>, SnapshotError> {
        let heads: Vec<Option<u64>> = futures_util::stream::iter(0..self.partitions)
            .map(|p| async move { self.head(p).await.map(|h| h.map(|(h, _)| h.seq)) })
            .buffered(HEAD_READS)
            .try_collect()
            .await?;
        let Some(floor) = purge_floor(&heads) else {
            return Ok(None);
        };
        self.log
            .purge()
            .sequence(floor)
            .await
            .map_err(|e| nats(0, "purging the changelog")(Box::new(e)))?;
        Ok(Some(floor))
    }

    /// Snapshots every partition `changelog` owns now, then purges: what a round does.
    pub(super) async fn round(&self, changelog: &Changelog) -> SnapshotReport {
        let mut report = SnapshotReport {
            node: changelog.node_id().to_string(),
            ..Default::default()
        };
        for p in changelog.owned_partitions() {
            match self.take(changelog, p).await {
                Ok(head) => report.taken.push((p, head.seq)),
                // Lost since it was listed: its new owner snapshots it.
                Err(SnapshotError::NotOwner { .. }) => {}
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "snapshot not taken");
                    report.failed.push((p, e.to_string()));
                }
            }
        }
        match self.purge().await {
            Ok(floor) => report.floor = floor,
            Err(e) => tracing::warn!(error = %e, "changelog not purged"),
        }
        report
    }
}

/// Takes snapshots every `interval` and whenever asked on [`SNAPSHOT_SUBJECT`] (answering
/// with this node's [`SnapshotReport`]), until aborted.
pub(super) async fn run(
    client: async_nats::Client,
    snapshots: Snapshots,
    changelog: std::sync::Arc<Changelog>,
    interval: Duration,
) {
    let mut asked = match client.subscribe(SNAPSHOT_SUBJECT).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "cannot hear snapshot requests; only periodic ones are taken");
            None
        }
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let reply = tokio::select! {
            _ = tick.tick() => None,
            message = async {
                match asked.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            } => match message {
                Some(m) => m.reply,
                None => {
                    asked = None;
                    continue;
                }
            },
        };
        let report = snapshots.round(&changelog).await;
        if let Some(reply) = reply {
            match serde_json::to_vec(&report) {
                Ok(body) => {
                    if let Err(e) = client.publish(reply, Bytes::from(body)).await {
                        tracing::warn!(error = %e, "could not answer a snapshot request");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not encode a snapshot report"),
            }
        }
    }
}

/// Asks every node of the cluster at `config.nats` for a snapshot round and collects the
/// answers that come within `wait` (`turnstile cluster snapshot`); stops early once
/// `expected` nodes answered.
pub async fn ask(
    config: &crate::config::ClusterConfig,
    expected: usize,
    wait: Duration,
) -> Result<Vec<SnapshotReport>, ClusterError> {
    let client = super::membership::connect_client(
        config,
        "turnstile cluster snapshot".into(),
        super::membership::request_timeout(Duration::from_millis(config.lease_ms)),
    )
    .await?;
    let inbox = client.new_inbox();
    let mut answers = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| ClusterError::Runtime(format!("cannot subscribe for answers: {e}")))?;
    client
        .publish_with_reply(SNAPSHOT_SUBJECT, inbox, Bytes::new())
        .await
        .map_err(|e| ClusterError::Runtime(format!("cannot ask for snapshots: {e}")))?;
    let deadline = tokio::time::Instant::now() + wait;
    let mut reports = Vec::new();
    while reports.len() < expected.max(1) {
        let Ok(Some(message)) = tokio::time::timeout_at(deadline, answers.next()).await else {
            break;
        };
        match serde_json::from_slice::<SnapshotReport>(&message.payload) {
            Ok(report) => reports.push(report),
            Err(e) => tracing::warn!(error = %e, "an undecodable snapshot report"),
        }
    }
    reports.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(reports)
}
