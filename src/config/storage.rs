//! `[storage]`: the sled database, durability and the disk budget.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{fraction, in_range, MAX_DURATION_MS};
use crate::error::ConfigError;

/// The smallest accepted `storage.max_disk_bytes`: an empty sled database alone takes about a
/// megabyte.
pub(crate) const MIN_DISK_BYTES: u64 = 4 << 20;

/// Largest `storage.max_disk_bytes` and `storage.cache_capacity_bytes`: 1 PiB, far from
/// overflowing the budget arithmetic.
pub(crate) const MAX_DISK_BYTES: u64 = 1 << 50;

/// The smallest accepted `storage.cache_capacity_bytes`: sled panics below 256 bytes and is
/// useless far above that.
pub(crate) const MIN_CACHE_BYTES: u64 = 1 << 20;

/// Largest `storage.max_queued_messages`.
pub(crate) const MAX_QUEUED_MESSAGES: usize = 100_000_000;

/// Largest `storage.prune_after_days`: 100 years.
pub(crate) const MAX_PRUNE_DAYS: u32 = 36_500;

/// Largest `storage.max_sessions`.
pub(crate) const MAX_SESSIONS: u64 = 1 << 40;

/// Largest `storage.cold_max_fraction`: the cold tier may use at most this share of the budget.
pub(crate) const MAX_COLD_FRACTION: f64 = 0.6;

/// The default `storage.cold_max_fraction`: the cold tier is on.
pub(super) const DEFAULT_COLD_FRACTION: f64 = 0.4;

/// When a write counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Flushed to disk before it is acknowledged (group commit: one flush covers every write
    /// waiting at that moment). Nothing acknowledged is lost on a crash.
    Strict,
    /// Acknowledged at once and flushed every `flush_every_ms`: a crash may lose what was
    /// acknowledged in the last interval.
    Batched,
}

/// `[storage]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// The data directory (the sled database lives in `<data_dir>/db`). Default
    /// `./turnstile-data`.
    pub data_dir: PathBuf,
    /// sled's page cache in bytes. sled's own default (1 GiB) is far too much for an embedded
    /// default. Default 64 MiB.
    pub cache_capacity_bytes: u64,
    /// Memory for the newest transcript entries of recently active sessions, in bytes, so a
    /// turn's context is assembled without reading its history back from sled; least recently
    /// used sessions go first. 0 turns it off. Default 64 MiB: about 190,000 short turns (a
    /// user message and an answer of a few words cost about 340 bytes), e.g. 2,000 sessions
    /// of 100 messages. A cache smaller than the sessions in use thrashes: taken in turn, each
    /// session's tail was evicted just before it was needed, and every turn read its history
    /// back from sled (over HTTP with 1,000 sessions of up to about 130 messages, 64 MiB
    /// instead of 16 took 0.89x the CPU per turn: BENCHMARKS.md, fifteenth session).
    pub transcript_cache_bytes: u64,
    /// `strict` (default) or `batched`.
    pub durability: Durability,
    /// Flush period for `batched` durability, in ms. Default 100.
    pub flush_every_ms: u64,
    /// Most unconsumed messages in the durable inbox across all sessions; past it submissions
    /// get 429. Default 100,000.
    pub max_queued_messages: usize,
    /// The disk budget for everything under `data_dir` (database, archives, exports, logs), in
    /// bytes, measured as blocks really allocated. Default 1 GiB.
    pub max_disk_bytes: u64,
    /// Fraction of `max_disk_bytes` above which the janitor frees space. Default 0.8.
    pub high_water: f64,
    /// How often the janitor measures the data dir, in ms (it also runs at once when writes
    /// may have crossed high water). Default 60,000.
    pub janitor_interval_ms: u64,
    /// `enforce` (default: archives are deleted and sessions evicted) or `warn` (only logged).
    /// SPEC §8 calls it `mode`; both names are accepted.
    #[serde(alias = "mode")]
    pub janitor_mode: JanitorMode,
    /// Write an evicted session's transcript as gzip-compressed JSONL into
    /// `<data_dir>/archives` before evicting it. Archives count against the budget and are the
    /// first thing deleted. Default false.
    pub keep_archives: bool,
    /// Sessions not updated for this many days are evicted (an import counts as an update, so
    /// imported history is kept on the first start); 0 keeps them. Default 30.
    pub prune_after_days: u32,
    /// Most sessions kept; the oldest beyond it are evicted. Default: no limit.
    pub max_sessions: Option<u64>,
    /// Share of `max_disk_bytes` for the cold tier: sessions evicted for the budget are moved
    /// into compressed segment files under `<data_dir>/cold` (loaded back on their next
    /// message or read) instead of deleted, and the oldest segments are deleted past this
    /// share. 0 turns the cold tier off (evictions delete). In `[0, 0.6]`, used up to half of
    /// `high_water`. Default 0.4: on, because sled alone holds live data to about a fifth of
    /// the budget, while a share of 0.4 keeps well over the budget itself in raw transcript
    /// text (compressed segments, no rewrite copy; see docs/storage.md for the measurements).
    pub cold_max_fraction: f64,
    /// Compress the database's pages (sled's zstd, level −1). Small chat records leave sled
    /// several disk bytes per byte stored; compressed pages hold short conversations in a
    /// third to a half of that, for 23–48 µs more CPU per turn (docs/storage.md). Applies to
    /// a database when it is created: an existing one keeps the mode it was made with until
    /// the janitor copies it into a new one (its first pass with room for the copy, when
    /// this is on). Default true.
    pub compression: bool,
}

