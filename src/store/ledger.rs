//! The ledger: a small file beside the database that says how far the database was durable,
//! so a lost tail (sled recovering only a prefix of its log after damage) is detected and
//! named instead of served silently.
//!
//! The store counts accepted messages and turn commits (one atomic add each). Before every
//! group-commit flush the flusher stamps a [`Mark`] (epoch, counters) into the database's
//! `meta` tree, so the flush covers it; after a successful flush it writes the same mark to
//! `<data_dir>/LEDGER` (checksummed, written aside, fsynced, renamed), at most once per
//! [`LEDGER_INTERVAL`] and off the acknowledgement path. On open, a database whose own mark is
//! older than the ledger's lost writes that were durable: the difference in the counters says
//! how many messages and commits are missing. The last [`LEDGER_INTERVAL`] before damage may
//! go unnoticed; anything older does not. While a loss is unaccepted the ledger is frozen
//! (never rewritten), so the evidence survives every open until an operator accepts it
//! (`turnstile serve --accept-data-loss`), which re-baselines it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::generations::write_durably;
use crate::error::StoreError;

/// The ledger file under the data dir.
pub(crate) const LEDGER_FILE: &str = "LEDGER";
/// The ledger is written at most this often (one small fsync), whatever the flush rate.
pub(crate) const LEDGER_INTERVAL: Duration = Duration::from_millis(250);
/// The `meta` key of the database's own mark.
const MARK_KEY: &[u8] = b"ledger_mark";
const HEADER: &str = "turnstile-ledger 1";

/// How far the database was durable: a flush epoch and the counters at that point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    /// Increases with every stamped flush, across generations and restarts.
    pub epoch: u64,
    /// Messages written to the inbox, counted since the store was created.
    pub enqueued: u64,
    /// Turns committed, counted likewise.
    pub commits: u64,
}

impl Mark {
    fn to_bytes(self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&self.epoch.to_be_bytes());
        out[8..16].copy_from_slice(&self.enqueued.to_be_bytes());
        out[16..].copy_from_slice(&self.commits.to_be_bytes());
        out
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        let word = |i: usize| {
            b.get(i..i + 8)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .map(u64::from_be_bytes)
        };
        (b.len() == 24).then_some(())?;
        Some(Mark {
            epoch: word(0)?,
            enqueued: word(8)?,
            commits: word(16)?,
        })
    }

    fn body(self) -> String {
        format!(
            "{HEADER} epoch={} enqueued={} commits={}",
            self.epoch, self.enqueued, self.commits
        )
    }

    /// The file's text: the body and its checksum.
    fn to_file(self) -> String {
        let body = self.body();
        format!("{body} check={:016x}\n", checksum(body.as_bytes()))
    }

    fn from_file(text: &str) -> Option<Self> {
        let line = text.trim_end();
        let (body, check) = line.rsplit_once(" check=")?;
        if u64::from_str_radix(check, 16).ok()? != checksum(body.as_bytes()) {
            return None;
        }
        let mut fields = body.strip_prefix(HEADER)?.split_whitespace();
        let mut field = |name: &str| {
            fields
                .next()?
                .strip_prefix(name)?
                .strip_prefix('=')?
                .parse::<u64>()
                .ok()
        };
        Some(Mark {
            epoch: field("epoch")?,
            enqueued: field("enqueued")?,
            commits: field("commits")?,
        })
    }
}

/// FNV-1a: enough to tell a damaged ledger from a sound one.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What the ledger says is missing from the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// The ledger's mark (durable before).
    pub ledger: Mark,
    /// The database's own mark (`None`: it has none at all).
    pub database: Option<Mark>,
    /// The ledger file itself is damaged (its checksum or format is wrong).
    pub ledger_damaged: bool,
}

