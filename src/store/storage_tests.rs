//! Tests of the disk budget, eviction, archives, doctor, migrations, import and export.

use std::io::Read;
use std::sync::Arc;

use turnstile_actors::{DiskBudget, DiskUsage};

use super::cold_tests::prose;
use super::*;
use crate::config::{Durability, StorageConfig};

fn config(dir: &std::path::Path) -> StorageConfig {
    StorageConfig {
        data_dir: dir.to_path_buf(),
        cache_capacity_bytes: 1 << 20,
        durability: Durability::Strict,
        // The tests use small timestamps, which the age rule would prune.
        prune_after_days: 0,
        ..StorageConfig::default()
    }
}

fn entry(kind: EntryKind, text: &str, ts: u64) -> TranscriptEntry {
    TranscriptEntry::new(kind, text, 2, ts)
}

fn turn(store: &Store, key: &str, now_ms: u64, text: &str) -> SessionRecord {
    store
        .commit_turn(&TurnCommit {
            session_key: key.to_string(),
            entries: vec![
                entry(EntryKind::User, text, now_ms),
                entry(EntryKind::Assistant, text, now_ms),
            ],
            consumed: vec![],
            now_ms,
            channel_messages: vec![],
            replica: None,
        })
        .unwrap()
        .record
}

fn index(store: &Store) -> Vec<(u64, String)> {
    store
        .oldest_sessions(None, 1_000)
        .unwrap()
        .into_iter()
        .map(|c| (c.updated_at_ms, c.session_key))
        .collect()
}

fn no_one_live() -> Liveness {
    Arc::new(|_: &str| false)
}

/// The raw index keys, as (minute, session key).
fn index_keys(store: &Store) -> Vec<(u64, String)> {
    store
        .inner()
        .by_updated
        .iter()
        .keys()
        .map(|k| {
            let k = k.unwrap();
            let (minute, key) = by_updated::split(&k).unwrap();
            (minute, key.to_string())
        })
        .collect()
}

#[tokio::test]
async fn the_index_follows_commits_and_evictions() {
    const M: u64 = by_updated::BUCKET_MS;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    turn(&store, "a", M + 10, "x");
    turn(&store, "b", 2 * M + 20, "x");
    turn(&store, "a", 3 * M + 30, "x");
    assert_eq!(
        index(&store),
        vec![(2 * M + 20, "b".into()), (3 * M + 30, "a".into())]
    );
    let live = store.live_bytes();
    let evicted = store.evict_session("b", Some(999)).unwrap();
    assert!(evicted.is_none(), "a changed session is kept");
    let evicted = store.evict_session("b", Some(2 * M + 20)).unwrap().unwrap();
    assert_eq!(evicted.entries_deleted, 2);
    assert_eq!(store.live_bytes(), live - evicted.bytes);
    assert_eq!(index(&store), vec![(3 * M + 30, "a".into())]);
    assert!(store.session("b").unwrap().is_none());
    // The next turn of an evicted session starts a fresh one with a new id.
    let again = turn(&store, "b", 4 * M + 40, "y");
    assert_ne!(again.id, evicted.record.id);
    assert_eq!(again.entries, 2);
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    store.close().await.unwrap();
}

/// Turns within one minute leave a session's index entry alone, yet the janitor sees (and
/// checks its eviction against) the exact time of the last one.
#[tokio::test]
async fn turns_within_a_minute_leave_the_index_entry_in_place() {
    const M: u64 = by_updated::BUCKET_MS;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    turn(&store, "b", 5 * M + 100, "x");
    turn(&store, "a", 5 * M + 200, "x");
    turn(&store, "b", 5 * M + 300, "x");
    let entries = index_keys(&store);
    assert_eq!(entries, vec![(5 * M, "a".into()), (5 * M, "b".into())]);
    // Within the minute the key orders them; the times are the records'.
    assert_eq!(
        index(&store),
        vec![(5 * M + 200, "a".into()), (5 * M + 300, "b".into())]
    );
    // b's first time (or its minute) no longer matches: the eviction is refused.
    assert!(store
        .evict_session("b", Some(5 * M + 100))
        .unwrap()
        .is_none());
    assert!(store.evict_session("b", Some(5 * M)).unwrap().is_none());
    assert!(store.session("b").unwrap().is_some());
    // A turn in the next minute moves the entry (and leaves no stale one behind).
    turn(&store, "a", 6 * M + 1, "x");
    assert_eq!(
        index_keys(&store),
        vec![(5 * M, "b".into()), (6 * M, "a".into())]
    );
    assert!(store
        .evict_session("b", Some(5 * M + 300))
        .unwrap()
        .is_some());
    assert_eq!(index_keys(&store), vec![(6 * M, "a".into())]);
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    store.close().await.unwrap();
}

/// A v2 store's index held milliseconds; opening it rebuilds the index in minutes.
#[tokio::test]
async fn a_v2_index_is_rebuilt_in_minutes_on_open() {
    const M: u64 = by_updated::BUCKET_MS;
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(&config(dir.path())).unwrap();
        turn(&store, "a", 7 * M + 10, "x");
        turn(&store, "b", 7 * M + 20, "x");
        let inner = store.inner();
        inner.by_updated.clear().unwrap();
        for (ms, key) in [(7 * M + 10, "a"), (7 * M + 20, "b")] {
            let mut k = ms.to_be_bytes().to_vec();
            k.extend_from_slice(key.as_bytes());
            inner.by_updated.insert(k, &[]).unwrap();
        }
        inner
            .db
            .open_tree("meta")
            .unwrap()
            .insert(SCHEMA_KEY, &[2u8])
            .unwrap();
        store.close().await.unwrap();
    }
    let store = Store::open(&config(dir.path())).unwrap();
    let report = store.open_report().unwrap();
    assert_eq!(report.migrated_from, Some(2));
    assert!(report.is_clean(), "{report}");
    assert_eq!(
        index_keys(&store),
        vec![(7 * M, "a".into()), (7 * M, "b".into())]
    );
    store.close().await.unwrap();
}

