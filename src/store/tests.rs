use super::*;
use crate::config::{Durability, StorageConfig};

fn config(dir: &std::path::Path) -> StorageConfig {
    StorageConfig {
        data_dir: dir.to_path_buf(),
        cache_capacity_bytes: 1 << 20,
        durability: Durability::Strict,
        ..StorageConfig::default()
    }
}

pub(super) fn record(id: &str) -> InboxRecord {
    let mut record = InboxRecord::direct_for_test(id, &format!("text {id}"));
    record.message.sender.name = "U".into();
    record
}

pub(super) fn entry(kind: EntryKind, text: &str) -> TranscriptEntry {
    TranscriptEntry::new(kind, text, 3, 1)
}

#[tokio::test]
async fn inbox_pending_commit_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let (a, ta) = store.enqueue("k", record("1")).unwrap();
    let (b, tb) = store.enqueue("k", record("2")).unwrap();
    let (_c, _) = store.enqueue("other", record("3")).unwrap();
    assert!(a.seq >= 1 && a.seq < b.seq);
    store.commit().wait(ta.max(tb)).await.unwrap();
    assert_eq!(store.queued(), 3);

    let pending = store.pending("k", 0, 10).unwrap();
    assert_eq!(
        pending.iter().map(|i| i.seq).collect::<Vec<_>>(),
        [a.seq, b.seq]
    );
    assert_eq!(store.pending("k", a.seq, 10).unwrap().len(), 1);
    assert_eq!(store.pending("k", 0, 1).unwrap().len(), 1);
    assert_eq!(store.sessions_with_pending().unwrap(), ["k", "other"]);

    let Committed {
        record: rec,
        seqs,
        ticket,
    } = store
        .commit_turn(&TurnCommit {
            session_key: "k".to_string(),
            entries: vec![
                entry(EntryKind::User, "q"),
                entry(EntryKind::Assistant, "a"),
            ],
            consumed: vec![a.seq],
            now_ms: 5,
            channel_messages: vec![],
            replica: None,
        })
        .unwrap();
    store.commit().wait(ticket).await.unwrap();
    assert_eq!(seqs, [1, 2]);
    assert_eq!((rec.entries, rec.tokens, rec.next_seq), (2, 6, 3));
    assert_eq!(store.queued(), 2);
    assert_eq!(store.pending("k", 0, 10).unwrap().len(), 1);
    store.close().await.unwrap();
    drop(store);

    let store = Store::open(&config(dir.path())).unwrap();
    assert_eq!(store.queued(), 2);
    let session = store.session("k").unwrap().unwrap();
    assert_eq!(session, rec);
    let t = store.transcript(session.id, 0, 10).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(&*t[1].1.text, "a");
    let newest = store.newest_entries(session.id, |_| true).unwrap();
    assert_eq!(newest.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [2, 1]);
    let listed = store.list_sessions(None, 10).unwrap();
    assert_eq!(listed.len(), 1);
    assert!(store.list_sessions(Some("k"), 10).unwrap().is_empty());
    store.close().await.unwrap();
}

#[tokio::test]
async fn concurrent_waiters_share_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (_, ticket) = store
                .enqueue(&format!("k{i}"), record(&i.to_string()))
                .unwrap();
            store.commit().wait(ticket).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(store.queued(), 64);
    store.close().await.unwrap();
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    store.close().await.unwrap();
    drop(store);
    {
        let db = super::sled_config::sled_config(&dir.path().join("db"), &config(dir.path()))
            .open()
            .unwrap();
        db.open_tree("meta")
            .unwrap()
            .insert(SCHEMA_KEY, &[SCHEMA_VERSION + 1])
            .unwrap();
        db.flush().unwrap();
    }
    assert!(matches!(
        Store::open(&config(dir.path())),
        Err(StoreError::SchemaTooNew { .. })
    ));
}

/// Opens the store again once the previous handle's background I/O (sled's thread pool) has
/// let go of the file lock.
async fn reopen(dir: &std::path::Path) -> Store {
    let started = std::time::Instant::now();
    loop {
        match Store::open(&config(dir)) {
            Ok(store) => return store,
            Err(_) if started.elapsed() < std::time::Duration::from_secs(10) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(e) => panic!("cannot reopen: {e}"),
        }
    }
}

