//! The backup `serve` takes before a schema migration changes the store's layout: the
//! database as the previous version left it, with the cold tier's packs and the archives, in
//! the format of `turnstile backup` (`backup_file.rs`), at
//! `<data_dir>/pre-migration-v<version>.backup`. `turnstile restore --from` that file into a
//! new data dir gives back the store the previous binary served. It is kept until the next
//! start that needs no migration has served (`Store::settle_after_start`), so a migration that
//! turns out badly can be undone with the previous binary.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use super::backup::{open_packs, write_file};
use super::rewrite::{id_base, ID_BASE_KEY};
use super::Store;
use crate::error::StoreError;

const PREFIX: &str = "pre-migration-v";
const SUFFIX: &str = ".backup";

/// Writes the pre-migration backup of `db` (schema `from`) under `data_dir`, unless one for
/// `from` exists (a migration interrupted by a crash: the first backup is the older state).
/// Returns its path.
pub(super) fn back_up(db: &sled::Db, data_dir: &Path, from: u8) -> Result<PathBuf, StoreError> {
    let path = data_dir.join(format!("{PREFIX}{from}{SUFFIX}"));
    if path.exists() {
        return Ok(path);
    }
    if super::cold_legacy::may_exist(data_dir) {
        tracing::warn!(
            "the cold tier still holds files of the one-file-per-session layout: the \
             pre-migration backup leaves them out (the migration does not change them)"
        );
    }
    db.flush()
        .map_err(StoreError::sled("flushing before the pre-migration backup"))?;
    // A restored database hands out ids from 0: it must start above every id this one gave.
    let next = id_base(db)?
        + db.generate_id()
            .map_err(StoreError::sled("reading the next id"))?
        + 1;
    let tmp = data_dir.join(format!("{PREFIX}{from}{SUFFIX}.tmp"));
    let written = (|| {
        let file = File::create(&tmp).map_err(StoreError::file("create", &tmp))?;
        let mut out = BufWriter::new(file);
        let meta = [(ID_BASE_KEY, next.to_be_bytes().to_vec())];
        write_file(db, open_packs(data_dir)?, data_dir, &meta, &mut out)?;
        let file = out
            .into_inner()
            .map_err(|e| StoreError::file("write", &tmp)(e.into_error()))?;
        file.sync_all().map_err(StoreError::file("sync", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(StoreError::file("rename", &tmp))?;
        File::open(data_dir)
            .and_then(|d| d.sync_all())
            .map_err(StoreError::file("sync", data_dir))
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(path)
}

/// The pre-migration backups under `data_dir`.
fn backups(data_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(PREFIX) && (name.ends_with(SUFFIX) || name.ends_with(".tmp"))
        })
        .map(|e| e.path())
        .collect()
}

impl Store {
    /// Called once a runtime has started on this store: when this open migrated nothing, the
    /// backups taken before an earlier migration have served their purpose and are deleted.
    pub(crate) fn settle_after_start(&self) {
        if self.shared.migrated_at_open.is_some() {
            return;
        }
        for path in backups(&self.shared.data_dir) {
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "pre-migration backup removed: the migrated store has served a start")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "could not remove a pre-migration backup")
                }
            }
        }
    }
}
