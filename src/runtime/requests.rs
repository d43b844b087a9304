//! The runtime's side of OpenAI-compatible requests: what they ask of their turns, the
//! session's request-level instructions, and the stored answer of a message a retried
//! request names again.

use std::sync::Arc;

use super::Runtime;
use crate::error::{Error, StoreError};
use crate::inbound::normalize_session_key;
use crate::model::ToolCall;
use crate::pipeline::Requests;
use crate::store::{EntryKind, Store, TranscriptEntry};

/// Most transcript entries read back, newest first, looking for a message's stored answer: a
/// retry comes seconds after its original, so its answer is among the newest entries.
pub(crate) const MAX_ANSWER_SCAN: usize = 256;

/// A message's stored answer (it travels between cluster nodes as JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct StoredAnswer {
    /// The reply's text (beside tool calls, possibly empty).
    pub text: String,
    /// Calls of client-side tools the turn stopped at.
    pub tool_calls: Vec<ToolCall>,
}

impl Runtime {
    /// What OpenAI-compatible requests ask of their turns (shared with the turn engine).
    pub(crate) fn requests(&self) -> &Arc<Requests> {
        self.inner.engine.requests()
    }

    /// Keeps `text` as the request-level system instructions of session `key`, durably, when
    /// they differ from the stored ones (the next assembly sees them). They are kept beside
    /// the session, not in it, so a cold session stays cold. While the disk is full:
    /// `InsufficientStorage` and nothing written, as admission would answer the message.
    pub(crate) async fn set_session_instructions(
        &self,
        key: &str,
        text: &str,
    ) -> Result<(), Error> {
        self.keep_beside_session(key, |store, key| store.set_session_instructions(key, text))
            .await
    }

    /// Writes something kept beside session `key` (not in it, so a cold session stays cold)
    /// with `write`, which returns its group-commit ticket (`None`: nothing changed); then the
    /// next assembly of the session sees it, and the write is durable on return. While the
    /// disk is full: `InsufficientStorage` and nothing written, as admission would answer.
    pub(super) async fn keep_beside_session(
        &self,
        key: &str,
        write: impl FnOnce(&Store, &str) -> Result<Option<u64>, StoreError>,
    ) -> Result<(), Error> {
        let key = &normalize_session_key(key);
        let store = &self.inner.store;
        if let Some(reason) = store.disk_full() {
            return Err(Error::InsufficientStorage { reason });
        }
        if let Some(ticket) = write(store, key)? {
            self.inner
                .engine
                .agents()
                .for_key(key)
                .context
                .invalidate(key);
            store.commit().wait(ticket).await?;
        }
        Ok(())
    }

    /// The stored answer to message `message_id` of session `key`, if it was answered (among
    /// the newest [`MAX_ANSWER_SCAN`] entries).
    pub(crate) fn stored_answer(
        &self,
        key: &str,
        message_id: &str,
    ) -> Result<Option<StoredAnswer>, Error> {
        let key = &normalize_session_key(key);
        let store = &self.inner.store;
        let Some(record) = store.session(key)? else {
            return Ok(None);
        };
        let mut seen = 0usize;
        let mut newest_first = store.newest_entries(record.id, |_| {
            seen += 1;
            seen <= MAX_ANSWER_SCAN
        })?;
        newest_first.reverse();
        Ok(answer_after(&newest_first, message_id))
    }
}

/// The answer following the user entry of `message_id` in `entries` (oldest first): the
/// assistant entry closing its turn, or the client tool calls it stopped at.
fn answer_after(entries: &[(u64, TranscriptEntry)], message_id: &str) -> Option<StoredAnswer> {
    let start = entries.iter().position(|(_, e)| {
        matches!(e.kind, EntryKind::User | EntryKind::ToolResult)
            && e.message_id.as_deref() == Some(message_id)
    })?;
    let mut calls: Vec<&TranscriptEntry> = Vec::new();
    for (_, e) in &entries[start + 1..] {
        match e.kind {
            EntryKind::Assistant => {
                return Some(StoredAnswer {
                    text: e.text.to_string(),
                    tool_calls: Vec::new(),
                })
            }
            EntryKind::ToolCall => calls.push(e),
            EntryKind::ToolResult => calls.clear(),
            EntryKind::User => break,
            _ => {}
        }
    }
    if calls.is_empty() {
        return None;
    }
    // The turn stopped at client tool calls: the last run of calls without results.
    Some(StoredAnswer {
        text: calls.iter().map(|e| &*e.text).collect(),
        tool_calls: calls
            .iter()
            .filter_map(|e| e.tool.as_ref())
            .map(|t| ToolCall {
                id: t.call_id.clone(),
                name: t.name.clone(),
                arguments: t.arguments.clone(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ToolInfo;

    fn entry(kind: EntryKind, text: &str, message_id: Option<&str>) -> TranscriptEntry {
        let entry = TranscriptEntry::new(kind, text, 1, 0);
        match message_id {
            Some(id) => entry.with_message_id(id),
            None => entry,
        }
    }

    #[test]
    fn the_answer_is_the_reply_after_the_message_or_its_open_calls() {
        let mut call = entry(EntryKind::ToolCall, "checking", None);
        call.tool = Some(Box::new(ToolInfo {
            call_id: "c1".into(),
            name: "weather".into(),
            arguments: "{}".into(),
        }));
        let entries: Vec<(u64, TranscriptEntry)> = [
            entry(EntryKind::User, "hi", Some("m1")),
            entry(EntryKind::Assistant, "hello", None),
            entry(EntryKind::User, "weather?", Some("m2")),
            call,
        ]
        .into_iter()
        .enumerate()
        .map(|(i, e)| (i as u64, e))
        .collect();
        let first = answer_after(&entries, "m1").expect("answered");
        assert_eq!((first.text.as_str(), first.tool_calls.len()), ("hello", 0));
        let second = answer_after(&entries, "m2").expect("stopped at a call");
        assert_eq!(second.text, "checking");
        assert_eq!(second.tool_calls[0].name, "weather");
        assert!(answer_after(&entries, "m3").is_none());
        assert!(
            answer_after(&entries[..3], "m2").is_none(),
            "not answered yet"
        );
    }
}
