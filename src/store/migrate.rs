//! Schema migrations, run on open when the stored schema version is older than this build's.
//!
//! Each step is idempotent and the version is bumped (and flushed) only after its step
//! completes, so a crash during a migration re-runs that step on the next open.

use super::{by_updated, decode, SessionRecord, SCHEMA_VERSION};
use crate::error::StoreError;

/// The `meta` key holding the one-byte schema version.
pub(super) const SCHEMA_KEY: &[u8] = b"schema_version";

/// The stored schema version when `db` needs a migration (older than this build's).
pub(super) fn pending(db: &sled::Db) -> Result<Option<u8>, StoreError> {
    let meta = db
        .open_tree("meta")
        .map_err(StoreError::sled("opening meta"))?;
    Ok(meta
        .get(SCHEMA_KEY)
        .map_err(StoreError::sled("reading schema"))?
        .map(|v| v.first().copied().unwrap_or(0))
        .filter(|v| *v < SCHEMA_VERSION))
}

/// Brings `db` to [`SCHEMA_VERSION`]. Returns the version migrated from, if any.
pub(super) fn run(db: &sled::Db) -> Result<Option<u8>, StoreError> {
    let meta = db
        .open_tree("meta")
        .map_err(StoreError::sled("opening meta"))?;
    let found = match meta
        .get(SCHEMA_KEY)
        .map_err(StoreError::sled("reading schema"))?
    {
        // A new database: nothing to migrate.
        None => {
            set_version(db, &meta, SCHEMA_VERSION)?;
            return Ok(None);
        }
        Some(v) => v.first().copied().unwrap_or(0),
    };
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let mut version = found;
    while version < SCHEMA_VERSION {
        match version {
            0 | 1 => build_by_updated(db)?,
            2 => rebuild_by_updated(db)?,
            _ => {}
        }
        version += 1;
        set_version(db, &meta, version)?;
        tracing::info!(from = version - 1, to = version, "store schema migrated");
    }
    Ok((found < SCHEMA_VERSION).then_some(found))
}

fn set_version(db: &sled::Db, meta: &sled::Tree, version: u8) -> Result<(), StoreError> {
    meta.insert(SCHEMA_KEY, &[version])
        .map_err(StoreError::sled("writing schema"))?;
    db.flush()
        .map_err(StoreError::sled("flushing a migration"))?;
    Ok(())
}

/// v2 → v3: the `by_updated` index holds minutes instead of milliseconds; its entries are
/// rebuilt from the session records.
fn rebuild_by_updated(db: &sled::Db) -> Result<(), StoreError> {
    db.open_tree(by_updated::TREE)
        .map_err(StoreError::sled("opening by_updated"))?
        .clear()
        .map_err(StoreError::sled("clearing by_updated"))?;
    build_by_updated(db)
}

/// v1 → v2: the `by_updated` eviction index, built from the session records. Undecodable
/// records are left for the doctor, which quarantines them right after.
fn build_by_updated(db: &sled::Db) -> Result<(), StoreError> {
    let sessions = db
        .open_tree("sessions")
        .map_err(StoreError::sled("opening sessions"))?;
    let index = db
        .open_tree(by_updated::TREE)
        .map_err(StoreError::sled("opening by_updated"))?;
    for kv in sessions.iter() {
        let (k, v) = kv.map_err(StoreError::sled("scanning sessions"))?;
        let (Ok(key), Ok(record)) = (
            std::str::from_utf8(&k),
            decode::<SessionRecord>("sessions", &v),
        ) else {
            continue;
        };
        index
            .insert(by_updated::key(record.updated_at_ms, key), &[])
            .map_err(StoreError::sled("building by_updated"))?;
    }
    Ok(())
}
