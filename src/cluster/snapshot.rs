//! A partition's snapshot, as plain data: its sessions (and its scheduled jobs' latest runs)
//! as of a changelog sequence, folded from the previous snapshot and the records after it
//! exactly as a follower applies them ([`PartitionState::apply`]); its encoding into bounded
//! chunks and their reassembly, checked ([`split`], [`reassemble`]); and which changelog
//! records every partition's newest snapshot covers ([`purge_floor`]). The NATS side
//! (`snapshots`) writes, reads and purges.
//!
//! Built from the changelog rather than from the owner's sled: the owner's copy may be
//! compacted, and a turn may be appended and not yet committed there, so only the changelog
//! says exactly what a follower has at a given sequence.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::record::LogRecord;
use super::Partition;
use crate::schedules::RunChange;
use crate::store::TranscriptEntry;

/// Bytes per stored chunk: below NATS's default `max_payload` (1 MiB) with room for headers.
pub(super) const SNAPSHOT_CHUNK_BYTES: usize = 256 * 1024;

/// Largest encoded snapshot of one partition. A snapshot is built in memory, so this bounds
/// that memory; a partition past it is not snapshotted (an error is logged, and its
/// changelog is then not purged: it pins the floor).
pub(super) const MAX_SNAPSHOT_BYTES: usize = 256 * 1024 * 1024;

/// Most recorded run changes kept per scheduled job (its latest start and what followed).
const MAX_RUN_CHANGES_PER_JOB: usize = 4;

/// What a partition's followers hold, as of some changelog sequence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PartitionState {
    /// Every session of the partition: its transcript entries, oldest first.
    pub sessions: BTreeMap<String, Vec<TranscriptEntry>>,
    /// Per scheduled job of the partition's sessions: its latest recorded start and the
    /// changes after it, in order (older runs are not kept).
    #[serde(default)]
    pub runs: BTreeMap<String, Vec<RunChange>>,
}

impl PartitionState {
    /// Applies one changelog record of the partition, as a follower does.
    pub(super) fn apply(&mut self, record: LogRecord) {
        match record {
            LogRecord::Tenure { .. } => {}
            LogRecord::Turn { turn, .. } => {
                let turn = *turn;
                self.sessions
                    .entry(turn.session_key)
                    .or_default()
                    .extend(turn.entries);
            }
            LogRecord::Delete { session_key, .. } => {
                self.sessions.remove(&session_key);
            }
            LogRecord::ScheduleRun { change, .. } => {
                let (job, started) = match &change {
                    RunChange::Started { job_id, .. } => (job_id.clone(), true),
                    RunChange::Ended { job_id, .. } => (job_id.clone(), false),
                };
                let changes = self.runs.entry(job).or_default();
                if started {
                    changes.clear();
                }
                changes.push(change);
                if changes.len() > MAX_RUN_CHANGES_PER_JOB {
                    changes.remove(0);
                }
            }
        }
    }

    /// Whether a record changes the state (a tenure record does not).
    pub(super) fn changes(record: &LogRecord) -> bool {
        !matches!(record, LogRecord::Tenure { .. })
    }
}

/// Where a partition's newest snapshot is and what it holds (the value of its head key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SnapshotHead {
    /// The changelog sequence it is as of: every record of the partition up to it is in it,
    /// none after.
    pub seq: u64,
    /// The slot (0 or 1) its chunks are in: a new snapshot writes the other one, an
    /// unchanged partition's next snapshot keeps this one.
    pub chunks_id: u64,
    /// How many chunks.
    pub chunks: u32,
    /// The encoded state's length.
    pub bytes: u64,
    /// CRC-32 of the encoded state.
    pub crc32: u32,
    /// Sessions in it.
    pub sessions: u64,
    /// The owner that wrote it, and its tenure's epoch.
    pub node: String,
    /// Its tenure's epoch.
    pub epoch: u64,
}

/// A snapshot that cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    /// A chunk the head names is not there (deleted by a newer snapshot meanwhile, or lost).
    #[error("partition {partition}'s snapshot at {seq} lacks chunk {index} of {chunks}")]
    MissingChunk {
        /// The partition.
        partition: Partition,
        /// The snapshot's sequence.
        seq: u64,
        /// The missing chunk.
        index: u32,
        /// How many there should be.
        chunks: u32,
    },
    /// The chunks do not add up to what the head says.
    #[error("partition {partition}'s snapshot at {seq} is damaged: {reason}")]
    Damaged {
        /// The partition.
        partition: Partition,
        /// The snapshot's sequence.
        seq: u64,
        /// What does not match.
        reason: String,
    },
    /// The partition's state encodes to more than [`MAX_SNAPSHOT_BYTES`].
    #[error(
        "partition {partition}'s snapshot would be {bytes} bytes (at most {MAX_SNAPSHOT_BYTES})"
    )]
    TooLarge {
        /// The partition.
        partition: Partition,
        /// Its encoded size.
        bytes: usize,
    },
    /// A changelog record or the state could not be encoded or decoded.
    #[error("partition {partition}'s snapshot: {reason}")]
    Codec {
        /// The partition.
        partition: Partition,
        /// Why.
        reason: String,
    },
    /// A NATS request failed (it may be retried).
    #[error("partition {partition}'s snapshot: {op}: {source}")]
    Nats {
        /// The partition.
        partition: Partition,
        /// What was being done.
        op: &'static str,
        /// The client's error.
        source: super::NatsError,
    },
    /// This node has no tenure of the partition (it lost it since it listed it).
    #[error("partition {partition} is not owned here")]
    NotOwner {
        /// The partition.
        partition: Partition,
    },
    /// Another owner wrote the partition's head meanwhile, or this node's tenure ended.
    #[error("partition {partition}'s snapshot was not written: {reason}")]
    Superseded {
        /// The partition.
        partition: Partition,
        /// Why.
        reason: &'static str,
    },
}

