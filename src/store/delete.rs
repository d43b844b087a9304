//! Deleting a session: its record, its transcript and its unconsumed inbox entries go in one
//! transaction, so a reader sees the session whole or not at all.

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::{keys, Store};
use crate::error::StoreError;

/// How often a delete is retried when a turn commits to the session between reading its keys
/// and the transaction.
const MAX_DELETE_ATTEMPTS: usize = 5;

/// What a delete removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionDeletion {
    /// Transcript entries removed.
    pub entries: u64,
    /// Unconsumed inbox entries removed.
    pub pending: u64,
    /// The group-commit ticket to wait on for durability.
    pub ticket: u64,
}

/// Why the transaction gave up: the session changed after its keys were read.
struct Changed;

impl Store {
    /// Deletes everything stored for `session_key`. Returns `None` if there was nothing. The
    /// caller makes sure no turn runs for the session (a turn that commits anyway recreates
    /// it with its own entries, which is consistent).
    pub fn delete_session(&self, session_key: &str) -> Result<Option<SessionDeletion>, StoreError> {
        // A cold session's segment goes without a thaw (which would write its whole
        // transcript first, even with the disk full); a stale cold copy of a hot session
        // (sled won after a crash) goes too, so it cannot come back.
        let cold = self.take_cold(session_key)?;
        // Its queued messages go too: no thaw is owed any more.
        self.settle_thaw(session_key);
        let deleted = self.delete_session_records(session_key)?;
        let deleted = deleted.or_else(|| {
            cold.map(|record| SessionDeletion {
                entries: record.entries,
                pending: 0,
                ticket: self.inner().commit.ticket(),
            })
        });
        if deleted.is_some() {
            // After the write gate is released: this takes it per batch.
            self.delete_channel_messages(session_key)?;
        }
        self.delete_session_instructions(session_key)?;
        self.delete_thread_starter(session_key)?;
        Ok(deleted)
    }

    fn delete_session_records(
        &self,
        session_key: &str,
    ) -> Result<Option<SessionDeletion>, StoreError> {
        let _write = self.write_gate();
        let inner = self.inner();
        for _ in 0..MAX_DELETE_ATTEMPTS {
            let record = inner
                .sessions
                .get(session_key)
                .map_err(StoreError::sled("reading a session"))?;
            let mut index_key = None;
            let mut decoded = None;
            let transcript_keys = match &record {
                Some(bytes) => {
                    let r: super::SessionRecord = super::decode("sessions", bytes)?;
                    index_key = Some(super::by_updated::key(r.updated_at_ms, session_key));
                    decoded = Some(r.clone());
                    inner
                        .transcript
                        .scan_prefix(keys::transcript_prefix(r.id))
                        .keys()
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(StoreError::sled("listing a transcript"))?
                }
                None => Vec::new(),
            };
            let mut inbox_prefix = keys::inbox_key(session_key, 0);
            inbox_prefix.truncate(session_key.len() + 1);
            let inbox_keys = inner
                .inbox
                .scan_prefix(&inbox_prefix)
                .keys()
                .collect::<Result<Vec<_>, _>>()
                .map_err(StoreError::sled("listing the inbox"))?;
            if record.is_none() && inbox_keys.is_empty() {
                return Ok(None);
            }
            let result = (
                &inner.sessions,
                &inner.transcript,
                &inner.inbox,
                &inner.by_updated,
            )
                .transaction(|(sessions, transcript, inbox, by_updated)| {
                    if sessions.get(session_key)? != record {
                        return Err(ConflictableTransactionError::Abort(Changed));
                    }
                    sessions.remove(session_key.as_bytes())?;
                    if let Some(k) = &index_key {
                        by_updated.remove(k.as_slice())?;
                    }
                    for k in &transcript_keys {
                        transcript.remove(k)?;
                    }
                    let (mut pending, mut pending_bytes) = (0u64, 0u64);
                    for k in &inbox_keys {
                        if let Some(old) = inbox.remove(k)? {
                            pending += 1;
                            pending_bytes += (k.len() + old.len()) as u64;
                        }
                    }
                    Ok((pending, pending_bytes))
                });
            match result {
                Ok((pending, pending_bytes)) => {
                    self.shared.meter.sub_inbox(pending_bytes);
                    self.shared.totals.replace(decoded.as_ref(), None);
                    let removed = usize::try_from(pending).unwrap_or(usize::MAX);
                    let _ = self.shared.queued.fetch_update(
                        std::sync::atomic::Ordering::Relaxed,
                        std::sync::atomic::Ordering::Relaxed,
                        |q| Some(q.saturating_sub(removed)),
                    );
                    return Ok(Some(SessionDeletion {
                        entries: transcript_keys.len() as u64,
                        pending,
                        ticket: inner.commit.ticket(),
                    }));
                }
                Err(TransactionError::Abort(Changed)) => continue,
                Err(TransactionError::Storage(source)) => {
                    return Err(StoreError::Sled {
                        context: "deleting a session",
                        source,
                    })
                }
            }
        }
        Err(StoreError::Flush(format!(
            "session {session_key:?} kept changing; delete gave up after {MAX_DELETE_ATTEMPTS} attempts"
        )))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::StorageConfig;
    use crate::store::tests::{entry, record};
    use crate::store::{EntryKind, Store, TurnCommit};

    #[tokio::test]
    async fn delete_removes_record_transcript_and_pending_inbox() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StorageConfig {
            data_dir: dir.path().into(),
            ..StorageConfig::default()
        })
        .unwrap();
        let (first, _) = store.enqueue("k", record("1")).unwrap();
        store
            .commit_turn(&TurnCommit {
                session_key: "k".to_string(),
                entries: vec![
                    entry(EntryKind::User, "a"),
                    entry(EntryKind::Assistant, "b"),
                ],
                consumed: vec![first.seq],
                now_ms: 5,
                channel_messages: vec![],
                replica: None,
            })
            .unwrap();
        store.enqueue("k", record("2")).unwrap();
        store.enqueue("k2", record("3")).unwrap();
        store.enqueue("k2", record("3")).unwrap();
        assert_eq!(store.queued(), 3);
        let gone = store.delete_session("k").unwrap().unwrap();
        assert_eq!((gone.entries, gone.pending), (2, 1));
        assert!(store.session("k").unwrap().is_none());
        assert!(store.pending("k", 0, 10).unwrap().is_empty());
        assert_eq!(
            store.pending("k2", 0, 10).unwrap().len(),
            2,
            "others untouched"
        );
        assert_eq!(store.queued(), 2);
        assert!(store.delete_session("k").unwrap().is_none());
        store.close().await.unwrap();
    }
}
