use super::*;
use crate::config::{Durability, StorageConfig};
use crate::inbound::{ChatKind, InboundMessage, Sender};

fn config(dir: &std::path::Path) -> StorageConfig {
    StorageConfig {
        data_dir: dir.to_path_buf(),
        cache_capacity_bytes: 1 << 20,
        durability: Durability::Strict,
        ..StorageConfig::default()
    }
}

pub(super) fn record(id: &str) -> InboxRecord {
    InboxRecord {
        message: InboundMessage {
            channel: "test".into(),
            account_id: "default".into(),
            chat_kind: ChatKind::Direct,
            chat_id: "c".into(),
            thread_id: None,
            message_id: id.into(),
            sender: Sender {
                id: "u".into(),
                name: "U".into(),
                is_bot: false,
            },
            text: format!("text {id}"),
            mentions: vec![],
            mentioned_bot: false,
            reply_to: None,
            timestamp_ms: 1,
            attachments: vec![],
        },
        accepted_at_ms: 1,
        system_events: vec![],
        group_history: vec![],
    }
}

pub(super) fn entry(kind: EntryKind, text: &str) -> TranscriptEntry {
    TranscriptEntry {
        kind,
        text: text.into(),
        message_id: None,
        sender: None,
        timestamp_ms: 1,
        tokens: 3,
        tool: None,
    }
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

    let (rec, seqs, ticket) = store
        .commit_turn(TurnCommit {
            session_key: "k",
            entries: vec![
                entry(EntryKind::User, "q"),
                entry(EntryKind::Assistant, "a"),
            ],
            consumed: vec![a.seq],
            now_ms: 5,
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
    assert_eq!(t[1].1.text, "a");
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
        let db = sled::open(dir.path().join("db")).unwrap();
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
