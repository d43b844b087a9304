//! Database generations on disk: `<data_dir>/db` (the first), `<data_dir>/db.<n>`, and the
//! file `<data_dir>/CURRENT` naming the current one.
//!
//! Nothing is deleted on doubt. A `CURRENT` that is garbage, names a generation that does not
//! exist, or names one older than a complete (verified) generation makes the store refuse to
//! open, naming the generations found; `turnstile doctor --repair` then points `CURRENT` at the
//! newest generation that opens and verifies ([`Store::repair_generations`]). A generation is
//! marked complete (the `VERIFIED` file inside it, fsynced) only after it was copied, flushed
//! and checked, and before `CURRENT` is switched to it. On open, only two kinds of directory
//! are deleted: generations newer than the current one without the mark (a rewrite
//! interrupted before its switch) and generations older than the current one (retired after a
//! durable switch).

use std::path::{Path, PathBuf};

use super::{contain::contain, Store, DB_DIR};
use crate::config::StorageConfig;
use crate::error::StoreError;

/// The file naming the current generation's directory.
pub(super) const CURRENT_FILE: &str = "CURRENT";
/// The file inside a generation's directory that says it is complete and checked.
pub(super) const VERIFIED_FILE: &str = "VERIFIED";
/// Prefix given to generation directories that `doctor --repair` found unusable: they are
/// kept (never deleted by the store) but no longer count as generations.
pub(super) const DAMAGED_PREFIX: &str = "damaged.";