/// What the janitor does above high water.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JanitorMode {
    /// Delete archives, then evict sessions, until usage is below high water.
    Enforce,
    /// Only log (and report) what would be freed.
    Warn,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./turnstile-data"),
            cache_capacity_bytes: 64 * 1024 * 1024,
            transcript_cache_bytes: 64 * 1024 * 1024,
            durability: Durability::Strict,
            flush_every_ms: 100,
            max_queued_messages: 100_000,
            max_disk_bytes: 1 << 30,
            high_water: 0.8,
            janitor_interval_ms: 60_000,
            janitor_mode: JanitorMode::Enforce,
            keep_archives: false,
            prune_after_days: 30,
            max_sessions: None,
            cold_max_fraction: DEFAULT_COLD_FRACTION,
            compression: true,
        }
    }
}

impl StorageConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "storage.cache_capacity_bytes",
            self.cache_capacity_bytes,
            MIN_CACHE_BYTES..=MAX_DISK_BYTES,
        )?;
        in_range(
            "storage.transcript_cache_bytes",
            self.transcript_cache_bytes,
            0..=MAX_DISK_BYTES,
        )?;
        in_range(
            "storage.flush_every_ms",
            self.flush_every_ms,
            1..=MAX_DURATION_MS,
        )?;
        in_range(
            "storage.max_queued_messages",
            self.max_queued_messages,
            1..=MAX_QUEUED_MESSAGES,
        )?;
        in_range(
            "storage.max_disk_bytes",
            self.max_disk_bytes,
            MIN_DISK_BYTES..=MAX_DISK_BYTES,
        )?;
        fraction("storage.high_water", self.high_water, true)?;
        in_range(
            "storage.janitor_interval_ms",
            self.janitor_interval_ms,
            1..=MAX_DURATION_MS,
        )?;
        in_range(
            "storage.prune_after_days",
            self.prune_after_days,
            0..=MAX_PRUNE_DAYS,
        )?;
        if let Some(max) = self.max_sessions {
            in_range("storage.max_sessions", max, 1..=MAX_SESSIONS)?;
        }
        in_range(
            "storage.cold_max_fraction",
            self.cold_max_fraction,
            0.0..=MAX_COLD_FRACTION,
        )
    }
}
