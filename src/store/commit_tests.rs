//! Grouped turn commits, the async committer, and the dedupe marks restored from the inbox.

use super::tests::{entry, record};
use super::*;
use crate::config::{Durability, StorageConfig};

pub(super) fn config(dir: &std::path::Path) -> StorageConfig {
    StorageConfig {
        data_dir: dir.to_path_buf(),
        cache_capacity_bytes: 1 << 20,
        durability: Durability::Strict,
        ..StorageConfig::default()
    }
}

pub(super) fn turn(key: &str, text: &str, consumed: Vec<u64>) -> TurnCommit {
    TurnCommit {
        session_key: key.to_string(),
        entries: vec![
            entry(EntryKind::User, text),
            entry(EntryKind::Assistant, "a"),
        ],
        consumed,
        now_ms: 7,
        channel_messages: vec![],
        replica: None,
    }
}

#[tokio::test]
async fn one_transaction_commits_several_turns_of_one_and_several_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let (a, _) = store.enqueue("k", record("1")).unwrap();
    let (b, _) = store.enqueue("k", record("2")).unwrap();
    let (c, _) = store.enqueue("other", record("3")).unwrap();
    let done = store
        .commit_turns(&[
            turn("k", "first", vec![a.seq]),
            turn("other", "x", vec![c.seq]),
            turn("k", "second", vec![b.seq]),
        ])
        .unwrap();
    assert_eq!(done.len(), 3);
    assert_eq!(done[0].seqs, [1, 2]);
    assert_eq!(done[1].seqs, [1, 2]);
    assert_eq!(
        done[2].seqs,
        [3, 4],
        "the second turn of k follows the first"
    );
    assert_eq!(done[2].record.entries, 4);
    assert!(done.iter().all(|d| d.ticket == done[0].ticket));
    store.commit().wait(done[0].ticket).await.unwrap();
    assert_eq!(store.queued(), 0);
    let k = store.session("k").unwrap().unwrap();
    let texts: Vec<String> = store
        .transcript(k.id, 0, 10)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.text.to_string())
        .collect();
    assert_eq!(texts, ["first", "a", "second", "a"]);
    assert!(store.commit_turns(&[]).unwrap().is_empty());
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_failing_turn_fails_its_whole_group_and_nothing_of_it_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let (a, _) = store.enqueue("good", record("1")).unwrap();
    // An undecodable session record makes its turn abort.
    store.inner().sessions.insert("bad", &[0xEE, 1, 2]).unwrap();
    let err = store
        .commit_turns(&[turn("good", "q", vec![a.seq]), turn("bad", "q", vec![])])
        .unwrap_err();
    assert!(matches!(err, StoreError::Decode { .. }), "{err}");
    assert!(store.session("good").unwrap().is_none());
    assert_eq!(store.queued(), 1, "the inbox entry is still there");
    store.close().await.unwrap();
}

#[tokio::test]
async fn the_committer_groups_concurrent_turns_and_isolates_a_failing_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    store.inner().sessions.insert("bad", &[0xEE, 1, 2]).unwrap();
    let committer = TurnCommitter::start();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (item, _) = store
            .enqueue(&format!("s{i}"), record(&i.to_string()))
            .unwrap();
        let (committer, store) = (committer.clone(), store.clone());
        tasks.push(tokio::spawn(async move {
            committer
                .commit(&store, turn(&format!("s{i}"), "q", vec![item.seq]))
                .await
        }));
    }
    let bad = committer.commit(&store, turn("bad", "q", vec![])).await;
    assert!(matches!(bad, Err(StoreError::Decode { .. })));
    for t in tasks {
        let done = t.await.unwrap().unwrap();
        assert_eq!(done.seqs, [1, 2]);
        store.commit().wait(done.ticket).await.unwrap();
    }
    assert_eq!(store.queued(), 0);
    assert_eq!(store.session_count(), 201);
    drop(committer);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_strict_commit_is_answered_once_its_flush_has_settled() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    let committer = TurnCommitter::start();
    for i in 0..20 {
        let (item, _) = store.enqueue("s", record(&i.to_string())).unwrap();
        let done = committer
            .commit(&store, turn("s", "q", vec![item.seq]))
            .await
            .unwrap();
        assert!(
            store.commit().flushed_upto() >= done.ticket,
            "turn {i}: answered before the flush covering ticket {}",
            done.ticket
        );
    }
    drop(committer);
    store.close().await.unwrap();
}