/// The encoded state of `partition`, checked against [`MAX_SNAPSHOT_BYTES`].
pub(super) fn encode(
    partition: Partition,
    state: &PartitionState,
) -> Result<Vec<u8>, SnapshotError> {
    let bytes = serde_json::to_vec(state).map_err(|e| SnapshotError::Codec {
        partition,
        reason: e.to_string(),
    })?;
    if bytes.len() > MAX_SNAPSHOT_BYTES {
        return Err(SnapshotError::TooLarge {
            partition,
            bytes: bytes.len(),
        });
    }
    Ok(bytes)
}

/// `bytes` in chunks of at most `chunk` bytes (at least one chunk, empty for an empty input).
pub(super) fn split(bytes: &[u8], chunk: usize) -> Vec<&[u8]> {
    if bytes.is_empty() {
        return vec![bytes];
    }
    bytes.chunks(chunk.max(1)).collect()
}

/// The state `chunks` (in order; `None`: not found) of the snapshot `head` of `partition`
/// hold, after checking their number, length and CRC.
pub(super) fn reassemble(
    partition: Partition,
    head: &SnapshotHead,
    chunks: Vec<Option<Vec<u8>>>,
) -> Result<PartitionState, SnapshotError> {
    let damaged = |reason: String| SnapshotError::Damaged {
        partition,
        seq: head.seq,
        reason,
    };
    if chunks.len() != head.chunks as usize {
        return Err(damaged(format!(
            "{} chunks read, the head names {}",
            chunks.len(),
            head.chunks
        )));
    }
    let mut bytes = Vec::with_capacity(
        usize::try_from(head.bytes)
            .unwrap_or(0)
            .min(MAX_SNAPSHOT_BYTES),
    );
    for (index, chunk) in chunks.into_iter().enumerate() {
        let Some(chunk) = chunk else {
            return Err(SnapshotError::MissingChunk {
                partition,
                seq: head.seq,
                index: u32::try_from(index).unwrap_or(u32::MAX),
                chunks: head.chunks,
            });
        };
        if bytes.len() + chunk.len() > MAX_SNAPSHOT_BYTES {
            return Err(damaged("longer than any snapshot may be".into()));
        }
        bytes.extend_from_slice(&chunk);
    }
    if bytes.len() as u64 != head.bytes {
        return Err(damaged(format!(
            "{} bytes, the head says {}",
            bytes.len(),
            head.bytes
        )));
    }
    let crc = crc32fast::hash(&bytes);
    if crc != head.crc32 {
        return Err(damaged(format!(
            "CRC-32 {crc:08x}, the head says {:08x}",
            head.crc32
        )));
    }
    serde_json::from_slice(&bytes).map_err(|e| damaged(format!("undecodable: {e}")))
}

/// The changelog sequence below which every record is covered by its partition's newest
/// snapshot, given each partition's newest snapshot sequence (`None`: it has none yet, so
/// nothing may go). Records below the floor may be purged; the floor itself is kept, so no
/// partition's last record goes (an owner's next append names it as the subject's last).
pub(super) fn purge_floor(heads: &[Option<u64>]) -> Option<u64> {
    if heads.is_empty() {
        return None;
    }
    heads
        .iter()
        .copied()
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .min()
        .filter(|floor| *floor > 1)
}

/// Whether a copy of a partition applied up to `applied` may lack records of a hole the
/// changelog has before `next` (records purged before they were read here).
pub(super) fn behind_hole(applied: u64, next: u64) -> bool {
    applied.saturating_add(1) < next
}

