//! Checks and repairs: schema, undecodable values, the inbox, the `by_updated` index, orphan
//! transcript entries and session counters.
//!
//! Undecodable values are never dropped: repair moves them to the `quarantine` tree (key:
//! tree name, NUL, original key; value: the original bytes), where they stay for inspection.
//! Orphan transcript entries (left by an eviction interrupted between its commit point and the
//! transcript deletion) belong to no session and are deleted. Counters that disagree with the
//! transcript are recomputed from it; the index is rebuilt from the session records.
//!
//! `Depth::Quick` runs on every open (inbox, sessions, index: proportional to sessions plus
//! queued messages). `Depth::Full` also reads every transcript entry; it is what
//! `turnstile doctor` runs.

use std::collections::HashMap;
use std::fmt;

use super::evict::TRANSCRIPT_KEY_BYTES;
use super::{
    by_updated, decode, encode, keys, migrate, InboxRecord, SessionRecord, Store, TranscriptEntry,
    SCHEMA_VERSION,
};
use crate::error::StoreError;

/// The quarantine tree's name.
pub(super) const QUARANTINE_TREE: &str = "quarantine";

/// Most findings listed in a report; the rest are only counted.
const MAX_FINDINGS: usize = 100;

/// How much to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Inbox, sessions and the index (runs on open).
    Quick,
    /// Also every transcript entry and each session's counters.
    Full,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The tree.
    pub tree: &'static str,
    /// The key, printable (lossy UTF-8 or hex).
    pub key: String,
    /// What is wrong.
    pub problem: String,
}

/// A value moved to the quarantine tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// The tree it came from.
    pub tree: String,
    /// Its key there.
    pub key: Vec<u8>,
    /// Its bytes, as found.
    pub value: Vec<u8>,
}

/// What a check found and (with repair) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoctorReport {
    /// Schema version after migrations.
    pub schema_version: u8,
    /// The version migrated from on this open, if any.
    pub migrated_from: Option<u8>,
    /// Sessions with a decodable record.
    pub sessions: u64,
    /// Inbox entries (unconsumed messages) that decode.
    pub inbox_entries: u64,
    /// Transcript entries that decode (full depth only).
    pub transcript_entries: u64,
    /// Undecodable values found (moved to quarantine when repairing).
    pub undecodable: u64,
    /// Inbox keys that are not inbox keys.
    pub orphan_inbox: u64,
    /// Transcript entries whose session does not exist (deleted when repairing).
    pub orphan_transcript: u64,
    /// Sessions whose counters disagree with their transcript (recomputed when repairing).
    pub counters_wrong: u64,
    /// Sessions missing from the index (added when repairing).
    pub index_missing: u64,
    /// Index entries with no matching session (removed when repairing).
    pub index_stale: u64,
    /// Cold-tier segment files that do not decode (full depth only; kept for inspection).
    pub cold_damaged: u64,
    /// Values in the quarantine tree after this run.
    pub quarantined_total: u64,
    /// Live logical bytes (as the janitor counts them).
    pub live_bytes: u64,
    /// The sessions' totals, counted record by record.
    pub totals: super::Totals,
    /// The first findings, for the report.
    pub findings: Vec<Finding>,
    /// Findings beyond the listed ones.
    pub findings_omitted: u64,
    /// Whether repairs were applied.
    pub repaired: bool,
    /// What the ledger says is missing (a lost tail), if anything. Repair cannot bring it
    /// back; `turnstile serve --accept-data-loss` accepts it.
    pub data_loss: Option<String>,
}

impl DoctorReport {
    /// True when nothing was wrong.
    pub fn is_clean(&self) -> bool {
        self.problems() == 0
    }

    /// Number of problems found.
    pub fn problems(&self) -> u64 {
        self.undecodable
            + self.orphan_inbox
            + self.orphan_transcript
            + self.counters_wrong
            + self.index_missing
            + self.index_stale
            + self.cold_damaged
            + u64::from(self.data_loss.is_some())
    }