#[tokio::test]
async fn dedupe_marks_missing_from_queued_messages_are_restored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    // As after a crash between the inbox insert and the dedupe insert.
    let (item, _) = store.enqueue("k", record("m1")).unwrap();
    let key_of = |r: &InboxRecord| format!("key-{}", r.message.message_id);
    assert!(!store.dedupe_seen("key-m1", 2).unwrap());
    assert_eq!(store.restore_inbox_dedupe(key_of, 100).unwrap(), 1);
    assert!(store.dedupe_seen("key-m1", 2).unwrap());
    assert!(
        !store
            .dedupe_seen("key-m1", item.record.accepted_at_ms + 100)
            .unwrap(),
        "it expires a TTL after acceptance"
    );
    assert_eq!(
        store.restore_inbox_dedupe(key_of, 100).unwrap(),
        0,
        "present marks are left alone"
    );
    store.close().await.unwrap();
}

/// A waiter may hold a generation's group commit past a rewrite; it must not keep the old
/// database open, or the database's last handle (whose drop flushes under sled's process-wide
/// lock) may drop on an async worker beside a transaction, which hung the server. sled locks
/// its files while a database is open, so reopening the directory shows it was let go.
#[tokio::test]
async fn a_retired_group_commit_lets_go_of_its_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::Config::new().path(dir.path()).open().unwrap();
    let commit = GroupCommit::start(db.clone(), Durability::Strict, Duration::from_millis(5));
    db.insert(b"k", b"v").unwrap();
    commit.wait(commit.ticket()).await.unwrap();
    drop(db);
    let held = commit.clone();
    assert!(
        sled::Config::new().path(dir.path()).open().is_err(),
        "still open through the group commit"
    );
    commit.stop();
    for _ in 0..1_000 {
        if commit.is_stopped() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(commit.is_stopped());
    let reopened = sled::Config::new().path(dir.path()).open();
    assert!(reopened.is_ok(), "{:?}", reopened.err());
    drop(held);
}

#[tokio::test]
async fn a_replicated_turn_writes_its_position_and_answered_marks_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    assert_eq!(store.replica_applied(3).unwrap(), 0);
    let mut replicated = turn("k", "hi", vec![]);
    replicated.replica = Some(ReplicaMarks {
        partition: 3,
        log_seq: 41,
        answered: vec!["m1".into(), "m2".into()],
        expires_at_ms: 1_000,
    });
    store.commit_turn(&replicated).unwrap();
    assert_eq!(store.replica_applied(3).unwrap(), 41);
    assert_eq!(store.replica_applied(4).unwrap(), 0, "per partition");
    assert!(store.replica_answered("k", "m1", 999).unwrap());
    assert!(store.replica_answered("k", "m2", 999).unwrap());
    assert!(!store.replica_answered("k", "m3", 999).unwrap());
    assert!(
        !store.replica_answered("other", "m1", 999).unwrap(),
        "per session"
    );
    assert!(
        !store.replica_answered("k", "m1", 1_000).unwrap(),
        "expired"
    );
    // A single node's turn writes neither.
    store.commit_turn(&turn("k", "again", vec![])).unwrap();
    assert_eq!(store.replica_applied(3).unwrap(), 41);
    assert_eq!(store.session("k").unwrap().unwrap().entries, 4);
}

#[tokio::test]
async fn a_cluster_node_clears_its_inbox_and_sees_what_it_still_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&config(dir.path())).unwrap();
    store.enqueue("k", record("1")).unwrap();
    store.enqueue("k", record("2")).unwrap();
    store.enqueue("other", record("3")).unwrap();
    assert!(store.inbox_holds("k", "2", 10).unwrap());
    assert!(
        !store.inbox_holds("k", "3", 10).unwrap(),
        "3 is another session's"
    );
    assert!(
        !store.inbox_holds("k", "2", 1).unwrap(),
        "only the first `limit` are read"
    );
    assert_eq!(store.queued(), 3);
    assert_eq!(store.clear_inbox().unwrap(), 3);
    assert_eq!(store.queued(), 0);
    assert!(store.sessions_with_pending().unwrap().is_empty());
    assert!(!store.inbox_holds("k", "1", 10).unwrap());
}
