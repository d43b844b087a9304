//! The data-dir subcommands (the server must not be running on the dir): `import openclaw`,
//! `export` (`doctor` has its own module).

use std::path::PathBuf;

use anyhow::Context;
use turnstile::model::{Encoding, TokenCounter};
use turnstile::store::Store;
use turnstile::Config;

fn storage_config(data_dir: PathBuf) -> turnstile::config::StorageConfig {
    turnstile::config::StorageConfig {
        data_dir,
        ..Default::default()
    }
}

pub(crate) async fn import_openclaw(dir: PathBuf, data_dir: PathBuf) -> anyhow::Result<()> {
    let store = Store::open(&storage_config(data_dir))?;
    let tokens = TokenCounter::new(Encoding::for_model(&Config::default().model.model));
    let report = turnstile::store::import_openclaw(&store, &dir, &|t| tokens.count(t))
        .with_context(|| format!("importing {}", dir.display()))?;
    print!("{report}");
    store.close().await?;
    Ok(())
}

pub(crate) async fn export(
    key: String,
    data_dir: PathBuf,
    out: Option<PathBuf>,
) -> anyhow::Result<()> {
    if !Store::exists(&data_dir) {
        anyhow::bail!("no store under {}", data_dir.display());
    }
    let store = Store::open(&storage_config(data_dir))?;
    let key = turnstile::inbound::normalize_session_key(&key);
    let written = match &out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            let mut w = std::io::BufWriter::new(file);
            store.export_session(&key, &mut w)?
        }
        None => {
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            store.export_session(&key, &mut w)?
        }
    };
    store.close().await?;
    match written {
        Some(n) => {
            eprintln!("exported {n} entries of {key}");
            Ok(())
        }
        None => anyhow::bail!("no session {key:?}"),
    }
}
