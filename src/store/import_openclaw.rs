//! `turnstile import openclaw DIR`: an OpenClaw sessions dir into the store.
//!
//! OpenClaw keeps `sessions.json` (session key → entry with `sessionId`, `updatedAt`, token
//! counters, `compactionCount`, …) and one `<sessionId>.jsonl` transcript per session: a
//! header line `{"type":"session","version":3,"id":…,"timestamp":…}`, then entries with `id`,
//! `parentId` (a tree; the conversation is the path from the last entry to the root) and an
//! ISO `timestamp`. Entry types: `message` (roles `user`, `assistant` — text, thinking and
//! `toolCall` blocks —, `toolResult`, and extension roles), `compaction` (`summary`,
//! `firstKeptEntryId`, `tokensBefore`), `custom`, `custom_message`, `branch_summary`, and
//! bookkeeping (`model_change`, `thinking_level_change`, `label`, `session_info`).
//!
//! What is imported is what OpenClaw's context would contain: along the path, the newest
//! compaction's summary becomes one `summary` entry, followed by the entries from its
//! `firstKeptEntryId` on; older entries are covered by the summary and counted as folded.
//! Keys (lowercased, as Turnstile keys are), order, timestamps, summaries and
//! `compactionCount` are kept. A malformed line is reported and skipped; a session whose key
//! already exists is skipped, never overwritten. A key the HTTP API would refuse (empty, a
//! control character, longer than `MAX_ID_CHARS`; see [`check_session_key`]) is refused and
//! reported. Only `<sessionId>.jsonl` files directly in DIR are read (a `sessionFile` path in
//! `sessions.json` is not followed).
//!
//! An imported session's age counts from the import: its `updated_at_ms` (the eviction order,
//! what `prune_after_days` and `max_sessions` look at) is the import time, so history older
//! than `prune_after_days` is not deleted on the first start. The original times stay in the
//! session's `created_at_ms` and in each entry's timestamp.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::evict::TRANSCRIPT_KEY_BYTES;
use super::{by_updated, encode, keys, EntryKind, SessionRecord, Store, ToolInfo, TranscriptEntry};
use crate::clock::now_ms;
use crate::error::StoreError;
use crate::inbound::{check_session_key, normalize_session_key};

/// Longest transcript line read; longer lines are reported and skipped.
pub(crate) const MAX_LINE_BYTES: usize = 16 << 20;
/// Largest `sessions.json` read.
const MAX_INDEX_BYTES: u64 = 256 << 20;
/// Most problems listed in a report; the rest are counted.
const MAX_REPORTED: usize = 200;
/// Transcript entries written per batch.
const WRITE_BATCH: usize = 1_000;
/// Most characters of a refused key shown in a report (a refused key may be huge).
const MAX_SHOWN_KEY_CHARS: usize = 80;

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Sessions written.
    pub sessions_imported: u64,
    /// Sessions skipped because the key already exists.
    pub sessions_existing: u64,
    /// Sessions skipped because their transcript is missing or unreadable.
    pub sessions_failed: u64,
    /// Sessions refused because the HTTP API would refuse their key.
    pub sessions_refused: u64,
    /// Transcript entries written.
    pub entries_imported: u64,
    /// Entries covered by a compaction summary (not imported one by one).
    pub entries_folded: u64,
    /// Entries on abandoned branches of the tree.
    pub entries_off_branch: u64,
    /// Bookkeeping entries with no conversation content.
    pub entries_ignored: u64,
    /// Malformed lines skipped.
    pub lines_skipped: u64,
    /// The first problems: (file, line number or 0, what).
    pub problems: Vec<(String, u64, String)>,
}