fn usage(budget: &StoreBudget) -> DiskUsage {
    budget.usage().unwrap()
}

#[tokio::test]
async fn the_budget_evicts_oldest_idle_sessions_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_disk_bytes = 64 << 20;
    let store = Store::open(&cfg).unwrap();
    let text = "z".repeat(2_000);
    for i in 0..400u64 {
        turn(&store, &format!("s{i:03}"), 1_000 + i, &text);
    }
    // s000 has a queued message, s001 a live lane: neither may go.
    store.enqueue("s000", inbox_record("m")).unwrap();
    let budget = StoreBudget::new(store.clone(), &cfg, Arc::new(|k: &str| k == "s001"));
    let mut u = usage(&budget);
    // Pretend the data dir is at twice its high water: eviction is in proportion to the
    // overshoot, so more than half of the live bytes go.
    let live = store.live_bytes();
    u.high_water_bytes = live * 2;
    u.disk_bytes = u.high_water_bytes * 2;
    let report = budget.reclaim(&u, true).unwrap();
    assert!(report.sessions_evicted > 100, "{report:?}");
    assert_eq!(report.sessions_skipped_busy, 2);
    assert!(
        store.live_bytes() <= live / 2,
        "{} > {}",
        store.live_bytes(),
        live / 2
    );
    assert!(store.session("s000").unwrap().is_some());
    assert!(store.session("s001").unwrap().is_some());
    assert!(
        store.session("s002").unwrap().is_none(),
        "oldest idle goes first"
    );
    assert!(store.session("s399").unwrap().is_some(), "newest survive");
    let remaining = index(&store);
    let firsts: Vec<&str> = remaining.iter().take(2).map(|(_, k)| k.as_str()).collect();
    assert_eq!(firsts, ["s000", "s001"]);
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    store.close().await.unwrap();
}

#[tokio::test]
async fn warn_mode_only_reports() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(&cfg).unwrap();
    for i in 0..20u64 {
        turn(&store, &format!("s{i:02}"), 1_000 + i, &"q".repeat(500));
    }
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    let mut u = usage(&budget);
    // Far over high water: everything idle would go.
    u.high_water_bytes = 1;
    u.disk_bytes = 1 << 40;
    let report = budget.reclaim(&u, false).unwrap();
    assert_eq!(report.sessions_evicted, 20);
    assert_eq!(store.session_count(), 20);
    store.close().await.unwrap();
}

#[tokio::test]
async fn age_count_and_emptiness_rules_apply_below_high_water() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_sessions = Some(3);
    cfg.prune_after_days = 1;
    let store = Store::open(&cfg).unwrap();
    let now = crate::clock::now_ms();
    turn(&store, "ancient", 1_000, "x");
    for i in 0..5u64 {
        turn(&store, &format!("recent{i}"), now - 10_000 + i, "x");
    }
    // An empty session (as an import of an empty transcript leaves it).
    store
        .write_imported("empty", now, now, 0, Vec::new())
        .unwrap();
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    let u = usage(&budget);
    assert!(!u.over_high_water());
    budget.reclaim(&u, true).unwrap();
    let left: Vec<String> = index(&store).into_iter().map(|(_, k)| k).collect();
    assert_eq!(left, ["recent2", "recent3", "recent4"]);
    store.close().await.unwrap();
}

#[tokio::test]
async fn archives_are_written_then_deleted_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.keep_archives = true;
    let store = Store::open(&cfg).unwrap();
    for i in 0..10u64 {
        turn(&store, &format!("s{i}"), 1_000 + i, &format!("hello {i}"));
    }
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    let c = store.oldest_sessions(None, 1).unwrap().remove(0);
    assert!(budget.evict_one(&c, true, "test").unwrap().is_some());
    let files = archive::list(dir.path()).unwrap();
    assert_eq!(files.len(), 1);
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&files[0].path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let mut lines = text.lines();
    let header: ExportHeader = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header.session_key, "s0");
    let first: ExportEntry = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(first.text, "hello 0");
    assert_eq!(lines.count(), 1);
    // Over high water: the archive is the first thing to go.
    let mut u = usage(&budget);
    u.high_water_bytes = u.disk_bytes - 1;
    let report = budget.reclaim(&u, true).unwrap();
    assert_eq!(report.archives_deleted, 1);
    assert!(archive::list(dir.path()).unwrap().is_empty());
    store.close().await.unwrap();
}

/// The inbox record the store's other tests use.
fn inbox_record(id: &str) -> InboxRecord {
    super::tests::record(id)
}