fn mark(key: &str, now_ms: u64, ttl: u64) -> DedupeMark<'_> {
    DedupeMark {
        key,
        expires_at_ms: now_ms + ttl,
        now_ms,
    }
}

#[tokio::test]
async fn dedupe_keys_are_written_with_the_inbox_entry_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let now = crate::clock::now_ms();
    let (item, ticket) = store
        .enqueue_deduped("k", record("1"), Some(mark("t|d|main|c||1", now, 60_000)))
        .unwrap();
    store.commit().wait(ticket).await.unwrap();
    assert!(store.dedupe_seen("t|d|main|c||1", now).unwrap());
    assert!(!store.dedupe_seen("t|d|main|c||2", now).unwrap());
    // Answering the message consumes the inbox entry, not the dedupe key.
    let Committed { ticket, .. } = store
        .commit_turn(&TurnCommit {
            session_key: "k".to_string(),
            entries: vec![entry(EntryKind::User, "q")],
            consumed: vec![item.seq],
            now_ms: 2,
            channel_messages: vec![],
            replica: None,
        })
        .unwrap();
    store.commit().wait(ticket).await.unwrap();
    store.close().await.unwrap();
    drop(store);

    let store = reopen(dir.path()).await;
    assert!(store.dedupe_seen("t|d|main|c||1", now + 59_999).unwrap());
    assert!(
        !store.dedupe_seen("t|d|main|c||1", now + 60_000).unwrap(),
        "expired"
    );
    // The plain enqueue remembers nothing.
    store.enqueue("k", record("3")).unwrap();
    assert_eq!(store.dedupe_len(), 1);
    store.close().await.unwrap();
}

#[tokio::test]
async fn expired_dedupe_keys_are_pruned_on_open_and_with_bounded_work_per_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    // Ten keys that expired long ago (the open-time prune uses the wall clock).
    for i in 0..10 {
        store
            .enqueue_deduped(
                "k",
                record(&i.to_string()),
                Some(mark(&format!("old{i}"), 1, 1)),
            )
            .unwrap();
    }
    // Writes at time 1 visit a few keys each but find nothing expired yet.
    assert_eq!(store.dedupe_len(), 10);
    // A later write at time 100 visits DEDUPE_PRUNE_PER_WRITE entries (its own among them
    // perhaps), no more.
    store
        .enqueue_deduped("k", record("new"), Some(mark("zz-new", 100, 1_000_000)))
        .unwrap();
    let removed = 11 - store.dedupe_len();
    assert!(
        (DEDUPE_PRUNE_PER_WRITE - 1..=DEDUPE_PRUNE_PER_WRITE).contains(&removed),
        "{removed}"
    );
    // A prune call with a budget resumes and wraps around, keeping live keys.
    assert_eq!(store.prune_dedupe(100, 100).unwrap(), 10 - removed);
    assert_eq!(store.dedupe_len(), 1);
    assert!(store.dedupe_seen("zz-new", 100).unwrap());
    store.close().await.unwrap();
    drop(store);

    // On open, everything expired by the wall clock goes.
    let store = reopen(dir.path()).await;
    store
        .enqueue_deduped("k", record("x"), Some(mark("soon", 1, 1)))
        .unwrap();
    store.close().await.unwrap();
    drop(store);
    let store = reopen(dir.path()).await;
    assert_eq!(store.dedupe_len(), 0);
    store.close().await.unwrap();
}

fn chat_message(id: &str, ts: u64, reply_to: Option<&str>) -> ChannelMessage {
    ChannelMessage {
        channel: "tg".into(),
        chat_id: "c1".into(),
        message_id: id.into(),
        sender_id: "u".into(),
        sender_name: "U".into(),
        text: format!("text {id}"),
        timestamp_ms: ts,
        reply_to: reply_to.map(str::to_string),
        thread_id: None,
        seq: 0,
        addressed: false,
    }
}