/// Whether that copy must be loaded from the partition's newest snapshot (as of `head`, if it
/// has one): the purged records it lacks are all below the snapshot (a purge never goes past
/// any partition's newest snapshot), so a snapshot newer than the copy holds them.
pub(super) fn must_load(applied: u64, next: u64, head: Option<u64>) -> bool {
    behind_hole(applied, next) && head.is_some_and(|seq| seq > applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::ReplicatedTurn;
    use crate::replies::Reply;

    fn turn(key: &str, text: &str) -> LogRecord {
        LogRecord::Turn {
            id: "n1/1/1".into(),
            node: "n1".into(),
            epoch: 1,
            turn: Box::new(ReplicatedTurn {
                session_key: key.into(),
                entries: vec![TranscriptEntry::user(text, 3, 1).with_message_id("m1")],
                reply: Reply {
                    session_key: key.into(),
                    text: "ok".into(),
                    in_reply_to: vec!["m1".into()],
                    seq: 0,
                    error: false,
                    route: None,
                    tool_calls: Vec::new(),
                    usage: None,
                    finish_reason: None,
                    model: None,
                    error_kind: None,
                },
            }),
        }
    }

    fn head_of(bytes: &[u8], chunks: u32) -> SnapshotHead {
        SnapshotHead {
            seq: 9,
            chunks_id: 9,
            chunks,
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(bytes),
            sessions: 0,
            node: "n1".into(),
            epoch: 1,
        }
    }

    #[test]
    fn the_state_follows_turns_and_deletes_like_a_follower() {
        let mut state = PartitionState::default();
        state.apply(LogRecord::Tenure {
            node: "n1".into(),
            epoch: 1,
        });
        state.apply(turn("a", "one"));
        state.apply(turn("b", "two"));
        state.apply(turn("a", "three"));
        state.apply(LogRecord::Delete {
            id: "n1/1/4".into(),
            node: "n1".into(),
            epoch: 1,
            session_key: "b".into(),
        });
        assert_eq!(state.sessions.len(), 1);
        let texts: Vec<String> = state.sessions["a"]
            .iter()
            .map(|e| e.text.to_string())
            .collect();
        assert_eq!(texts, ["one", "three"]);
        assert!(!PartitionState::changes(&LogRecord::Tenure {
            node: "n".into(),
            epoch: 2
        }));
        assert!(PartitionState::changes(&turn("a", "x")));
    }

    #[test]
    fn chunks_reassemble_to_the_state_and_a_damaged_or_missing_one_is_an_error() {
        let mut state = PartitionState::default();
        for i in 0..50 {
            state.apply(turn(&format!("s{i}"), &"x".repeat(100)));
        }
        let bytes = encode(0, &state).unwrap();
        let chunks: Vec<Vec<u8>> = split(&bytes, 1000)
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        assert!(chunks.len() > 2 && chunks.iter().all(|c| c.len() <= 1000));
        let head = head_of(&bytes, chunks.len() as u32);
        let whole = chunks.iter().cloned().map(Some).collect();
        assert_eq!(reassemble(0, &head, whole).unwrap(), state);

        let mut missing: Vec<Option<Vec<u8>>> = chunks.iter().cloned().map(Some).collect();
        missing[1] = None;
        let err = reassemble(0, &head, missing).unwrap_err();
        assert!(
            matches!(err, SnapshotError::MissingChunk { index: 1, .. }),
            "{err}"
        );

        let mut flipped: Vec<Option<Vec<u8>>> = chunks.iter().cloned().map(Some).collect();
        if let Some(Some(c)) = flipped.get_mut(2) {
            c[0] ^= 0xff;
        }
        let err = reassemble(0, &head, flipped).unwrap_err();
        assert!(err.to_string().contains("CRC-32"), "{err}");

        let short: Vec<Option<Vec<u8>>> = chunks.iter().take(2).cloned().map(Some).collect();
        let err = reassemble(0, &head, short).unwrap_err();
        assert!(err.to_string().contains("the head names"), "{err}");

        let mut truncated: Vec<Option<Vec<u8>>> = chunks.iter().cloned().map(Some).collect();
        if let Some(Some(c)) = truncated.last_mut() {
            c.pop();
        }
        let err = reassemble(0, &head, truncated).unwrap_err();
        assert!(err.to_string().contains("the head says"), "{err}");

        let empty = encode(0, &PartitionState::default()).unwrap();
        let one = split(&empty, 1000);
        assert_eq!(one.len(), 1);
        assert_eq!(
            split(&[], 1000).len(),
            1,
            "an empty input is one empty chunk"
        );
    }

    #[test]
    fn a_copy_is_loaded_only_behind_a_hole_and_from_a_newer_snapshot() {
        // The changelog goes on at 50 after a hole.
        assert!(must_load(0, 50, Some(40)), "a wiped copy");
        assert!(must_load(10, 50, Some(60)), "a snapshot past the hole");
        assert!(
            !must_load(49, 50, Some(60)),
            "applied up to the hole: nothing missing"
        );
        assert!(
            !must_load(45, 50, Some(40)),
            "the copy is newer than the snapshot"
        );
        assert!(
            !must_load(10, 50, None),
            "nothing was purged without a snapshot"
        );
        assert!(!behind_hole(u64::MAX, 0));
        assert!(behind_hole(0, 2) && !behind_hole(0, 1));
    }

    #[test]
    fn the_floor_is_the_oldest_newest_snapshot_and_a_partition_without_one_pins_the_start() {
        assert_eq!(purge_floor(&[Some(40), Some(12), Some(90)]), Some(12));
        assert_eq!(purge_floor(&[Some(40), None, Some(90)]), None);
        assert_eq!(purge_floor(&[]), None);
        assert_eq!(purge_floor(&[Some(1), Some(5)]), None, "nothing below 1");
        assert_eq!(purge_floor(&[Some(7)]), Some(7));
    }
}