#[tokio::test]
async fn doctor_finds_quarantines_and_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let good = turn(&store, "good", 10, "fine");
    let other = turn(&store, "other", 11, "fine");
    store.enqueue("good", inbox_record("q")).unwrap();
    let inner = store.inner();
    // Undecodable values in three trees.
    inner
        .sessions
        .insert("broken", &[1u8, 0xff, 0xff][..])
        .unwrap();
    inner
        .inbox
        .insert(keys::inbox_key("good", 999_999), &[9u8][..])
        .unwrap();
    inner
        .transcript
        .insert(keys::transcript_key(good.id, 77), &[1u8, 2, 3][..])
        .unwrap();
    // Orphan transcript entries of a session id that does not exist.
    inner
        .transcript
        .insert(
            keys::transcript_key(424_242, 1),
            encode(&entry(EntryKind::User, "o", 1)).unwrap(),
        )
        .unwrap();
    // An inbox key that is not an inbox key.
    inner.inbox.insert("no-separator", &[1u8][..]).unwrap();
    // A stale index entry and a missing one.
    inner
        .by_updated
        .insert(by_updated::key(5, "ghost"), &[])
        .unwrap();
    inner
        .by_updated
        .remove(by_updated::key(other.updated_at_ms, "other"))
        .unwrap();
    // Wrong counters.
    let mut wrong = good.clone();
    wrong.entries = 99;
    inner
        .sessions
        .insert("good", encode(&wrong).unwrap())
        .unwrap();

    let found = store.doctor(Depth::Full, false).unwrap();
    assert_eq!(found.undecodable, 3, "{found}");
    assert_eq!(found.orphan_inbox, 1, "{found}");
    assert_eq!(found.orphan_transcript, 1, "{found}");
    assert_eq!(found.index_stale, 1, "{found}");
    assert_eq!(found.index_missing, 1, "{found}");
    assert_eq!(found.counters_wrong, 1, "{found}");
    assert_eq!(found.inbox_entries, 1);
    assert!(found.to_string().contains("undecodable 3"));
    assert_eq!(
        store.doctor(Depth::Full, false).unwrap().problems(),
        found.problems(),
        "report only"
    );

    let fixed = store.doctor(Depth::Full, true).unwrap();
    assert_eq!(fixed.problems(), found.problems());
    assert_eq!(
        fixed.quarantined_total, 4,
        "3 undecodable + the bad inbox key"
    );
    let after = store.doctor(Depth::Full, false).unwrap();
    assert!(after.is_clean(), "{after}");
    assert_eq!(store.session("good").unwrap().unwrap().entries, 2);
    let q = store.quarantined(10).unwrap();
    assert!(q
        .iter()
        .any(|q| q.tree == "sessions" && q.key == b"broken" && q.value == [1, 0xff, 0xff]));
    // The good message is still queued.
    assert_eq!(store.pending("good", 0, 10).unwrap().len(), 1);
    store.close().await.unwrap();
}

#[tokio::test]
async fn opening_quarantines_undecodable_inbox_entries() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(&config(dir.path())).unwrap();
        store.enqueue("k", inbox_record("1")).unwrap();
        store
            .inner()
            .inbox
            .insert(keys::inbox_key("k", 1 << 40), &[1u8, 200][..])
            .unwrap();
        store.close().await.unwrap();
    }
    let store = Store::open(&config(dir.path())).unwrap();
    let report = store.open_report().unwrap();
    assert_eq!(report.undecodable, 1);
    assert_eq!(store.queued(), 1);
    assert_eq!(
        store.sessions_with_pending().unwrap(),
        vec!["k".to_string()]
    );
    assert_eq!(store.quarantined(10).unwrap().len(), 1);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_serving_open_checks_the_inbox_now_and_the_rest_later() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(&config(dir.path())).unwrap();
        let other = turn(&store, "other", 11, "fine");
        store.enqueue("k", inbox_record("1")).unwrap();
        let inner = store.inner();
        inner
            .inbox
            .insert(keys::inbox_key("k", 1 << 40), &[1u8, 200][..])
            .unwrap();
        inner
            .sessions
            .insert("broken", &[1u8, 0xff, 0xff][..])
            .unwrap();
        inner
            .by_updated
            .remove(by_updated::key(other.updated_at_ms, "other"))
            .unwrap();
        store.close().await.unwrap();
    }
    let store = Store::open_for_serving(&config(dir.path())).unwrap();
    // Replay can start: the undecodable inbox entry is already quarantined.
    assert_eq!(store.queued(), 1);
    assert_eq!(store.quarantined(10).unwrap().len(), 1);
    assert!(
        store.open_report().is_none(),
        "the session checks have not run"
    );
    let report = store.run_deferred_checks().unwrap();
    assert_eq!(report.undecodable, 1, "{report}");
    assert_eq!(report.index_missing, 1, "{report}");
    assert!(report.live_bytes > 0);
    assert!(store.doctor(Depth::Quick, false).unwrap().is_clean());
    assert_eq!(store.quarantined(10).unwrap().len(), 2);
    assert_eq!(index(&store), [(11, "other".to_string())]);
    assert!(store.open_report().is_some());
    store.close().await.unwrap();
}

/// Makes `store` look like a v1 store: no `by_updated` index, schema version 1.
fn make_v1(store: &Store) {
    store.inner().by_updated.clear().unwrap();
    store
        .inner()
        .db
        .open_tree("meta")
        .unwrap()
        .insert(SCHEMA_KEY, &[1u8])
        .unwrap();
}