/// A generation's number from its directory name (`db` is 0, `db.<n>` is n).
pub(super) fn generation_number(name: &str) -> Option<u64> {
    if name == DB_DIR {
        return Some(0);
    }
    let n = name.strip_prefix("db.")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// The name of generation `n`.
pub(super) fn generation_name(n: u64) -> String {
    if n == 0 {
        DB_DIR.to_string()
    } else {
        format!("db.{n}")
    }
}

/// The generation directories under `data_dir`, oldest first.
pub(super) fn list(data_dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return Vec::new();
    };
    let mut out: Vec<(u64, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let n = e.file_name().to_str().and_then(generation_number)?;
            Some((n, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// Whether a generation was marked complete.
pub(super) fn is_verified(dir: &Path) -> bool {
    dir.join(VERIFIED_FILE).is_file()
}

/// The generations found, for messages: `db, db.3 (complete), db.4 (incomplete)`.
fn describe(data_dir: &Path) -> String {
    let found = list(data_dir);
    if found.is_empty() {
        return "none".to_string();
    }
    found
        .iter()
        .map(|(n, dir)| {
            let state = if is_verified(dir) {
                "complete"
            } else {
                "no completion mark"
            };
            format!("{} ({state})", generation_name(*n))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn refuse(data_dir: &Path, reason: String) -> StoreError {
    StoreError::Generations {
        reason,
        found: describe(data_dir),
    }
}

/// The current generation's directory (`db` for a store that never had a rewrite), or an
/// error naming what was found when `CURRENT` cannot be trusted.
pub(super) fn current_dir(data_dir: &Path) -> Result<PathBuf, StoreError> {
    let path = data_dir.join(CURRENT_FILE);
    let current = match std::fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let name = text.trim();
            let Some(n) = generation_number(name) else {
                return Err(refuse(
                    data_dir,
                    format!(
                        "{} holds {name:?}, not a database generation",
                        path.display()
                    ),
                ));
            };
            let dir = data_dir.join(name);
            if !dir.is_dir() {
                return Err(refuse(
                    data_dir,
                    format!("{} names {name}, which does not exist", path.display()),
                ));
            }
            (n, dir)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let first = data_dir.join(DB_DIR);
            let later = list(data_dir).into_iter().any(|(n, _)| n > 0);
            // Without CURRENT only the first generation can be current. If it is gone while
            // later ones exist, CURRENT was lost: refuse rather than start empty.
            if !first.exists() && later {
                return Err(refuse(
                    data_dir,
                    format!("{} is missing and {DB_DIR} does not exist", path.display()),
                ));
            }
            (0, first)
        }
        Err(e) => return Err(StoreError::file("read", &path)(e)),
    };
    let (n, dir) = current;
    if let Some((newer, _)) = list(data_dir)
        .into_iter()
        .find(|(m, d)| *m > n && is_verified(d))
    {
        return Err(refuse(
            data_dir,
            format!(
                "{} names {}, but the newer {} is complete",
                path.display(),
                generation_name(n),
                generation_name(newer)
            ),
        ));
    }
    Ok(dir)
}

/// Deletes what an open may delete (see the module doc): incomplete generations newer than
/// `current`, and generations older than it. Call only after `current` opened and checked.
pub(super) fn remove_stale(data_dir: &Path, current: &Path) {
    let Some(n) = current
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(generation_number)
    else {
        return;
    };
    for (m, dir) in list(data_dir) {
        let stale = m < n || (m > n && !is_verified(&dir));
        if !stale {
            continue;
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {
                let why = if m < n { "retired" } else { "incomplete" };
                tracing::info!(dir = %dir.display(), why, "deleted a database generation");
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "could not delete a database generation")
            }
        }
    }
}

/// Writes `contents` to `path` atomically and durably: written aside, fsynced, renamed, and
/// the directory fsynced.
pub(super) fn write_durably(dir: &Path, name: &str, contents: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = std::fs::File::create(&tmp).map_err(StoreError::file("create", &tmp))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(StoreError::file("write", &tmp))?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).map_err(StoreError::file("rename", &tmp))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::file("sync", dir))?;
    Ok(())
}

/// Points `CURRENT` at `name`, atomically and durably.
pub(super) fn switch_current(data_dir: &Path, name: &str) -> Result<(), StoreError> {
    write_durably(data_dir, CURRENT_FILE, name.as_bytes())
}

/// Marks the generation in `dir` complete.
pub(super) fn mark_verified(dir: &Path) -> Result<(), StoreError> {
    write_durably(dir, VERIFIED_FILE, b"ok")
}

/// Opens the generation in `dir` read-through and reads every key of every tree, with sled's
/// panics contained: the check `doctor --repair` uses to choose a generation.
fn opens_and_reads(dir: &Path, config: &StorageConfig) -> Result<u64, StoreError> {
    contain("checking a database generation", || {
        let db = super::sled_config::sled_config(dir, config)
            .open()
            .map_err(|source| StoreError::from_open(dir, source))?;
        let mut keys = 0u64;
        for name in db.tree_names() {
            let tree = db
                .open_tree(&name)
                .map_err(StoreError::sled("opening a tree"))?;
            for kv in tree.iter() {
                kv.map_err(StoreError::sled("reading a generation"))?;
                keys += 1;
            }
        }
        Ok(keys)
    })
}

/// What [`Store::repair_generations`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationRepair {
    /// The generation `CURRENT` now names.
    pub chosen: String,
    /// Newer generations that did not open or verify, renamed `damaged.<name>` (kept).
    pub set_aside: Vec<String>,
}

impl Store {
    /// Points `CURRENT` at the newest generation that opens and reads back completely; newer
    /// ones that do not are renamed `damaged.<name>` and kept. Nothing is deleted. For
    /// `turnstile doctor --repair`; the store must not be open.
    pub fn repair_generations(config: &StorageConfig) -> Result<GenerationRepair, StoreError> {
        let data_dir = &config.data_dir;
        let mut set_aside = Vec::new();
        for (n, dir) in list(data_dir).into_iter().rev() {
            let name = generation_name(n);
            match opens_and_reads(&dir, config) {
                Ok(keys) => {
                    mark_verified(&dir)?;
                    switch_current(data_dir, &name)?;
                    tracing::info!(generation = %name, keys, "CURRENT points at the newest generation that opens");
                    return Ok(GenerationRepair {
                        chosen: name,
                        set_aside,
                    });
                }
                Err(e) => {
                    let aside = data_dir.join(format!("{DAMAGED_PREFIX}{name}"));
                    tracing::warn!(generation = %name, error = %e, "generation does not open; set aside");
                    std::fs::rename(&dir, &aside).map_err(StoreError::file("rename", &dir))?;
                    set_aside.push(name);
                }
            }
        }
        Err(refuse(
            data_dir,
            "no generation opens and reads back".to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(dir: &Path, name: &str, verified: bool) {
        std::fs::create_dir(dir.join(name)).unwrap();
        if verified {
            std::fs::write(dir.join(name).join(VERIFIED_FILE), "ok").unwrap();
        }
    }

    #[test]
    fn a_lost_current_file_is_refused_not_guessed() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(current_dir(dir.path()).unwrap(), dir.path().join("db"));
        gen(dir.path(), "db.3", true);
        let e = current_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("db.3 (complete)") && e.contains("doctor --repair"),
            "{e}"
        );
        std::fs::write(dir.path().join(CURRENT_FILE), "db.3").unwrap();
        assert_eq!(current_dir(dir.path()).unwrap(), dir.path().join("db.3"));
        std::fs::write(dir.path().join(CURRENT_FILE), "../etc").unwrap();
        assert!(current_dir(dir.path()).is_err());
    }

    #[test]
    fn a_current_naming_a_missing_or_older_generation_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        gen(dir.path(), "db.12", true);
        for bad in ["db.13", "db.999", "\u{1}garbage", ""] {
            std::fs::write(dir.path().join(CURRENT_FILE), bad).unwrap();
            let e = current_dir(dir.path()).unwrap_err().to_string();
            assert!(e.contains("db.12 (complete)"), "{bad:?}: {e}");
        }
        // A flip that names an older generation still present is caught by the newer mark.
        gen(dir.path(), "db.8", true);
        std::fs::write(dir.path().join(CURRENT_FILE), "db.8").unwrap();
        let e = current_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("newer db.12 is complete"), "{e}");
        // Every directory is still there.
        assert!(dir.path().join("db.12").is_dir() && dir.path().join("db.8").is_dir());
    }

    #[test]
    fn only_incomplete_newer_and_older_generations_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        gen(dir.path(), "db.2", true);
        gen(dir.path(), "db.3", true);
        gen(dir.path(), "db.4", false);
        std::fs::write(dir.path().join(CURRENT_FILE), "db.3").unwrap();
        let current = current_dir(dir.path()).unwrap();
        remove_stale(dir.path(), &current);
        let left: Vec<u64> = list(dir.path()).into_iter().map(|(n, _)| n).collect();
        assert_eq!(left, vec![3]);
    }

    #[test]
    fn generation_names() {
        assert_eq!(generation_number("db"), Some(0));
        assert_eq!(generation_number("db.12"), Some(12));
        assert_eq!(generation_name(0), "db");
        assert_eq!(generation_name(7), "db.7");
        for bad in [
            "db.",
            "db.x",
            "db.-1",
            "archives",
            "../db.1",
            "db.1/..",
            "damaged.db.1",
        ] {
            assert_eq!(generation_number(bad), None, "{bad}");
        }
    }
}