    pub(super) fn note(&mut self, tree: &'static str, key: &[u8], problem: impl Into<String>) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(Finding {
                tree,
                key: printable(key),
                problem: problem.into(),
            });
        } else {
            self.findings_omitted += 1;
        }
    }
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "schema version: {}", self.schema_version)?;
        if let Some(v) = self.migrated_from {
            writeln!(f, "migrated from schema version {v}")?;
        }
        writeln!(
            f,
            "sessions: {}, transcript entries: {}, queued messages: {}, live bytes: {}",
            self.sessions, self.transcript_entries, self.inbox_entries, self.live_bytes
        )?;
        let verb = if self.repaired { "repaired" } else { "found" };
        writeln!(
            f,
            "problems {verb}: {} (undecodable {}, orphan inbox {}, orphan transcript {}, \
             wrong counters {}, index missing {}, index stale {})",
            self.problems(),
            self.undecodable,
            self.orphan_inbox,
            self.orphan_transcript,
            self.counters_wrong,
            self.index_missing,
            self.index_stale
        )?;
        if self.cold_damaged > 0 {
            writeln!(f, "damaged cold segments: {}", self.cold_damaged)?;
        }
        writeln!(f, "quarantined values: {}", self.quarantined_total)?;
        if let Some(loss) = &self.data_loss {
            writeln!(f, "DATA LOSS: {loss}")?;
        }
        for finding in &self.findings {
            writeln!(f, "  {} {}: {}", finding.tree, finding.key, finding.problem)?;
        }
        if self.findings_omitted > 0 {
            writeln!(f, "  … and {} more", self.findings_omitted)?;
        }
        Ok(())
    }
}