impl Loss {
    /// A one-line description for logs, errors and `doctor`.
    pub fn describe(&self) -> String {
        if self.ledger_damaged {
            return format!(
                "the {LEDGER_FILE} file is damaged, so the store cannot be checked for a lost tail"
            );
        }
        let db = self.database.unwrap_or_default();
        format!(
            "the database holds less than was durable: {} accepted message(s) and {} turn commit(s) \
             are missing (ledger epoch {}, database epoch {}{}); which sessions is not recorded",
            self.ledger.enqueued.saturating_sub(db.enqueued),
            self.ledger.commits.saturating_sub(db.commits),
            self.ledger.epoch,
            db.epoch,
            if self.database.is_none() {
                ", the database has no mark at all"
            } else {
                ""
            }
        )
    }
}

/// The counters, the flusher's stamp and the file.
pub(super) struct Ledger {
    data_dir: PathBuf,
    epoch: AtomicU64,
    enqueued: AtomicU64,
    commits: AtomicU64,
    /// A loss was found and not accepted: the file is never rewritten.
    frozen: AtomicBool,
    /// A file write is running (at most one at a time).
    writing: AtomicBool,
    last_written: Mutex<Option<Instant>>,
}

/// The ledger file's mark: `Ok(None)` when there is no file, `Err(())` when it is damaged.
fn read_file(data_dir: &Path) -> Result<Option<Mark>, ()> {
    match std::fs::read(data_dir.join(LEDGER_FILE)) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            Mark::from_file(&text).map(Some).ok_or(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(_) => Err(()),
    }
}

/// The database's own mark.
pub(super) fn db_mark(db: &sled::Db) -> Result<Option<Mark>, StoreError> {
    let meta = db
        .open_tree("meta")
        .map_err(StoreError::sled("opening meta"))?;
    Ok(meta
        .get(MARK_KEY)
        .map_err(StoreError::sled("reading the ledger mark"))?
        .and_then(|v| Mark::from_bytes(&v)))
}

impl Ledger {
    /// Compares the ledger file with the database's mark; the counters continue from the
    /// database's mark and the epoch from the larger of both. Returns the ledger and what is
    /// missing, if anything (then the ledger is frozen).
    pub(super) fn open(data_dir: &Path, db: &sled::Db) -> Result<(Self, Option<Loss>), StoreError> {
        let database = db_mark(db)?;
        let file = read_file(data_dir);
        let loss = match file {
            Err(()) => Some(Loss {
                ledger: Mark::default(),
                database,
                ledger_damaged: true,
            }),
            Ok(Some(ledger)) if database.is_none_or(|d| d.epoch < ledger.epoch) => Some(Loss {
                ledger,
                database,
                ledger_damaged: false,
            }),
            Ok(_) => None,
        };
        let base = database.unwrap_or_default();
        let file_epoch = file.ok().flatten().map_or(0, |m| m.epoch);
        let ledger = Ledger {
            data_dir: data_dir.to_path_buf(),
            epoch: AtomicU64::new(base.epoch.max(file_epoch)),
            enqueued: AtomicU64::new(base.enqueued),
            commits: AtomicU64::new(base.commits),
            frozen: AtomicBool::new(loss.is_some()),
            writing: AtomicBool::new(false),
            last_written: Mutex::new(None),
        };
        Ok((ledger, loss))
    }