#[tokio::test]
async fn a_v1_store_is_migrated_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(&config(dir.path())).unwrap();
        turn(&store, "a", 10, "x");
        turn(&store, "b", 20, "x");
        make_v1(&store);
        store.close().await.unwrap();
    }
    let store = Store::open(&config(dir.path())).unwrap();
    let report = store.open_report().unwrap();
    assert_eq!(report.migrated_from, Some(1));
    assert_eq!(report.schema_version, SCHEMA_VERSION);
    assert!(report.is_clean(), "{report}");
    assert_eq!(index(&store), vec![(10, "a".into()), (20, "b".into())]);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_migration_is_preceded_by_a_backup_that_restores_the_old_store() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(&config(dir.path())).unwrap();
        turn(&store, "a", 10, "before the upgrade");
        make_v1(&store);
        store.close().await.unwrap();
    }
    let backup = dir.path().join("pre-migration-v1.backup");
    let store = Store::open(&config(dir.path())).unwrap();
    assert_eq!(store.open_report().unwrap().migrated_from, Some(1));
    assert!(backup.is_file(), "taken before the migration");
    // The start that migrated keeps it; ids after it stay above the old store's.
    store.settle_after_start();
    assert!(backup.is_file());
    store.close().await.unwrap();
    drop(store);

    // Restored, it is the store as the old version left it (migrated again when opened).
    let restored = tempfile::tempdir().unwrap();
    let target = restored.path().join("data");
    crate::store::restore_backup(&backup, &target).unwrap();
    let old = Store::open(&config(&target)).unwrap();
    assert_eq!(old.open_report().unwrap().migrated_from, Some(1));
    let a = old.session("a").unwrap().expect("the session");
    let entries = old.newest_entries(a.id, |_| true).unwrap();
    assert!(entries
        .iter()
        .any(|(_, e)| &*e.text == "before the upgrade"));
    assert!(old.inner().next_id().unwrap() > a.id);
    old.close().await.unwrap();
    drop(old);

    // The next start needs no migration: the backup has served its purpose.
    let store = Store::open(&config(dir.path())).unwrap();
    assert_eq!(store.open_report().unwrap().migrated_from, None);
    store.settle_after_start();
    assert!(!backup.exists());
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_second_open_reports_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let err = Store::open(&config(dir.path())).err().unwrap();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("in use"));
    store.close().await.unwrap();
}

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openclaw")
}

#[tokio::test]
async fn openclaw_import_keeps_keys_order_times_and_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let count = |t: &str| t.split_whitespace().count() as u32;
    let before_import = crate::clock::now_ms();
    let report = import_openclaw(&store, &fixtures(), &count).unwrap();
    assert_eq!(report.sessions_imported, 2, "{report}");
    assert_eq!(
        report.sessions_failed, 2,
        "missing transcript and unsafe id: {report}"
    );
    assert_eq!(report.lines_skipped, 3, "{report}");
    assert_eq!(report.entries_folded, 4, "{report}");
    assert_eq!(report.entries_off_branch, 1, "{report}");
    assert!(report
        .problems
        .iter()
        .any(|(f, l, _)| f.starts_with("5b1c") && *l == 7));

    let main = store.session("agent:main:main").unwrap().unwrap();
    // Age counts from the import (the fixture's `updatedAt` is long past `prune_after_days`).
    assert!(main.updated_at_ms >= before_import, "{main:?}");
    assert_eq!(main.created_at_ms, 1_764_469_800_000);
    assert_eq!(main.compaction_count, 1);
    let t = store.transcript(main.id, 0, 100).unwrap();
    let kinds: Vec<EntryKind> = t.iter().map(|(_, e)| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::Summary,
            EntryKind::User,
            EntryKind::Assistant,
            EntryKind::Custom,
            EntryKind::User,
            EntryKind::Assistant
        ]
    );
    assert!(t[0].1.text.contains("pipeline 981"));
    assert_eq!(&*t[1].1.text, "What was the pipeline number?");
    assert_eq!(t[1].1.timestamp_ms, 1_764_469_920_000);
    assert_eq!(&*t[4].1.text, "Thanks! Now roll back OPS-4410.");
    assert!(t.iter().all(|(_, e)| !e.text.contains("abandoned")));
    assert_eq!(main.entries, 6);
    assert_eq!(
        main.tokens,
        t.iter().map(|(_, e)| u64::from(e.tokens)).sum::<u64>()
    );

    let group = store
        .session("agent:main:telegram:group:-100123")
        .unwrap()
        .unwrap();
    let t = store.transcript(group.id, 0, 100).unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(&*t[2].1.text, "Reminder: standup at 10:00");
    assert_eq!(group.created_at_ms, 1_764_471_000_000);

    // Importing again changes nothing.
    let again = import_openclaw(&store, &fixtures(), &count).unwrap();
    assert_eq!(again.sessions_imported, 0);
    assert_eq!(again.sessions_existing, 2);
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());

    // Export: a header and one line per entry, in order.
    let mut out = Vec::new();
    assert_eq!(
        store.export_session("agent:main:main", &mut out).unwrap(),
        Some(6)
    );
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    let header: ExportHeader = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        (header.session_key.as_str(), header.entries),
        ("agent:main:main", 6)
    );
    let seqs: Vec<u64> = lines
        .map(|l| serde_json::from_str::<ExportEntry>(l).unwrap().seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    assert_eq!(store.export_session("nope", &mut Vec::new()).unwrap(), None);
    store.close().await.unwrap();
}