impl ImportReport {
    fn problem(&mut self, file: &str, line: u64, what: impl Into<String>) {
        if self.problems.len() < MAX_REPORTED {
            self.problems.push((file.to_string(), line, what.into()));
        }
    }
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "imported {} sessions ({} entries); {} already existed, {} failed, {} refused (bad key)",
            self.sessions_imported,
            self.entries_imported,
            self.sessions_existing,
            self.sessions_failed,
            self.sessions_refused
        )?;
        writeln!(
            f,
            "entries folded into summaries: {}, off-branch: {}, ignored: {}; malformed lines skipped: {}",
            self.entries_folded, self.entries_off_branch, self.entries_ignored, self.lines_skipped
        )?;
        for (file, line, what) in &self.problems {
            if *line > 0 {
                writeln!(f, "  {file}:{line}: {what}")?;
            } else {
                writeln!(f, "  {file}: {what}")?;
            }
        }
        Ok(())
    }
}

/// One parsed transcript line.
struct Parsed {
    id: Option<String>,
    parent: Option<String>,
    timestamp_ms: Option<u64>,
    body: Body,
}

enum Body {
    Entries(Vec<TranscriptEntry>),
    Compaction {
        summary: String,
        first_kept: Option<String>,
    },
    Ignored,
}

/// Imports every session of the OpenClaw sessions dir `dir`. `count_tokens` counts a text's
/// tokens (stored with each entry).
pub fn import_openclaw(
    store: &Store,
    dir: &Path,
    count_tokens: &dyn Fn(&str) -> u32,
) -> Result<ImportReport, StoreError> {
    let index_path = dir.join("sessions.json");
    let file = std::fs::File::open(&index_path).map_err(StoreError::file("open", &index_path))?;
    let mut text = String::new();
    file.take(MAX_INDEX_BYTES)
        .read_to_string(&mut text)
        .map_err(StoreError::file("read", &index_path))?;
    let index: Value = serde_json::from_str(&text).map_err(|e| StoreError::Decode {
        tree: "sessions.json",
        reason: e.to_string(),
    })?;
    let Value::Object(index) = index else {
        return Err(StoreError::Decode {
            tree: "sessions.json",
            reason: "not an object of session key → entry".into(),
        });
    };
    let mut report = ImportReport::default();
    let imported_at = now_ms();
    for (raw_key, entry) in index {
        if let Err(e) = check_session_key(&raw_key) {
            report.sessions_refused += 1;
            let shown: String = raw_key.chars().take(MAX_SHOWN_KEY_CHARS).collect();
            report.problem(
                "sessions.json",
                0,
                format!("session key {shown:?} refused (the API refuses it too): {e}"),
            );
            continue;
        }
        let key = normalize_session_key(&raw_key);
        let Some(session_id) = entry.get("sessionId").and_then(Value::as_str) else {
            report.sessions_failed += 1;
            report.problem("sessions.json", 0, format!("{raw_key}: no sessionId"));
            continue;
        };
        let Some(path) = transcript_path(dir, session_id) else {
            report.sessions_failed += 1;
            report.problem(
                "sessions.json",
                0,
                format!("{raw_key}: unsafe sessionId {session_id:?}"),
            );
            continue;
        };
        let updated_at = entry.get("updatedAt").and_then(as_ms);
        let compactions = entry
            .get("compactionCount")
            .and_then(Value::as_u64)
            .map(|c| u32::try_from(c).unwrap_or(u32::MAX))
            .unwrap_or(0);
        if store.session(&key)?.is_some() {
            report.sessions_existing += 1;
            report.problem(
                "sessions.json",
                0,
                format!("{key}: already in the store, skipped"),
            );
            continue;
        }
        let name = format!("{session_id}.jsonl");
        let (created, entries) = match read_transcript(&path, &name, count_tokens, &mut report) {
            Ok(r) => r,
            Err(e) => {
                report.sessions_failed += 1;
                report.problem(&name, 0, e.to_string());
                continue;
            }
        };
        let last = entries.last().map(|e| e.timestamp_ms);
        let original = updated_at.or(last).or(created).unwrap_or(0);
        let n = entries.len() as u64;
        if store.write_imported(
            &key,
            created.unwrap_or(original),
            original.max(imported_at),
            compactions,
            entries,
        )? {
            report.sessions_imported += 1;
            report.entries_imported += n;
        } else {
            report.sessions_existing += 1;
        }
    }
    Ok(report)
}