    /// One message written to the inbox.
    pub(super) fn enqueued(&self) {
        self.enqueued.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` turns committed.
    pub(super) fn committed(&self, n: usize) {
        self.commits.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Before a flush of `db`: stamps a new mark into it (the flush makes it durable). The
    /// counters are read first, so every write they count finished before the stamp. A frozen
    /// ledger stamps nothing: a database that lost its tail must not catch up with the ledger
    /// by being opened.
    pub(super) fn stamp(&self, db: &sled::Db) -> Result<Mark, StoreError> {
        let enqueued = self.enqueued.load(Ordering::Acquire);
        let commits = self.commits.load(Ordering::Acquire);
        if self.frozen.load(Ordering::Acquire) {
            return Ok(Mark {
                epoch: self.epoch.load(Ordering::Acquire),
                enqueued,
                commits,
            });
        }
        let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        let mark = Mark {
            epoch,
            enqueued,
            commits,
        };
        db.open_tree("meta")
            .and_then(|m| m.insert(MARK_KEY, &mark.to_bytes()))
            .map_err(StoreError::sled("stamping the ledger mark"))?;
        Ok(mark)
    }

    /// After a flush that covered `mark`: whether the file is due for it.
    pub(super) fn due(&self) -> bool {
        if self.frozen.load(Ordering::Acquire) || self.writing.load(Ordering::Acquire) {
            return false;
        }
        let last = self.last_written.lock().map(|l| *l).unwrap_or(None);
        last.is_none_or(|t| t.elapsed() >= LEDGER_INTERVAL)
    }

    /// Writes `mark` to the file (blocking: call on the blocking pool). At most one write
    /// runs at a time; a frozen ledger is never written.
    pub(super) fn write(&self, mark: Mark) {
        if self.frozen.load(Ordering::Acquire) || self.writing.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Ok(mut last) = self.last_written.lock() {
            *last = Some(Instant::now());
        }
        if let Err(e) = write_durably(&self.data_dir, LEDGER_FILE, mark.to_file().as_bytes()) {
            tracing::warn!(error = %e, "could not write the ledger");
        }
        self.writing.store(false, Ordering::Release);
    }

    /// Writes `mark` now, however recently the file was written (on close).
    pub(super) fn write_now(&self, mark: Mark) {
        if let Ok(mut last) = self.last_written.lock() {
            *last = None;
        }
        self.write(mark);
    }

    /// Accepts a detected loss: the next write re-baselines the file on what the database
    /// holds.
    pub(super) fn unfreeze(&self) {
        self.frozen.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_round_trips_and_damage_is_seen() {
        let mark = Mark {
            epoch: 7,
            enqueued: 300,
            commits: 150,
        };
        let text = mark.to_file();
        assert_eq!(Mark::from_file(&text), Some(mark));
        let flipped = text.replace("300", "301");
        assert_eq!(Mark::from_file(&flipped), None);
        assert_eq!(Mark::from_file("garbage"), None);
        assert_eq!(Mark::from_bytes(&mark.to_bytes()), Some(mark));
    }

    #[test]
    fn a_database_behind_its_ledger_is_a_loss_and_freezes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().temporary(true).open().unwrap();
        let (ledger, loss) = Ledger::open(dir.path(), &db).unwrap();
        assert!(loss.is_none(), "no ledger yet: nothing to compare");
        for _ in 0..5 {
            ledger.enqueued();
        }
        ledger.committed(2);
        let first = ledger.stamp(&db).unwrap();
        ledger.write(first);
        // A later durable flush the database then loses: the ledger is ahead.
        ledger.enqueued();
        let later = Mark {
            epoch: first.epoch + 1,
            enqueued: 6,
            commits: 2,
        };
        *ledger.last_written.lock().unwrap() = None;
        ledger.write(later);
        let (reopened, loss) = Ledger::open(dir.path(), &db).unwrap();
        let loss = loss.expect("the database's mark is behind the ledger");
        assert!(
            loss.describe().contains("1 accepted message(s)"),
            "{}",
            loss.describe()
        );
        assert!(!reopened.due(), "a frozen ledger is never rewritten");
        reopened.stamp(&db).unwrap();
        assert!(
            Ledger::open(dir.path(), &db).unwrap().1.is_some(),
            "opening a store with a loss does not stamp it away"
        );
        reopened.write(first);
        assert_eq!(read_file(dir.path()), Ok(Some(later)));
        reopened.unfreeze();
        let now = reopened.stamp(&db).unwrap();
        reopened.write(now);
        assert!(Ledger::open(dir.path(), &db).unwrap().1.is_none());
    }
}