fn printable(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => key.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// Per-session totals computed from the transcript.
#[derive(Default)]
struct Tally {
    entries: u64,
    bytes: u64,
    tokens: u64,
    max_seq: u64,
}

impl Store {
    /// Runs the checks; with `repair`, fixes what it finds (see the module doc).
    /// sled's panics on damaged data are contained (an error, the store marked damaged); a
    /// loss the ledger found on open is reported as a problem.
    pub fn doctor(&self, depth: Depth, repair: bool) -> Result<DoctorReport, StoreError> {
        self.contained("checking the store", || self.run_checks(depth, repair))
    }

    fn run_checks(&self, depth: Depth, repair: bool) -> Result<DoctorReport, StoreError> {
        let mut report = DoctorReport {
            schema_version: self.schema_version()?,
            repaired: repair,
            ..DoctorReport::default()
        };
        self.check_inbox(&mut report, repair)?;
        let sessions = self.check_sessions(&mut report, repair, depth == Depth::Full)?;
        self.check_index(&mut report, repair)?;
        if depth == Depth::Full {
            self.check_transcript(&mut report, repair, sessions)?;
            self.check_cold(&mut report)?;
        }
        report.quarantined_total = self.inner().quarantine.len() as u64;
        report.data_loss = self.data_loss().map(|l| l.describe());
        Ok(report)
    }

    /// The stored schema version.
    pub fn schema_version(&self) -> Result<u8, StoreError> {
        let meta = self
            .inner()
            .db
            .open_tree("meta")
            .map_err(StoreError::sled("opening meta"))?;
        Ok(meta
            .get(migrate::SCHEMA_KEY)
            .map_err(StoreError::sled("reading schema"))?
            .and_then(|v| v.first().copied())
            .unwrap_or(SCHEMA_VERSION))
    }

    /// Quarantined values, at most `limit`.
    pub fn quarantined(&self, limit: usize) -> Result<Vec<Quarantined>, StoreError> {
        let mut out = Vec::new();
        for kv in self.inner().quarantine.iter().take(limit) {
            let (k, v) = kv.map_err(StoreError::sled("reading quarantine"))?;
            let (tree, key) = match k.iter().position(|b| *b == 0) {
                Some(i) => (&k[..i], &k[i + 1..]),
                None => (&k[..], &[][..]),
            };
            out.push(Quarantined {
                tree: String::from_utf8_lossy(tree).into_owned(),
                key: key.to_vec(),
                value: v.to_vec(),
            });
        }
        Ok(out)
    }

    fn quarantine(
        &self,
        tree: &sled::Tree,
        name: &str,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), StoreError> {
        let mut qkey = Vec::with_capacity(name.len() + 1 + key.len());
        qkey.extend_from_slice(name.as_bytes());
        qkey.push(0);
        qkey.extend_from_slice(key);
        // Copy first, then remove: a crash in between leaves the value in both places and the
        // next run quarantines it again under the same key.
        self.inner()
            .quarantine
            .insert(qkey, value)
            .map_err(StoreError::sled("writing quarantine"))?;
        tree.remove(key)
            .map_err(StoreError::sled("removing a quarantined value"))?;
        Ok(())
    }

    pub(super) fn check_inbox(
        &self,
        report: &mut DoctorReport,
        repair: bool,
    ) -> Result<(), StoreError> {
        let inner = self.inner();
        let tree = &inner.inbox;
        for kv in tree.iter() {
            let (k, v) = kv.map_err(StoreError::sled("scanning the inbox"))?;
            let problem = if keys::split_inbox_key(&k).is_none() {
                report.orphan_inbox += 1;
                "key is not session key + NUL + sequence".to_string()
            } else if let Err(e) = decode::<InboxRecord>("inbox", &v) {
                report.undecodable += 1;
                e.to_string()
            } else {
                report.inbox_entries += 1;
                report.live_bytes += (k.len() + v.len()) as u64;
                continue;
            };
            report.note("inbox", &k, problem);
            if repair {
                self.quarantine(tree, "inbox", &k, &v)?;
            }
        }
        Ok(())
    }

    fn check_sessions(
        &self,
        report: &mut DoctorReport,
        repair: bool,
        collect: bool,
    ) -> Result<HashMap<u64, (String, SessionRecord)>, StoreError> {
        let inner = self.inner();
        let tree = &inner.sessions;
        let mut by_id = HashMap::new();
        for kv in tree.iter() {
            let (k, v) = kv.map_err(StoreError::sled("scanning sessions"))?;
            let record = match (
                std::str::from_utf8(&k),
                decode::<SessionRecord>("sessions", &v),
            ) {
                (Ok(key), Ok(record)) => (key.to_string(), record),
                (Err(_), _) => {
                    report.undecodable += 1;
                    report.note("sessions", &k, "key is not UTF-8");
                    if repair {
                        self.quarantine(tree, "sessions", &k, &v)?;
                    }
                    continue;
                }
                (_, Err(e)) => {
                    report.undecodable += 1;
                    report.note("sessions", &k, e.to_string());
                    if repair {
                        self.quarantine(tree, "sessions", &k, &v)?;
                    }
                    continue;
                }
            };
            let (key, record) = record;
            report.sessions += 1;
            report.totals.add(&record);
            if record.entries == 0 {
                self.found_empty(&key, record.updated_at_ms);
            }
            report.live_bytes += record.bytes + record.entries * TRANSCRIPT_KEY_BYTES;
            let index_key = by_updated::key(record.updated_at_ms, &key);
            if !self
                .inner()
                .by_updated
                .contains_key(&index_key)
                .map_err(StoreError::sled("reading by_updated"))?
            {
                report.index_missing += 1;
                report.note(
                    "by_updated",
                    key.as_bytes(),
                    "session missing from the index",
                );
                if repair {
                    self.inner()
                        .by_updated
                        .insert(index_key, &[])
                        .map_err(StoreError::sled("repairing by_updated"))?;
                }
            }
            if collect {
                by_id.insert(record.id, (key, record));
            }
        }
        Ok(by_id)
    }

    fn check_index(&self, report: &mut DoctorReport, repair: bool) -> Result<(), StoreError> {
        for k in self.inner().by_updated.iter().keys() {
            let k = k.map_err(StoreError::sled("scanning by_updated"))?;
            let stale = match by_updated::split(&k) {
                None => true,
                Some((_, key)) => match self.session(key) {
                    Ok(Some(r)) => by_updated::key(r.updated_at_ms, key) != k.as_ref(),
                    Ok(None) | Err(_) => true,
                },
            };
            if stale {
                report.index_stale += 1;
                report.note("by_updated", &k, "index entry without a matching session");
                if repair {
                    self.inner()
                        .by_updated
                        .remove(&k)
                        .map_err(StoreError::sled("repairing by_updated"))?;
                }
            }
        }
        Ok(())
    }

    fn check_transcript(
        &self,
        report: &mut DoctorReport,
        repair: bool,
        sessions: HashMap<u64, (String, SessionRecord)>,
    ) -> Result<(), StoreError> {
        let inner = self.inner();
        let tree = &inner.transcript;
        let mut tallies: HashMap<u64, Tally> = HashMap::new();
        for kv in tree.iter() {
            let (k, v) = kv.map_err(StoreError::sled("scanning the transcript"))?;
            let (Some(id), Some(seq)) = (
                k.get(..8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(u64::from_be_bytes),
                keys::transcript_seq(&k).filter(|_| k.len() == 16),
            ) else {
                report.undecodable += 1;
                report.note("transcript", &k, "key is not session id + sequence");
                if repair {
                    self.quarantine(tree, "transcript", &k, &v)?;
                }
                continue;
            };
            let entry = match decode::<TranscriptEntry>("transcript", &v) {
                Ok(e) => e,
                Err(e) => {
                    report.undecodable += 1;
                    report.note("transcript", &k, e.to_string());
                    if repair {
                        self.quarantine(tree, "transcript", &k, &v)?;
                    }
                    continue;
                }
            };
            if !sessions.contains_key(&id) {
                report.orphan_transcript += 1;
                if report.orphan_transcript == 1 {
                    report.note(
                        "transcript",
                        &k,
                        "entries of a session that no longer exists",
                    );
                }
                if repair {
                    tree.remove(&k)
                        .map_err(StoreError::sled("deleting an orphan entry"))?;
                }
                continue;
            }
            report.transcript_entries += 1;
            let t = tallies.entry(id).or_default();
            t.entries += 1;
            t.bytes += v.len() as u64;
            t.tokens += u64::from(entry.tokens);
            t.max_seq = t.max_seq.max(seq);
        }
        for (id, (key, record)) in sessions {
            let t = tallies.remove(&id).unwrap_or_default();
            let right = record.entries == t.entries
                && record.bytes == t.bytes
                && record.tokens == t.tokens
                && record.next_seq > t.max_seq;
            if right {
                continue;
            }
            report.counters_wrong += 1;
            report.note(
                "sessions",
                key.as_bytes(),
                format!(
                    "counters say {} entries / {} bytes / {} tokens / next seq {}, transcript has \
                     {} / {} / {} / max seq {}",
                    record.entries,
                    record.bytes,
                    record.tokens,
                    record.next_seq,
                    t.entries,
                    t.bytes,
                    t.tokens,
                    t.max_seq
                ),
            );
            if repair {
                let old = encode(&record)?;
                let fixed = SessionRecord {
                    entries: t.entries,
                    bytes: t.bytes,
                    tokens: t.tokens,
                    next_seq: record.next_seq.max(t.max_seq + 1),
                    ..record
                };
                // Only if unchanged since read; a concurrent turn's record wins.
                let _ = self
                    .inner()
                    .sessions
                    .compare_and_swap(key.as_bytes(), Some(old), Some(encode(&fixed)?))
                    .map_err(StoreError::sled("repairing counters"))?;
            }
        }
        Ok(())
    }
}
