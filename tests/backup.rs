//! Online backup and restore through the real binary (issue 44): a backup of a server under
//! load, restored into a new data dir, holds every session acknowledged before it began, with
//! transcripts identical to the source's up to the cut; the restored server answers every
//! message it holds. Damaged backups and restores over a store are refused, changing nothing.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{group_key, run_cli, wait_all_answered, Msg, ServerProcess};

/// Concurrent senders during the backup, each on its own chat.
const SENDERS: usize = 6;

/// No compaction (a transcript must keep every message to be compared) and a context no run
/// fills: the same settings as `tests/durability.rs`.
const CONFIG: &str = "[storage]\ndurability = \"strict\"\n\
                      [compaction]\nwindow_trigger = false\n\
                      [context]\nmax_tokens = 100000000\n\
                      [context.presets.assistant]\nmax_tokens = 100000000\n\
                      [context.chat_kinds]\ngroup = \"assistant\"\n";

/// Session key → message ids acknowledged, in send order.
type Acked = Arc<Mutex<HashMap<String, Vec<String>>>>;

fn cli(args: &[&str]) -> (bool, String) {
    let (ok, out) = run_cli(args);
    println!("turnstile {}:\n{out}", args.join(" "));
    (ok, out)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

/// The transcript lines of `key` in `data_dir` as `turnstile export` writes them (the header
/// line, which holds counters of the moment, left out).
fn exported(data_dir: &Path, key: &str) -> Vec<String> {
    let (ok, out) = run_cli(&["export", key, "--data-dir", path(data_dir)]);
    assert!(ok, "export of {key} failed: {out}");
    out.lines()
        .filter(|l| l.starts_with("{\"type\":\"entry\""))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restores_every_acknowledged_session() {
    let (source, conf, work) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let server = ServerProcess::start(source.path(), conf.path(), CONFIG).await;
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let (api, acked, stop) = (server.api.clone(), Arc::clone(&acked), Arc::clone(&stop));
        senders.push(tokio::spawn(async move {
            let chat = format!("backup-{s}");
            for n in 0.. {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let id = format!("m-{s}-{n}");
                let msg = Msg::group(&chat, &id, &format!("{id} says hello"));
                let response = api
                    .client
                    .post(api.url("/v1/messages"))
                    .json(msg.json())
                    .send()
                    .await
                    .expect("posting a message");
                assert_eq!(response.status(), 202, "{id}");
                acked
                    .lock()
                    .unwrap()
                    .entry(group_key(&chat))
                    .or_default()
                    .push(id);
            }
        }));
    }
    support::eventually(support::PATIENCE, "load to flow", || {
        let n: usize = acked.lock().unwrap().values().map(Vec::len).sum();
        async move {
            if n >= 300 {
                Ok(())
            } else {
                Err(format!("{n} acknowledged"))
            }
        }
    })
    .await;

    // Everything acknowledged before the backup starts must be in it.
    let before: Vec<(String, Vec<String>)> = acked.lock().unwrap().clone().into_iter().collect();
    let file = work.path().join("turnstile.backup");
    let args = [
        "backup".to_string(),
        "--url".into(),
        server.url.clone(),
        "--to".into(),
        path(&file).into(),
    ];
    let (ok, out) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args)
    })
    .await
    .unwrap();
    assert!(ok, "backup failed: {out}");
    let during: usize = acked.lock().unwrap().values().map(Vec::len).sum();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.await.unwrap();
    }
    let after: Vec<(String, Vec<String>)> = acked.lock().unwrap().clone().into_iter().collect();
    let total: usize = after.iter().map(|(_, ids)| ids.len()).sum();
    println!("acknowledged: {during} when the backup ended, {total} in all");
    wait_all_answered(&server.api, &after).await;
    let (status, audit) = server.get("/v1/admin/audit").await;
    assert_eq!(status, 200);
    assert!(audit.to_string().contains("server.backup"), "{audit}");
    let mut server = server;
    server.stop().await;

    let restored = work.path().join("restored");
    let (ok, out) = cli(&[
        "restore",
        "--from",
        path(&file),
        "--data-dir",
        path(&restored),
    ]);
    assert!(ok, "restore failed: {out}");
    assert!(out.contains("problems found: 0"), "{out}");
    // The restored store is the source at one moment: each transcript is a prefix of the
    // source's, and holds at least what was acknowledged before the backup began (as entries
    // or as queued messages, answered below).
    for (key, ids) in &before {
        let cut = exported(&restored, key);
        let full = exported(source.path(), key);
        assert!(
            cut.len() <= full.len() && cut[..] == full[..cut.len()],
            "{key}: the restored transcript is not the source's up to the cut"
        );
        assert!(!ids.is_empty());
    }
    let server = ServerProcess::start(&restored, conf.path(), CONFIG).await;
    wait_all_answered(&server.api, &before).await;
    let keys: Vec<String> = server
        .sessions()
        .await
        .iter()
        .filter_map(|s| s["session_key"].as_str().map(str::to_string))
        .collect();
    for (key, _) in &before {
        assert!(keys.contains(key), "{key} missing after the restore");
    }
}

