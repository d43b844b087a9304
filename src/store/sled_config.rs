//! The one place a sled database's settings are chosen, for every database the store opens
//! (a generation, a rewrite's copy, a backup's staging copy, a restore).

use std::path::Path;

use crate::config::StorageConfig;

/// zstd level of compressed pages. On short chat records level 1 keeps nearly all of the
/// gain of sled's default (5): a copy of 20,000 one-turn sessions took 18.4 MB at level 1,
/// 18.9 MB at level 3 and 63 MB uncompressed.
const COMPRESSION_LEVEL: i32 = -1;

/// The file in which sled keeps the settings a database was created with.
const SLED_CONF: &str = "conf";

/// sled's settings for the database in `dir`: page cache and flush period from `config`, and
/// compression as the database was created with (sled refuses to open it otherwise), or as
/// `config` says for a new one.
pub(super) fn sled_config(dir: &Path, config: &StorageConfig) -> sled::Config {
    let compress = created_compressed(dir).unwrap_or(config.compression);
    sled::Config::new()
        .path(dir)
        .cache_capacity(config.cache_capacity_bytes)
        .flush_every_ms(Some(config.flush_every_ms.max(1)))
        .use_compression(compress)
        .compression_factor(COMPRESSION_LEVEL)
}

/// Whether the existing database in `dir` was created with compressed pages; `None` when it
/// has no settings file yet (a new database) or one this cannot read (sled reports it).
pub(super) fn created_compressed(dir: &Path) -> Option<bool> {
    let bytes = std::fs::read(dir.join(SLED_CONF)).ok()?;
    // `key: value` lines, then a 4-byte checksum.
    String::from_utf8_lossy(&bytes)
        .lines()
        .find_map(|line| line.strip_prefix("use_compression: "))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path, compression: bool) -> sled::Db {
        let config = StorageConfig {
            compression,
            ..StorageConfig::default()
        };
        sled_config(dir, &config).open().unwrap()
    }

    #[test]
    fn a_database_keeps_the_mode_it_was_created_with() {
        let tmp = tempfile::tempdir().unwrap();
        let (plain, packed) = (tmp.path().join("plain"), tmp.path().join("packed"));
        for (dir, compression) in [(&plain, false), (&packed, true)] {
            let db = open(dir, compression);
            db.insert(b"k", b"a chat message".to_vec()).unwrap();
            db.flush().unwrap();
        }
        assert_eq!(created_compressed(&plain), Some(false));
        assert_eq!(created_compressed(&packed), Some(true));
        // Opened with the other setting, each still opens and reads back.
        for (dir, compression) in [(&plain, true), (&packed, false)] {
            let db = open(dir, compression);
            assert_eq!(
                db.get(b"k").unwrap().as_deref(),
                Some(&b"a chat message"[..])
            );
        }
        assert_eq!(created_compressed(&tmp.path().join("new")), None);
    }
}