/// `<dir>/<session_id>.jsonl`, if `session_id` is a plain file-name stem.
fn transcript_path(dir: &Path, session_id: &str) -> Option<PathBuf> {
    let ok = !session_id.is_empty()
        && session_id.len() <= 200
        && !session_id.starts_with('.')
        && session_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    ok.then(|| dir.join(format!("{session_id}.jsonl")))
}

/// A time as ms since the epoch: a number (ms) or an RFC 3339 string.
fn as_ms(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => humantime::parse_rfc3339_weak(s)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| u64::try_from(d.as_millis()).ok()),
        _ => None,
    }
}

/// Reads one transcript: (header time, entries to import).
fn read_transcript(
    path: &Path,
    name: &str,
    count_tokens: &dyn Fn(&str) -> u32,
    report: &mut ImportReport,
) -> Result<(Option<u64>, Vec<TranscriptEntry>), StoreError> {
    let file = std::fs::File::open(path).map_err(StoreError::file("open", path))?;
    let mut reader = BufReader::new(file);
    let mut parsed = Vec::new();
    let mut created = None;
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(StoreError::file("read", path))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            skip_rest_of_line(&mut reader).map_err(StoreError::file("read", path))?;
            report.lines_skipped += 1;
            report.problem(
                name,
                line_no,
                format!("line longer than {MAX_LINE_BYTES} bytes"),
            );
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                report.lines_skipped += 1;
                report.problem(name, line_no, format!("not JSON: {e}"));
                continue;
            }
        };
        match value.get("type").and_then(Value::as_str) {
            Some("session") => {
                created = value.get("timestamp").and_then(as_ms);
                continue;
            }
            None => {
                report.lines_skipped += 1;
                report.problem(name, line_no, "no \"type\"");
                continue;
            }
            Some(_) => {}
        }
        match parse_entry(&value, count_tokens) {
            Ok(p) => parsed.push(p),
            Err(why) => {
                report.lines_skipped += 1;
                report.problem(name, line_no, why.to_string());
            }
        }
    }
    Ok((created, resolve(parsed, created, report, count_tokens)))
}

fn skip_rest_of_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|b| *b == b'\n') {
            reader.consume(i + 1);
            return Ok(());
        }
        let n = buf.len();
        reader.consume(n);
    }
}

/// Why a transcript line is not an entry.
#[derive(Debug, thiserror::Error)]
enum EntryError {
    #[error("message entry without \"message\"")]
    WithoutMessage,
    #[error("message without role")]
    Roleless,
    #[error("compaction without summary")]
    EmptyCompaction,
}