/// A small store, stopped, backed up from its data dir.
async fn small_backup(work: &Path) -> std::path::PathBuf {
    let data = work.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let conf = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(&data, conf.path(), CONFIG).await;
    let mut acked = Vec::new();
    for n in 0..5 {
        let id = format!("small-{n}");
        server.send(&Msg::group("small", &id, "hello")).await;
        acked.push(id);
    }
    wait_all_answered(&server.api, &[(group_key("small"), acked)]).await;
    server.stop().await;
    let file = work.join("small.backup");
    let (ok, out) = cli(&["backup", "--data-dir", path(&data), "--to", path(&file)]);
    assert!(ok, "backup of a stopped data dir failed: {out}");
    let (ok, out) = cli(&["backup", "--data-dir", path(&data), "--to", path(&file)]);
    assert!(!ok && out.contains("already exists"), "{out}");
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_backups_and_restores_over_a_store_are_refused() {
    let work = tempfile::tempdir().unwrap();
    let file = small_backup(work.path()).await;
    let good = std::fs::read(&file).unwrap();

    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    let truncated = &good[..good.len() - 100];
    for (name, bytes) in [
        ("flipped", &flipped[..]),
        ("truncated", truncated),
        ("empty", &[][..]),
    ] {
        let bad = work.path().join(format!("{name}.backup"));
        std::fs::write(&bad, bytes).unwrap();
        let target = work.path().join(format!("restore-{name}"));
        let (ok, out) = cli(&["restore", "--from", path(&bad), "--data-dir", path(&target)]);
        assert!(!ok, "a {name} backup was restored: {out}");
        assert!(
            out.contains("damaged") || out.contains("too short"),
            "{name}: {out}"
        );
        assert!(
            !target.exists(),
            "a refused restore left {}",
            target.display()
        );
    }

    let occupied = work.path().join("occupied");
    std::fs::create_dir_all(&occupied).unwrap();
    std::fs::write(occupied.join("keep.txt"), b"mine").unwrap();
    let (ok, out) = cli(&[
        "restore",
        "--from",
        path(&file),
        "--data-dir",
        path(&occupied),
    ]);
    assert!(!ok && out.contains("not empty"), "{out}");
    let left: Vec<_> = std::fs::read_dir(&occupied).unwrap().flatten().collect();
    assert_eq!(left.len(), 1);
    assert_eq!(std::fs::read(occupied.join("keep.txt")).unwrap(), b"mine");

    let fresh = work.path().join("fresh");
    let (ok, out) = cli(&["restore", "--from", path(&file), "--data-dir", path(&fresh)]);
    assert!(ok && out.contains("problems found: 0"), "{out}");
    let (ok, out) = cli(&["doctor", "--data-dir", path(&fresh)]);
    assert!(ok && out.contains("problems found: 0"), "{out}");
    assert_eq!(
        exported(&fresh, &group_key("small")),
        exported(&work.path().join("data"), &group_key("small"))
    );
}