#[tokio::test]
async fn channel_messages_by_id_time_and_parent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let mut long = chat_message("long", 50, None);
    long.text = "é".repeat(crate::inbound::MAX_UNTRUSTED_CHARS + 10);
    let mut other_chat = chat_message("x", 100, Some("p"));
    other_chat.chat_id = "c2".into();
    let messages = vec![
        chat_message("p", 100, None),
        chat_message("r1", 200, Some("p")),
        chat_message("r2", 150, Some("p")),
        chat_message("far", 100_000, Some("r1")),
        long,
        other_chat,
    ];
    let Committed { ticket, .. } = store
        .commit_turn(&TurnCommit {
            session_key: "k".to_string(),
            entries: vec![entry(EntryKind::User, "q")],
            consumed: vec![],
            now_ms: 5,
            channel_messages: messages,
            replica: None,
        })
        .unwrap();
    store.commit().wait(ticket).await.unwrap();
    let p = store.channel_message("tg", "c1", "p").unwrap().unwrap();
    assert_eq!(p.text, "text p");
    assert!(store.channel_message("tg", "c1", "nope").unwrap().is_none());
    assert!(store.channel_message("tg", "c2", "p").unwrap().is_none());
    let stored_long = store.channel_message("tg", "c1", "long").unwrap().unwrap();
    assert_eq!(
        stored_long.text.chars().count(),
        crate::inbound::MAX_UNTRUSTED_CHARS
    );

    let replies = store.channel_replies("tg", "c1", "p", 10).unwrap();
    let ids: Vec<&str> = replies.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, ["r2", "r1"], "time order");
    assert_eq!(store.channel_replies("tg", "c1", "p", 1).unwrap().len(), 1);
    assert!(store
        .channel_replies("tg", "c1", "r2", 10)
        .unwrap()
        .is_empty());

    let near = store
        .channel_messages_between("tg", "c1", 0, 200, 10)
        .unwrap();
    let ids: Vec<&str> = near.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, ["long", "p", "r2", "r1"]);
    assert_eq!(
        store
            .channel_messages_between("tg", "c1", 101, 199, 10)
            .unwrap()
            .len(),
        1
    );
    store.close().await.unwrap();
}

use crate::context::chatter_before;

#[tokio::test]
async fn a_chat_record_gives_pending_chatter_per_thread_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(&cfg).unwrap();
    let said = |id: &str, thread: Option<&str>, addressed: bool| ChannelMessage {
        thread_id: thread.map(str::to_string),
        addressed,
        ..chat_message(id, 1, None)
    };
    for m in [
        said("1", None, false),
        said("2", None, true),
        said("3", None, false),
        said("t1", Some("t"), false),
        said("4", None, false),
    ] {
        let stored = store.record_chat_message("k", m).unwrap();
        assert!(stored.seq > 0, "a chat seq is given");
    }
    let ids =
        |v: Vec<ChannelMessage>| -> Vec<String> { v.into_iter().map(|m| m.message_id).collect() };
    // Back to the last addressed message, other threads passed over, oldest first.
    assert_eq!(
        ids(chatter_before(&store, "tg", "c1", None, None, 10).unwrap()),
        ["3", "4"]
    );
    assert_eq!(
        ids(chatter_before(&store, "tg", "c1", None, None, 1).unwrap()),
        ["4"]
    );
    assert_eq!(
        ids(chatter_before(&store, "tg", "c1", Some("t"), None, 10).unwrap()),
        ["t1"]
    );
    let two = store.channel_message("tg", "c1", "2").unwrap().unwrap();
    assert_eq!(
        ids(chatter_before(&store, "tg", "c1", None, Some(two.seq), 10).unwrap()),
        ["1"]
    );
    // Stored again (a retried admission): the record moves, its old order key is skipped.
    store
        .record_chat_message("k", said("3", None, false))
        .unwrap();
    assert_eq!(
        ids(chatter_before(&store, "tg", "c1", None, None, 10).unwrap()),
        ["4", "3"]
    );
    assert_eq!(
        store.session_chat("k").unwrap(),
        Some(("tg".into(), "c1".into()))
    );
    store.close().await.unwrap();
    drop(store);
    let store = Store::open(&cfg).unwrap();
    assert_eq!(
        ids(chatter_before(&store, "tg", "c1", None, None, 10).unwrap()),
        ["4", "3"]
    );
    // Deleting the session takes its chat record with it.
    store.delete_channel_messages("k").unwrap();
    assert!(chatter_before(&store, "tg", "c1", None, None, 10)
        .unwrap()
        .is_empty());
    assert!(store.channel_message("tg", "c1", "1").unwrap().is_none());
    assert_eq!(store.session_chat("k").unwrap(), None);
    store.close().await.unwrap();
}