#[tokio::test]
async fn import_never_panics_on_garbage_lines() {
    let src = tempfile::tempdir().unwrap();
    std::fs::write(
        src.path().join("sessions.json"),
        r#"{"k":{"sessionId":"s1","updatedAt":"2025-01-01T00:00:00Z"},"bad":7}"#,
    )
    .unwrap();
    let mut lines = String::from("{\"type\":\"session\",\"version\":3}\n");
    for junk in [
        "{}",
        "[]",
        "null",
        "{\"type\":\"message\"}",
        "{\"type\":\"message\",\"message\":{\"role\":7}}",
        "{\"type\":\"compaction\"}",
        "{\"type\":\"message\",\"id\":\"x\",\"parentId\":\"x\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}}",
        "\u{0}\u{1}",
    ] {
        lines.push_str(junk);
        lines.push('\n');
    }
    std::fs::write(src.path().join("s1.jsonl"), lines).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let report = import_openclaw(&store, src.path(), &|_| 1).unwrap();
    assert_eq!(report.sessions_imported, 1, "{report}");
    assert_eq!(report.sessions_failed, 1, "{report}");
    let s = store.session("k").unwrap().unwrap();
    // No header timestamp: the ISO `updatedAt` is the creation time; age counts from now.
    assert_eq!(s.created_at_ms, 1_735_689_600_000);
    assert!(s.updated_at_ms > s.created_at_ms);
    assert_eq!(s.entries, 1, "the self-parented entry, once");
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_gives_space_back_and_keeps_everything_live() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(&cfg).unwrap();
    let big = prose(&mut 7, 20_000);
    for i in 0..200u64 {
        turn(&store, &format!("s{i:03}"), 1_000 + i, &big);
    }
    let (queued, _) = store.enqueue("s199", inbox_record("q1")).unwrap();
    for i in 0..190u64 {
        store.evict_session(&format!("s{i:03}"), None).unwrap();
    }
    let kept = store.session("s195").unwrap().unwrap();
    // As the janitor does: on the blocking pool, so the old flusher can wind down.
    let s = store.clone();
    let done = tokio::task::spawn_blocking(move || s.rewrite())
        .await
        .unwrap()
        .unwrap();
    assert!(done.old_deleted);
    assert!(done.bytes_after * 2 < done.bytes_before, "{done:?}");
    assert!(!dir.path().join("db").exists());
    // Reads, writes, ids and inbox sequences carry on in the new generation.
    assert_eq!(store.session("s195").unwrap().unwrap(), kept);
    assert_eq!(store.transcript(kept.id, 0, 10).unwrap().len(), 2);
    assert_eq!(store.pending("s199", 0, 10).unwrap()[0].seq, queued.seq);
    let (later, ticket) = store.enqueue("s199", inbox_record("q2")).unwrap();
    assert!(later.seq > queued.seq);
    store.commit().wait(ticket).await.unwrap();
    let fresh = turn(&store, "new", 5_000, "x");
    assert!(fresh.id > kept.id);
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    store.close().await.unwrap();
    drop(store);
    let store = Store::open(&cfg).unwrap();
    assert_eq!(store.session("s195").unwrap().unwrap(), kept);
    assert_eq!(store.pending("s199", 0, 10).unwrap().len(), 2);
    assert_eq!(store.session_count(), 11);
    store.close().await.unwrap();
}

#[tokio::test]
async fn import_refuses_keys_the_api_refuses() {
    let src = tempfile::tempdir().unwrap();
    let long = "k".repeat(10_000);
    let mut index = serde_json::Map::new();
    for key in [
        "",
        "   ",
        "nul\u{0}key",
        "tab\tkey",
        long.as_str(),
        "agent:main:fine",
    ] {
        index.insert(key.to_string(), serde_json::json!({"sessionId": "s1"}));
    }
    let index = serde_json::Value::Object(index);
    std::fs::write(src.path().join("sessions.json"), index.to_string()).unwrap();
    std::fs::write(
        src.path().join("s1.jsonl"),
        "{\"type\":\"session\",\"version\":3,\"timestamp\":1764469800000}\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let report = import_openclaw(&store, src.path(), &|_| 1).unwrap();
    assert_eq!(report.sessions_refused, 5, "{report}");
    assert_eq!(report.sessions_imported, 1, "{report}");
    let text = report.to_string();
    assert!(text.contains("5 refused (bad key)"), "{text}");
    assert!(text.contains("must not be empty"), "{text}");
    assert!(text.contains("control character"), "{text}");
    assert!(text.contains("too long (10000 > 256)"), "{text}");
    assert!(!text.contains(&long), "a refused key is shown shortened");
    let keys: Vec<String> = store
        .oldest_sessions(None, 100)
        .unwrap()
        .into_iter()
        .map(|c| c.session_key)
        .collect();
    assert_eq!(keys, ["agent:main:fine"]);
}

/// The janitor's measurement covers every write counted before it, including what sled still
/// buffers in memory: otherwise admission's estimate runs under the data dir by that much (by
/// megabytes when sled's writer lags under load).
#[tokio::test]
async fn a_measurement_covers_what_sled_still_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_disk_bytes = 64 << 20;
    // sled's own periodic flush stays out of the way: only the measurement can write.
    cfg.flush_every_ms = 600_000;
    let store = Store::open(&cfg).unwrap();
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    usage(&budget);
    // Plain writes (a transaction would seal sled's buffer and have it written at once).
    let text = "b".repeat(1_000);
    for i in 0..100u64 {
        let record = InboxRecord::direct_for_test(&format!("m{i}"), &text);
        store.enqueue(&format!("s{i}"), record).unwrap();
    }
    usage(&budget);
    let estimate = store.shared.meter.disk_estimate();
    store.inner().db.flush().unwrap();
    let disk = dir_disk_bytes(dir.path()).unwrap();
    assert!(
        disk <= estimate,
        "the data dir holds {disk} bytes once flushed, the estimate says {estimate}"
    );
    store.close().await.unwrap();
}

