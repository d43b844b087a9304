//! A session as JSONL: one header line, then one line per transcript entry, oldest first.
//! `turnstile export` writes it; the janitor's archives are the same text, gzip-compressed.
//!
//! ```text
//! {"type":"session","format":"turnstile-export","version":1,"session_key":"agent:main:main",…}
//! {"type":"entry","seq":1,"kind":"user","text":"hi","timestamp_ms":…,"tokens":1,…}
//! ```

use std::io::Write;

use serde::{Deserialize, Serialize};

use super::cold::Entries;
use super::{EntryKind, EntrySender, SessionRecord, Store, ToolInfo, TranscriptEntry};
use crate::error::StoreError;

/// Transcript entries read per page while exporting; bounds memory for long sessions.
const EXPORT_PAGE: usize = 500;

/// The export format's version (the `version` field of the header line).
pub(crate) const EXPORT_VERSION: u32 = 1;

/// The first line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExportHeader {
    /// Always `session`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Always `turnstile-export`.
    pub format: String,
    /// [`EXPORT_VERSION`].
    pub version: u32,
    /// The session key.
    pub session_key: String,
    /// The numeric session id.
    pub session_id: u64,
    /// Created, ms since the epoch.
    pub created_at_ms: u64,
    /// Last updated, ms since the epoch.
    pub updated_at_ms: u64,
    /// Entries in the transcript.
    pub entries: u64,
    /// Tokens in the transcript.
    pub tokens: u64,
    /// Compactions so far.
    pub compaction_count: u32,
}

/// One transcript line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExportEntry {
    /// Always `entry`.
    #[serde(rename = "type")]
    pub line: String,
    /// Position in the session.
    pub seq: u64,
    /// `user`, `assistant`, `summary`, …
    pub kind: EntryKind,
    /// The text.
    pub text: String,
    /// Platform message id.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message_id: Option<String>,
    /// Who wrote it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sender: Option<EntrySender>,
    /// When, ms since the epoch.
    pub timestamp_ms: u64,
    /// Tokens as counted when written.
    pub tokens: u32,
    /// Tool call or result details.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool: Option<ToolInfo>,
}

impl ExportEntry {
    fn new(seq: u64, e: TranscriptEntry) -> Self {
        Self {
            line: "entry".into(),
            seq,
            kind: e.kind,
            text: e.text.to_string(),
            message_id: e.message_id,
            sender: e.sender.map(|s| *s),
            timestamp_ms: e.timestamp_ms,
            tokens: e.tokens,
            tool: e.tool.map(|t| *t),
        }
    }
}

/// Writes session `key` (stored as `record`) as JSONL to `out`. Returns the entries written.
pub(crate) fn write_session_jsonl(
    store: &Store,
    key: &str,
    record: &SessionRecord,
    out: &mut dyn Write,
) -> Result<u64, StoreError> {
    write_jsonl(
        key,
        record,
        |after| store.transcript(record.id, after, EXPORT_PAGE),
        out,
    )
}

/// Writes the header of `record` and the pages `page_after(last seq so far)` returns, until an
/// empty one.
fn write_jsonl(
    key: &str,
    record: &SessionRecord,
    mut page_after: impl FnMut(u64) -> Result<Vec<(u64, TranscriptEntry)>, StoreError>,
    out: &mut dyn Write,
) -> Result<u64, StoreError> {
    let io = |e: std::io::Error| StoreError::Encode(format!("writing an export: {e}"));
    let header = ExportHeader {
        kind: "session".into(),
        format: "turnstile-export".into(),
        version: EXPORT_VERSION,
        session_key: key.to_string(),
        session_id: record.id,
        created_at_ms: record.created_at_ms,
        updated_at_ms: record.updated_at_ms,
        entries: record.entries,
        tokens: record.tokens,
        compaction_count: record.compaction_count,
    };
    serde_json::to_writer(&mut *out, &header).map_err(|e| StoreError::Encode(e.to_string()))?;
    out.write_all(b"\n").map_err(io)?;
    let mut after = 0u64;
    let mut written = 0u64;
    loop {
        let page = page_after(after)?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after = *last;
        for (seq, entry) in page {
            serde_json::to_writer(&mut *out, &ExportEntry::new(seq, entry))
                .map_err(|e| StoreError::Encode(e.to_string()))?;
            out.write_all(b"\n").map_err(io)?;
            written += 1;
        }
    }
    out.flush().map_err(io)?;
    Ok(written)
}

impl Store {
    /// Writes session `key` as JSONL to `out`. Returns the entries written, or `None` if there
    /// is no such session.
    pub fn export_session(
        &self,
        key: &str,
        out: &mut dyn Write,
    ) -> Result<Option<u64>, StoreError> {
        if let Some(record) = self.session(key)? {
            return write_session_jsonl(self, key, &record, out).map(Some);
        }
        // A cold session, from its segment (an export reads; it does not thaw).
        let Some((record, mut entries)) = self.read_cold(key, Entries::All)? else {
            return Ok(None);
        };
        write_jsonl(key, &record, |_| Ok(std::mem::take(&mut entries)), out).map(Some)
    }
}