#[tokio::test]
async fn queued_system_events_are_bounded_durable_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store = Store::open(&cfg).unwrap();
    for (i, text) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let event = SystemEvent {
            timestamp_ms: i as u64,
            text: text.into(),
        };
        store.queue_system_event("k", &event, 3).unwrap();
    }
    store
        .queue_system_event(
            "other",
            &SystemEvent {
                timestamp_ms: 0,
                text: "x".into(),
            },
            3,
        )
        .unwrap();
    store.close().await.unwrap();
    drop(store);
    let store = Store::open(&cfg).unwrap();
    let (keys, events) = store.queued_system_events("k", 10).unwrap();
    let texts: Vec<&str> = events.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(texts, ["b", "c", "d"], "the oldest went first");
    store.remove_system_events(keys).unwrap();
    assert!(store.queued_system_events("k", 10).unwrap().1.is_empty());
    assert_eq!(store.queued_system_events("other", 10).unwrap().1.len(), 1);
    store.delete_channel_messages("other").unwrap();
    assert!(store
        .queued_system_events("other", 10)
        .unwrap()
        .1
        .is_empty());
    store.close().await.unwrap();
}

#[test]
fn chat_messages_stored_before_chat_order_still_decode() {
    let old = super::records::ChannelMessageV2 {
        channel: "tg".into(),
        chat_id: "c".into(),
        message_id: "1".into(),
        sender_id: "u".into(),
        sender_name: "U".into(),
        text: "hi".into(),
        timestamp_ms: 5,
        reply_to: None,
    };
    let m = super::channel::decode_message(&encode(&old).unwrap()).unwrap();
    assert_eq!((m.seq, m.addressed, m.thread_id), (0, true, None));
    assert_eq!(m.text, "hi");
    let new = chat_message("2", 1, None);
    assert_eq!(
        super::channel::decode_message(&encode(&new).unwrap()).unwrap(),
        new
    );
}

#[tokio::test]
async fn strict_flushes_only_what_is_waited_on_and_a_passive_wait_rides_along() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let commit = store.commit();
    let before = commit.flushed_upto();
    // An admission write nobody waits on yet (the chat-completions path).
    let (item, admitted) = store.enqueue("k", record("1")).unwrap();
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        commit.flushed_upto(),
        before,
        "no flush was asked for the unwaited write"
    );
    let passive = {
        let commit = commit.clone();
        tokio::spawn(async move { commit.wait_passive(admitted).await })
    };
    // The turn's commit is waited on; its flush covers the earlier inbox write too.
    let done = store
        .commit_turn(&TurnCommit {
            session_key: "k".into(),
            entries: vec![
                entry(EntryKind::User, "1"),
                entry(EntryKind::Assistant, "ok"),
            ],
            consumed: vec![item.seq],
            now_ms: 1,
            channel_messages: Vec::new(),
            replica: None,
        })
        .unwrap();
    assert!(done.ticket > admitted);
    commit.wait(done.ticket).await.unwrap();
    passive.await.unwrap().unwrap();
    assert!(commit.flushed_upto() >= admitted);
    // Already covered: a demanding wait returns at once.
    commit.wait(admitted).await.unwrap();
}

/// The texts `window_entries` gives for `key` with an unlimited `keep`, newest first.
fn window_texts(store: &Store, key: &str) -> Vec<String> {
    let record = store.session(key).unwrap().unwrap();
    store
        .window_entries(key, TailStamp::of(&record), &mut |_| true)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.text.to_string())
        .collect()
}