/// When nothing can be evicted (every session busy), admission refuses before the data dir
/// passes the budget, and accepts again once a pass has freed space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_refuses_when_nothing_can_be_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_disk_bytes = 24 << 20;
    let store = Store::open(&cfg).unwrap();
    assert!(
        store.disk_full().is_none(),
        "no janitor measured yet: not gated"
    );
    let everyone_busy: Liveness = Arc::new(|_: &str| true);
    let budget = StoreBudget::new(store.clone(), &cfg, everyone_busy);
    let text = prose(&mut 11, 16_000);
    let mut refused = false;
    for i in 0..4_000u64 {
        if i % 50 == 0 {
            let u = usage(&budget);
            budget.reclaim(&u, true).unwrap();
        }
        if store.disk_full().is_some() {
            refused = true;
            break;
        }
        turn(&store, &format!("s{i:04}"), 1_000 + i, &text);
    }
    assert!(refused, "admission never refused");
    let disk = dir_disk_bytes(dir.path()).unwrap();
    assert!(
        disk <= cfg.max_disk_bytes + cfg.max_disk_bytes / 10,
        "data dir {disk} past the budget {}",
        cfg.max_disk_bytes
    );
    // Sessions become idle: the next pass evicts and rewrites, and admission opens again.
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    let u = usage(&budget);
    let report = budget.reclaim(&u, true).unwrap();
    assert!(report.sessions_evicted > 0, "{report:?}");
    // The old generation's directory goes once its flusher lets go (a task on this runtime),
    // and the frozen sessions' cold packs (real text compresses about 2x, so they hold real
    // room) are deleted by a later pass, never the one that froze them: the janitor's next
    // passes open admission again.
    let mut open = false;
    for i in 0..500 {
        let u = usage(&budget);
        if i % 50 == 49 {
            budget.reclaim(&u, true).unwrap();
        }
        if store.disk_full().is_none() {
            open = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        open,
        "still refused after a pass freed space: {:?}, {report:?}, data dir {}",
        store.disk_full(),
        dir_disk_bytes(dir.path()).unwrap()
    );
}

/// Acknowledged messages in the inbox are writes admission can no longer refuse (each turn
/// stores the text again and a reply): admission keeps room for them, and gives it back as
/// their turn consumes them.
#[tokio::test]
async fn admission_keeps_room_for_the_turns_of_acknowledged_messages() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_disk_bytes = 64 << 20;
    let store = Store::open(&cfg).unwrap();
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    usage(&budget);
    let text = "p".repeat(64_000);
    let mut seqs = Vec::new();
    while store.disk_full().is_none() {
        assert!(seqs.len() < 1_000, "admission never refused");
        let record = InboxRecord::direct_for_test(&format!("m{}", seqs.len()), &text);
        seqs.push(store.enqueue("s", record).unwrap().0.seq);
    }
    let estimate = store.shared.meter.disk_estimate();
    assert!(
        (estimate as f64) < cfg.max_disk_bytes as f64 * cfg.high_water,
        "refused at {} messages with the data dir at about {estimate} bytes: too late for their turns",
        seqs.len()
    );
    store
        .commit_turn(&TurnCommit {
            session_key: "s".into(),
            entries: vec![
                entry(EntryKind::User, "all of them", 1),
                entry(EntryKind::Assistant, "done", 1),
            ],
            consumed: seqs,
            now_ms: 1,
            channel_messages: vec![],
            replica: None,
        })
        .unwrap();
    assert_eq!(store.shared.meter.pending_disk_bytes(), 0);
    assert!(
        store.disk_full().is_none(),
        "still refused once the acknowledged messages were answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_during_a_rewrite_and_none_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(&cfg).unwrap();
    let big = prose(&mut 7, 20_000);
    for i in 0..600u64 {
        turn(&store, &format!("old{i:03}"), 1_000 + i, &big);
    }
    // Nine tenths of it evicted: the garbage a rewrite is for. A copy that reaches 80% of its
    // source is given up, and this test is about the writes during one that is kept: with
    // half evicted, sled's fixed overhead in the fresh generation (6-10 MB) plus the writes
    // made during the copy brought a loaded machine's copy to the 80% line.
    for i in 0..540u64 {
        store.evict_session(&format!("old{i:03}"), None).unwrap();
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (store, stop) = (store.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut done = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    turn(&store, &format!("live{w}"), 10_000 + done, "during");
                    store
                        .enqueue(&format!("queue{w}"), inbox_record("q"))
                        .unwrap();
                    done += 1;
                }
                done
            })
        })
        .collect();
    let s = store.clone();
    let done = tokio::task::spawn_blocking(move || s.rewrite())
        .await
        .unwrap()
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written: Vec<u64> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    eprintln!("rewrite: {done:?}; turns written by each writer meanwhile: {written:?}");
    for (w, n) in written.iter().enumerate() {
        let live = store.session(&format!("live{w}")).unwrap().unwrap();
        assert_eq!(
            live.entries,
            2 * n,
            "every turn of writer {w} is in the new generation"
        );
        let queued = store.pending(&format!("queue{w}"), 0, usize::MAX).unwrap();
        assert_eq!(
            queued.len() as u64,
            *n,
            "every inbox write of writer {w} is kept"
        );
    }
    assert!(crate::store::generations::is_verified(&done.dir));
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    store.close().await.unwrap();
    drop(store);
    let store = Store::open(&cfg).unwrap();
    assert_eq!(store.session_count(), 62);
    store.close().await.unwrap();
}

/// The probe runs on real time (tokio's `test-util` is not enabled in this crate); the wait is
/// a bounded poll, not a timed assertion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_write_refuses_writes_and_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let (before, ticket) = store.enqueue("s", inbox_record("before")).unwrap();
    store.commit().wait(ticket).await.unwrap();
    // As a full disk does: a write fails with an I/O error.
    let failed = store.write_failed(StoreError::Flush("No space left on device".into()));
    assert!(failed.is_cannot_write(), "{failed}");
    let refused = store.enqueue("s", inbox_record("during")).unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("insufficient storage: the disk is full"),
        "{refused}"
    );
    assert!(store.not_ready_reason().is_some());
    assert_eq!(store.pending("s", 0, 10).unwrap().len(), 1, "reads go on");
    // The probe finds room (the temp dir has it) and recovers through a new generation.
    let mut waited = 0;
    while store.not_ready_reason().is_some() {
        waited += 1;
        assert!(waited < 600, "the store did not recover");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (after, ticket) = store.enqueue("s", inbox_record("after")).unwrap();
    store.commit().wait(ticket).await.unwrap();
    assert!(after.seq > before.seq);
    assert_eq!(store.pending("s", 0, 10).unwrap().len(), 2);
    store.close().await.unwrap();
}