fn parse_entry(v: &Value, count_tokens: &dyn Fn(&str) -> u32) -> Result<Parsed, EntryError> {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
    let id = v.get("id").and_then(Value::as_str).map(str::to_string);
    let parent = v
        .get("parentId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let entry_ts = v.get("timestamp").and_then(as_ms);
    let make = |kind: EntryKind, text: String, ts: Option<u64>, tool: Option<ToolInfo>| {
        let tokens = count_tokens(&text);
        let entry = TranscriptEntry::new(kind, text, tokens, ts.or(entry_ts).unwrap_or(0));
        match tool {
            Some(tool) => entry.with_tool(tool),
            None => entry,
        }
    };
    let body = match kind {
        "message" => {
            let m = v.get("message").ok_or(EntryError::WithoutMessage)?;
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .ok_or(EntryError::Roleless)?;
            let ts = m.get("timestamp").and_then(as_ms);
            let content = m.get("content");
            let mut out = Vec::new();
            match role {
                "user" => out.push(make(EntryKind::User, content_text(content), ts, None)),
                "assistant" => {
                    let text = content_text(content);
                    if !text.is_empty() {
                        out.push(make(EntryKind::Assistant, text, ts, None));
                    }
                    for call in tool_calls(content) {
                        let args = call
                            .get("arguments")
                            .map(Value::to_string)
                            .unwrap_or_default();
                        let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                        let info = ToolInfo {
                            call_id: call
                                .get("id")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .into(),
                            name: name.into(),
                            arguments: args.clone(),
                        };
                        out.push(make(
                            EntryKind::ToolCall,
                            format!("{name}({args})"),
                            ts,
                            Some(info),
                        ));
                    }
                    if out.is_empty() {
                        out.push(make(EntryKind::Assistant, String::new(), ts, None));
                    }
                }
                "toolResult" => {
                    let info = ToolInfo {
                        call_id: m
                            .get("toolCallId")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .into(),
                        name: m
                            .get("toolName")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .into(),
                        arguments: String::new(),
                    };
                    out.push(make(
                        EntryKind::ToolResult,
                        content_text(content),
                        ts,
                        Some(info),
                    ));
                }
                "compactionSummary" | "branchSummary" => {
                    let text = m.get("summary").and_then(Value::as_str).unwrap_or_default();
                    out.push(make(EntryKind::Summary, text.to_string(), ts, None));
                }
                other => {
                    let text = match content {
                        Some(c) => content_text(Some(c)),
                        None => m.to_string(),
                    };
                    out.push(make(
                        EntryKind::Custom,
                        format!("[{other}] {text}"),
                        ts,
                        None,
                    ));
                }
            }
            Body::Entries(out)
        }
        "compaction" => Body::Compaction {
            summary: v
                .get("summary")
                .and_then(Value::as_str)
                .ok_or(EntryError::EmptyCompaction)?
                .to_string(),
            first_kept: v
                .get("firstKeptEntryId")
                .and_then(Value::as_str)
                .map(str::to_string),
        },
        "custom_message" => Body::Entries(vec![make(
            EntryKind::Custom,
            content_text(v.get("content")),
            None,
            None,
        )]),
        "custom" => {
            let custom_type = v
                .get("customType")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let data = v.get("data").map(Value::to_string).unwrap_or_default();
            Body::Entries(vec![make(
                EntryKind::Custom,
                format!("[{custom_type}] {data}"),
                None,
                None,
            )])
        }
        "branch_summary" => Body::Entries(vec![make(
            EntryKind::Summary,
            v.get("summary")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            None,
            None,
        )]),
        _ => Body::Ignored,
    };
    Ok(Parsed {
        id,
        parent,
        timestamp_ms: entry_ts,
        body,
    })
}

/// The text of a message's content: a string, or the text blocks of an array joined by
/// newlines (images as `[image]`, thinking and tool calls left out).
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).map(str::to_string),
                Some("image") => Some("[image]".to_string()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn tool_calls(content: Option<&Value>) -> Vec<&Value> {
    match content {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("toolCall"))
            .collect(),
        _ => Vec::new(),
    }
}

