//! `turnstile doctor [--repair]`: checks the store and says what is wrong in words an operator
//! can act on — a damaged `CURRENT`, a lost tail the ledger detected, a full disk, data sled
//! cannot read — never with a panic.

use std::path::PathBuf;

use turnstile::config::StorageConfig;
use turnstile::error::StoreError;
use turnstile::store::{Depth, Store};

/// Runs the checks (and with `repair`, the repairs), printing the report. Exits 1 when
/// problems remain.
pub(crate) async fn doctor(data_dir: PathBuf, repair: bool) -> anyhow::Result<()> {
    if !Store::exists(&data_dir) {
        anyhow::bail!("no store under {}", data_dir.display());
    }
    let config = StorageConfig {
        data_dir,
        ..Default::default()
    };
    let store = match Store::open_unrepaired(&config) {
        Ok(store) => store,
        Err(e) if repair && needs_generation_repair(&e) && !disk_full(&config.data_dir) => {
            eprintln!("the current database generation cannot be used: {e}");
            let fixed = Store::repair_generations(&config)?;
            println!("CURRENT now names {}", fixed.chosen);
            for aside in &fixed.set_aside {
                println!("set aside (kept, not used): damaged.{aside}");
            }
            Store::open_unrepaired(&config)?
        }
        Err(e) => return Err(explain(&config, e)),
    };
    let report = store.doctor(Depth::Full, repair);
    let closed = store.close().await;
    let report = report.map_err(|e| explain(&config, e))?;
    print!("{report}");
    closed?;
    if report.data_loss.is_some() {
        eprintln!(
            "the lost data cannot be repaired; `turnstile serve --accept-data-loss` serves what is left"
        );
        std::process::exit(1);
    }
    if !report.is_clean() && !repair {
        eprintln!("run `turnstile doctor --repair` to fix these");
        std::process::exit(1);
    }
    Ok(())
}

/// A generation that fails to open on a full disk is not damaged: never set it aside then.
fn disk_full(dir: &std::path::Path) -> bool {
    free_bytes(dir) == Some(0)
}

/// Errors `doctor --repair` answers by choosing another generation.
fn needs_generation_repair(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Generations { .. } | StoreError::Corrupt { .. } | StoreError::Sled { .. }
    )
}

/// A full disk reads as a full disk, not as corrupt data.
fn explain(config: &StorageConfig, e: StoreError) -> anyhow::Error {
    if let Some(free) = free_bytes(&config.data_dir) {
        if free < turnstile::store::PROBE_BYTES as u64 {
            return anyhow::anyhow!(
                "the disk holding {} is full ({free} bytes free); free some space and run doctor again ({e})",
                config.data_dir.display()
            );
        }
    }
    e.into()
}

/// Free bytes on the filesystem of `dir`, measured by writing a probe (no statvfs without
/// unsafe code): `Some(0)` when even that fails for lack of space.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::io::Write;
    let path = dir.join(".doctor-probe");
    let result = std::fs::File::create(&path).and_then(|mut f| {
        f.write_all(&vec![0u8; turnstile::store::PROBE_BYTES])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&path);
    match result {
        Ok(()) => Some(turnstile::store::PROBE_BYTES as u64),
        Err(e) if e.raw_os_error() == Some(28) => Some(0),
        Err(_) => None,
    }
}