/// Writes `n` one-turn sessions whose two entries carry `text_bytes` of text each (prose of
/// its own per entry: repeated text would compress away), in group commits of 500 as a busy
/// server does. Returns the raw text written.
fn many_sessions(store: &Store, n: u64, text_bytes: usize) -> u64 {
    let mut batch = Vec::new();
    let mut seed = n;
    for i in 0..n {
        batch.push(TurnCommit {
            session_key: format!("agent:main:test:group:chat-{i}"),
            entries: vec![
                entry(EntryKind::User, &prose(&mut seed, text_bytes), 1_000 + i),
                entry(
                    EntryKind::Assistant,
                    &prose(&mut seed, text_bytes),
                    1_000 + i,
                ),
            ],
            consumed: vec![],
            now_ms: 1_000 + i,
            channel_messages: vec![],
            replica: None,
        });
        if batch.len() == 500 || i + 1 == n {
            store.commit_turns(&batch).unwrap();
            batch.clear();
        }
    }
    n * 2 * text_bytes as u64
}

/// Issue 39: a budget three times the raw text of 20,000 one-turn sessions evicts nothing.
/// Their prose takes about 1.3 disk bytes per raw byte with compressed pages; a budget this
/// small (72 MB; the line is about 133 MiB with the default cold tier) acts at the lower mark
/// where a rewrite still fits beside the data dir (`StoreBudget::working_usage`), and the
/// data dir is under it. `--nocapture` shows the figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_three_times_the_raw_text_evicts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    let store = Store::open(&cfg).unwrap();
    let raw = many_sessions(&store, 20_000, 600);
    cfg.max_disk_bytes = raw * 3;
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    let u = usage(&budget);
    eprintln!(
        "raw text {raw} bytes, data dir {} bytes ({:.2} per raw byte), high water {}",
        u.disk_bytes,
        u.disk_bytes as f64 / raw as f64,
        u.high_water_bytes
    );
    let report = budget.reclaim(&u, true).unwrap();
    assert_eq!(report.sessions_evicted, 0, "{report:?}");
    assert_eq!(report.cold_deleted, 0, "{report:?}");
    assert_eq!(store.session_count(), 20_000);
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_under_high_water_loses_nothing_to_the_janitor() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    // Large enough for a rewrite to fit beside a data dir at high water (small budgets keep
    // their live bytes at the target at any fill).
    cfg.max_disk_bytes = 256 << 20;
    let store = Store::open(&cfg).unwrap();
    many_sessions(&store, 20_000, 800);
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    let mut u = usage(&budget);
    assert_eq!(
        budget.working_usage(&u).high_water_bytes,
        u.high_water_bytes
    );
    // The live bytes are above the tenth of the budget the janitor used to hold them to
    // (freezing, then deleting what passed the cold tier's share, at any fill)...
    assert!(store.live_bytes() > cfg.max_disk_bytes / 10);
    // ...but the data dir is under high water: nothing may go.
    u.disk_bytes = u.high_water_bytes - 1;
    let report = budget.reclaim(&u, true).unwrap();
    assert_eq!(report.sessions_evicted, 0, "{report:?}");
    assert_eq!(report.sessions_frozen, 0, "{report:?}");
    assert_eq!(report.cold_deleted, 0, "{report:?}");
    assert_eq!(store.session_count(), 20_000);
    store.close().await.unwrap();
}

/// What the data dir's directories hold (the database generations, the cold tier, archives):
/// the files directly under it are left out. The `LEDGER` among them is written by the
/// flusher some time after a commit's flush (at most every `LEDGER_INTERVAL`), so its first
/// write can land while a rewrite runs, under load (a CI run saw one 4 KiB block); it is not
/// the rewrite's.
fn database_bytes(data_dir: &std::path::Path) -> u64 {
    std::fs::read_dir(data_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| disk::dir_disk_bytes(&e.path()).unwrap())
        .sum()
}

/// sled's default segment size (the store does not change it): the unit in which its log
/// is written and reclaimed.
const SLED_SEGMENT_BYTES: u64 = 512 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_never_grows_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    // Uncompressed: sled rewrites a compressed page it reads again (a second full read grew
    // a compressed store by up to half a segment), which would hide what is measured here,
    // the rewrite's own effect.
    cfg.compression = false;
    let store = Store::open(&cfg).unwrap();
    // Nothing deleted: the database is all live data, and sled's fresh copy of many small
    // values is no smaller than it.
    many_sessions(&store, 5_000, 100);
    // sled consolidates a node's fragments the first time it reads it, which writes: a first
    // full read grows a freshly written database by a few percent (10.42 -> 10.68 MB here),
    // and so does a rewrite's copy that is given up. That is every reader's cost, not the
    // rewrite's; read once before measuring, so what is measured is what the rewrite leaves.
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    store.inner().db.flush().unwrap();
    let before = database_bytes(dir.path());
    let s = store.clone();
    let done = tokio::task::spawn_blocking(move || s.rewrite())
        .await
        .unwrap()
        .unwrap();
    let after = database_bytes(dir.path());
    eprintln!("{done:?}; data dir {before} -> {after} bytes");
    assert!(
        !done.switched || done.bytes_after < done.bytes_before,
        "a copy no smaller than its source replaced it: {done:?}"
    );
    // The source database is read in full by the copy, and sled's reads can consolidate
    // pages and write them (above, a second full read after the first one's consolidation
    // still wrote up to 120 KiB on a CI-loaded machine): that is every reader's cost and
    // stays within sled's unit of writing, one segment. The copy itself leaves nothing.
    assert!(
        after <= before + SLED_SEGMENT_BYTES,
        "the data dir grew from {before} to {after} bytes"
    );
    assert!(
        done.switched || !done.dir.exists(),
        "a given-up copy is deleted"
    );
    assert_eq!(store.session_count(), 5_000);
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_kept_while_writing_match_a_count_of_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(&cfg).unwrap();
    for i in 0..30u64 {
        turn(
            &store,
            &format!("s{i:02}"),
            1_000 + i,
            &"t".repeat(100 + i as usize),
        );
        turn(&store, &format!("s{i:02}"), 2_000 + i, "again");
    }
    store.evict_session("s00", None).unwrap();
    store.delete_session("s01").unwrap();
    let record = store.session("s02").unwrap().unwrap();
    store
        .compact_prefix(
            "s02",
            record.next_seq,
            2,
            &entry(EntryKind::Summary, "sum", 3_000),
        )
        .unwrap()
        .unwrap();
    let walked = store.doctor(Depth::Quick, false).unwrap().totals;
    let kept = store.totals();
    assert_eq!(
        (
            kept.sessions,
            kept.entries,
            kept.tokens,
            kept.bytes,
            kept.compactions
        ),
        (
            walked.sessions,
            walked.entries,
            walked.tokens,
            walked.bytes,
            walked.compactions
        )
    );
    assert_eq!(kept.sessions, 28);
    assert_eq!(kept.compactions, 1);
    // And after a restart, from the start-up checks.
    store.close().await.unwrap();
    drop(store);
    let store = Store::open(&cfg).unwrap();
    assert_eq!(store.totals().entries, walked.entries);
    store.close().await.unwrap();
}