/// The conversation path (leaf to root, reversed), with the newest compaction applied.
fn resolve(
    parsed: Vec<Parsed>,
    created: Option<u64>,
    report: &mut ImportReport,
    count_tokens: &dyn Fn(&str) -> u32,
) -> Vec<TranscriptEntry> {
    let total = parsed.len();
    // Linear (v1) transcripts have no ids: file order is the conversation.
    let path: Vec<usize> = if parsed.iter().all(|p| p.id.is_none()) {
        (0..total).collect()
    } else {
        let by_id: HashMap<&str, usize> = parsed
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.id.as_deref().map(|id| (id, i)))
            .collect();
        let mut path = Vec::new();
        let mut at = parsed.iter().rposition(|p| p.id.is_some());
        // At most `total` steps, so a parent cycle cannot loop forever.
        while let Some(i) = at {
            if path.len() >= total {
                break;
            }
            path.push(i);
            at = parsed[i]
                .parent
                .as_deref()
                .and_then(|p| by_id.get(p).copied());
        }
        path.reverse();
        path
    };
    report.entries_off_branch += (total - path.len()) as u64;
    let newest_compaction = path
        .iter()
        .rposition(|&i| matches!(parsed[i].body, Body::Compaction { .. }));
    let mut out = Vec::new();
    let start = match newest_compaction {
        None => 0,
        Some(c) => {
            let Body::Compaction {
                summary,
                first_kept,
            } = &parsed[path[c]].body
            else {
                return out;
            };
            let kept_at = first_kept
                .as_deref()
                .and_then(|id| {
                    path[..c]
                        .iter()
                        .position(|&i| parsed[i].id.as_deref() == Some(id))
                })
                .unwrap_or(c);
            report.entries_folded += path[..kept_at]
                .iter()
                .filter(|&&i| matches!(parsed[i].body, Body::Entries(_)))
                .count() as u64;
            let ts = parsed[path[c]].timestamp_ms.or(created).unwrap_or(0);
            out.push(TranscriptEntry::summary(
                summary.clone(),
                count_tokens(summary),
                ts,
            ));
            kept_at
        }
    };
    for &i in &path[start..] {
        match &parsed[i].body {
            Body::Entries(entries) => out.extend(entries.iter().cloned()),
            Body::Compaction { .. } => {}
            Body::Ignored => report.entries_ignored += 1,
        }
    }
    out
}

impl Store {
    /// Writes an imported session unless `key` exists. The transcript is written first under
    /// a fresh id (invisible until the record exists), then the record and index entry in one
    /// transaction; if the key appeared meanwhile the transcript is deleted again.
    pub(super) fn write_imported(
        &self,
        key: &str,
        created_at_ms: u64,
        updated_at_ms: u64,
        compaction_count: u32,
        mut entries: Vec<TranscriptEntry>,
    ) -> Result<bool, StoreError> {
        let write = self.write_gate();
        let inner = self.inner();
        let id = inner.next_id()?;
        let mut record = SessionRecord {
            id,
            created_at_ms,
            updated_at_ms,
            next_seq: 1,
            entries: 0,
            tokens: 0,
            bytes: 0,
            compaction_count,
        };
        for chunk in entries.chunks_mut(WRITE_BATCH) {
            let mut batch = sled::Batch::default();
            for e in chunk.iter() {
                let bytes = encode(e)?;
                record.entries += 1;
                record.tokens += u64::from(e.tokens);
                record.bytes += bytes.len() as u64;
                batch.insert(&keys::transcript_key(id, record.next_seq), bytes);
                record.next_seq += 1;
            }
            inner
                .transcript
                .apply_batch(batch)
                .map_err(StoreError::sled("importing a transcript"))?;
        }
        let encoded = encode(&record)?;
        let written = (&inner.sessions, &inner.by_updated).transaction(|(sessions, index)| {
            if sessions.get(key)?.is_some() {
                return Ok(false);
            }
            sessions.insert(key.as_bytes(), encoded.as_slice())?;
            index.insert(by_updated::key(updated_at_ms, key), &[])?;
            Ok::<_, ConflictableTransactionError<StoreError>>(true)
        });
        let written = match written {
            Ok(w) => w,
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(source)) => {
                return Err(StoreError::Sled {
                    context: "importing a session",
                    source,
                })
            }
        };
        drop(write);
        if written {
            self.shared
                .meter
                .add(record.bytes + record.entries * TRANSCRIPT_KEY_BYTES);
            self.shared.totals.replace(None, Some(&record));
            if record.entries == 0 {
                self.found_empty(key, updated_at_ms);
            }
        } else {
            self.delete_transcript(id)?;
        }
        Ok(written)
    }
}