fn turn(key: &str, texts: &[&str]) -> TurnCommit {
    TurnCommit {
        session_key: key.to_string(),
        entries: texts.iter().map(|t| entry(EntryKind::User, t)).collect(),
        consumed: vec![],
        now_ms: 5,
        channel_messages: vec![],
        replica: None,
    }
}

/// Compacts every entry of session `key` so far into one summary entry, "sum".
fn compact_into_summary(store: &Store, key: &str) {
    let record = store.session(key).unwrap().unwrap();
    let summary = entry(EntryKind::Summary, "sum");
    store
        .compact_prefix(key, record.next_seq, 2, &summary)
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn the_cached_window_follows_commits_and_compactions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    store.commit_turn(&turn("k", &["a", "b"])).unwrap();
    assert_eq!(window_texts(&store, "k"), ["b", "a"], "from the new tail");
    store.commit_turn(&turn("k", &["c"])).unwrap();
    assert_eq!(window_texts(&store, "k"), ["c", "b", "a"], "extended");
    compact_into_summary(&store, "k");
    assert_eq!(window_texts(&store, "k"), ["c", "sum"], "a compaction");
    store.commit_turn(&turn("k", &["d"])).unwrap();
    assert_eq!(window_texts(&store, "k"), ["d", "c", "sum"]);
    // A reader that stops early, then one that wants more than was cached.
    let record = store.session("k").unwrap().unwrap();
    let mut n = 0;
    let first = store
        .window_entries("k", TailStamp::of(&record), &mut |_| {
            n += 1;
            n <= 1
        })
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(window_texts(&store, "k"), ["d", "c", "sum"]);
    store.close().await.unwrap();
}

/// A sequence and a text.
type SeqText = Option<(u64, String)>;

/// The oldest entry as `oldest_entry_at` gives it, and as sled holds it.
fn oldest_both_ways(store: &Store, key: &str) -> (SeqText, SeqText) {
    let record = store.session(key).unwrap().unwrap();
    let cached = store
        .oldest_entry_at(TailStamp::of(&record))
        .unwrap()
        .map(|(seq, e)| (seq, e.text.to_string()));
    let stored = store
        .oldest_entry(record.id)
        .unwrap()
        .map(|(seq, e)| (seq, e.text.to_string()));
    (cached, stored)
}

#[tokio::test]
async fn the_oldest_entry_comes_from_a_whole_tail_or_from_sled() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    store.commit_turn(&turn("k", &["a", "b"])).unwrap();
    let (cached, stored) = oldest_both_ways(&store, "k");
    assert_eq!(
        cached,
        Some((1, "a".to_string())),
        "from the new session's tail"
    );
    assert_eq!(cached, stored);
    compact_into_summary(&store, "k");
    // The compaction left the tail stale: sled answers, then the read tail does.
    let (cached, stored) = oldest_both_ways(&store, "k");
    assert_eq!(cached.as_ref().map(|(_, t)| t.as_str()), Some("sum"));
    assert_eq!(cached, stored);
    window_texts(&store, "k");
    store.commit_turn(&turn("k", &["c"])).unwrap();
    let (cached, stored) = oldest_both_ways(&store, "k");
    assert_eq!(cached.as_ref().map(|(_, t)| t.as_str()), Some("sum"));
    assert_eq!(cached, stored);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_window_read_past_its_tail_continues_in_sled() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    store.commit_turn(&turn("k", &["a", "b", "c"])).unwrap();
    drop(store.close().await);
    drop(store);
    // A fresh store: the first reader stops after one entry, so the tail holds only "c".
    let store = Store::open(&config(dir.path())).unwrap();
    let record = store.session("k").unwrap().unwrap();
    let mut n = 0;
    store
        .window_entries("k", TailStamp::of(&record), &mut |_| {
            n += 1;
            n <= 1
        })
        .unwrap();
    assert_eq!(window_texts(&store, "k"), ["c", "b", "a"]);
    store.commit_turn(&turn("k", &["d"])).unwrap();
    assert_eq!(window_texts(&store, "k"), ["d", "c", "b", "a"]);
    store.close().await.unwrap();
}