/// A write made while a rewrite copies is acknowledged without waiting for the copy: the
/// rewrite is held after its bulk copy until the write is done. Before rewrites copied beside
/// the writers, the write waited for the whole copy (here: for ever); the wait below only
/// turns such a hang into a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_does_not_wait_for_a_rewrites_copy() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(&cfg).unwrap();
    many_sessions(&store, 2_000, 200);
    for i in 0..1_000u64 {
        store
            .evict_session(&format!("agent:main:test:group:chat-{i}"), None)
            .unwrap();
    }
    let (copied_tx, copied_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    *store.shared.after_copy.lock().unwrap() = Some(Box::new(move || {
        let _ = copied_tx.send(());
        let _ = go_rx.lock().unwrap().recv();
    }));
    let s = store.clone();
    let rewrite = tokio::task::spawn_blocking(move || s.rewrite());
    copied_rx.recv().unwrap();
    // The copy is done and the rewrite holds still: a turn and an inbox write go through.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            let record = turn(&store, "during-the-copy", 9_000, "written mid-rewrite");
            let queued = store.enqueue("during-the-copy", inbox_record("q")).unwrap();
            let _ = done_tx.send(());
            (record, queued)
        })
    };
    let waited = done_rx.recv_timeout(std::time::Duration::from_secs(60));
    go_tx.send(()).unwrap();
    assert!(waited.is_ok(), "a write waited for the rewrite's copy");
    let (record, (queued, ticket)) = writer.join().unwrap();
    store.commit().wait(ticket).await.unwrap();
    let done = rewrite.await.unwrap().unwrap();
    assert!(done.switched, "{done:?}");
    // What was written mid-copy is in the new generation.
    assert_eq!(store.session("during-the-copy").unwrap().unwrap(), record);
    assert_eq!(
        store.pending("during-the-copy", 0, 10).unwrap()[0].seq,
        queued.seq
    );
    assert_eq!(store.session_count(), 1_001);
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    store.close().await.unwrap();
}

/// A data dir written without compression (every data dir before `storage.compression`)
/// opens as it is, and the janitor's first pass copies it into a compressed generation, below
/// high water and with nothing to reclaim, keeping every session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncompressed_database_is_copied_into_a_compressed_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_disk_bytes = 1 << 30;
    cfg.compression = false;
    let store = Store::open(&cfg).unwrap();
    // 1,000-byte texts: with 200 the raw text (1.2 MB) was under sled's few MB of fixed
    // overhead per generation, and the ratio below swung between 0.62 and 0.71.
    many_sessions(&store, 3_000, 1_000);
    store.close().await.unwrap();
    drop(store);

    cfg.compression = true;
    let store = Store::open(&cfg).unwrap();
    assert!(store.recompression_due(), "opened as it was written");
    let before = database_bytes(dir.path());
    let budget = StoreBudget::new(store.clone(), &cfg, no_one_live());
    let u = usage(&budget);
    let report = budget.reclaim(&u, true).unwrap();
    // sled writes the copy's last pages in the background: measure what is on disk.
    store.inner().db.flush().unwrap();
    let after = database_bytes(dir.path());
    let generation = store.inner().dir.clone();
    eprintln!("{report:?}; database {before} -> {after} bytes");
    assert!(
        !store.recompression_due(),
        "copied into a compressed generation"
    );
    // The copy was 0.29-0.74 of the uncompressed database over 36 runs on a busy 2-core
    // machine (most near 0.33): how often sled's background flush wrote a leaf again while the
    // copy filled it varies with timing, and those versions stay in the log until sled cleans
    // their segments. A copy past `MAX_COPY_RATIO` (0.8) is given up, which the check above
    // would catch.
    assert!(after < before, "{before} -> {after} bytes");
    assert_eq!(store.session_count(), 3_000);
    assert!(store.doctor(Depth::Full, false).unwrap().is_clean());
    // A second pass does not copy again.
    let u = usage(&budget);
    budget.reclaim(&u, true).unwrap();
    assert_eq!(store.inner().dir, generation);
    store.close().await.unwrap();
}
