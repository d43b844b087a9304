//! `turnstile backup` (of a running server over HTTP, or of a stopped server's data dir) and
//! `turnstile restore`. The file format and the consistency argument are in
//! `store/backup.rs` and `store/backup_file.rs`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use turnstile::config::StorageConfig;
use turnstile::store::{restore_backup, verify_backup, Depth, Store};

use super::target::{Conn, Target};

/// `turnstile backup …`
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    /// Write the backup to this file (it must not exist; written aside, checked, then renamed).
    #[arg(long)]
    to: PathBuf,
    #[command(flatten)]
    target: Target,
}

/// The file a backup is written to until it is complete and checked.
fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    to.with_file_name(name)
}

/// Writes a backup of the target to `args.to`: streamed from a running server
/// (`POST /v1/admin/backup`) or taken from a data dir no server runs on.
pub(crate) async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let to = args.to;
    if to.exists() {
        bail!(
            "{} already exists; choose another name (a backup never overwrites a file)",
            to.display()
        );
    }
    let partial = partial_path(&to);
    let started = Instant::now();
    let conn = args.target.connect().await?;
    let written = write_backup(&conn, &partial).await;
    conn.close().await?;
    let written = written.and_then(|()| {
        verify_backup(&partial).context("the backup written is not sound; it was not kept")
    });
    let bytes = match written {
        Ok(covered) => covered,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, &to)
        .with_context(|| format!("renaming {} to {}", partial.display(), to.display()))?;
    let report = serde_json::json!({
        "file": to.display().to_string(),
        "bytes": bytes + 32,
        "elapsed_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    });
    if args.target.json {
        println!("{report}");
    } else {
        println!(
            "backup written to {} ({} bytes, {} ms, checksum verified)",
            to.display(),
            report["bytes"],
            report["elapsed_ms"]
        );
    }
    Ok(())
}

async fn write_backup(conn: &Conn, partial: &Path) -> anyhow::Result<()> {
    match conn {
        Conn::Local(runtime) => {
            let (runtime, partial) = (runtime.clone(), partial.to_path_buf());
            tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                let file = std::fs::File::options()
                    .write(true)
                    .create_new(true)
                    .open(&partial)
                    .with_context(|| format!("creating {}", partial.display()))?;
                let mut out = std::io::BufWriter::new(file);
                let report = runtime.backup(&mut out)?;
                let file = out.into_inner().map_err(|e| e.into_error())?;
                file.sync_all()?;
                eprintln!(
                    "{} keys, {} files; writes were held {} ms",
                    report.keys, report.files, report.pause_ms
                );
                Ok(())
            })
            .await?
        }
        Conn::Http { client, base, key } => {
            let mut request = client.post(format!("{base}/v1/admin/backup"));
            if let Some(key) = key {
                request = request.bearer_auth(key.expose());
            }
            let response = request
                .send()
                .await
                .with_context(|| format!("is a server running at {base}? (or use --data-dir)"))?;
            let status = response.status();
            if !status.is_success() {
                let body: serde_json::Value = response.json().await.unwrap_or_default();
                let message = body["error"]["message"].as_str().unwrap_or("no details");
                bail!("the server answered {status}: {message}");
            }
            let mut file = tokio::fs::File::options()
                .write(true)
                .create_new(true)
                .open(partial)
                .await
                .with_context(|| format!("creating {}", partial.display()))?;
            let mut body = response.bytes_stream();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.context("the server stopped sending the backup")?;
                file.write_all(&chunk)
                    .await
                    .with_context(|| format!("writing {}", partial.display()))?;
            }
            file.sync_all().await?;
            Ok(())
        }
    }
}

/// Rebuilds `data_dir` (absent or empty) from the backup `from`, then checks it as
/// `turnstile doctor` does.
pub(crate) async fn restore(from: PathBuf, data_dir: PathBuf) -> anyhow::Result<()> {
    let (f, d) = (from.clone(), data_dir.clone());
    let report = tokio::task::spawn_blocking(move || restore_backup(&f, &d)).await??;
    println!(
        "restored {} trees, {} keys and {} files from {} into {}",
        report.trees,
        report.keys,
        report.files,
        from.display(),
        data_dir.display()
    );
    let config = StorageConfig {
        data_dir,
        ..Default::default()
    };
    let store = Store::open_unrepaired(&config)?;
    let checked = store.doctor(Depth::Full, false);
    store.close().await?;
    let checked = checked?;
    print!("{checked}");
    if !checked.is_clean() {
        bail!("the restored store has problems (above); `turnstile doctor --repair` fixes them");
    }
    Ok(())
}
