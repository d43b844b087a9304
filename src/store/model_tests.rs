//! A model-based test: random sequences of store operations (enqueue, turn, evict, compact,
//! reopen) against a trivially correct in-memory model, which must agree after every step.

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;

use super::*;
use crate::config::{Durability, StorageConfig};

const SESSIONS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Enqueue(usize),
    Turn(usize, usize),
    Evict(usize),
    Compact(usize, usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SESSIONS).prop_map(Op::Enqueue),
        4 => (0..SESSIONS, 1..4usize).prop_map(|(s, n)| Op::Turn(s, n)),
        1 => (0..SESSIONS).prop_map(Op::Evict),
        1 => (0..SESSIONS, 1..5usize).prop_map(|(s, n)| Op::Compact(s, n)),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Default)]
struct Model {
    /// Session key → transcript (kind, text), oldest first.
    sessions: BTreeMap<String, Vec<(EntryKind, String)>>,
    /// Session key → queued message ids, oldest first.
    inbox: BTreeMap<String, VecDeque<String>>,
    compactions: BTreeMap<String, u32>,
}

fn key(s: usize) -> String {
    format!("agent:main:test:group:{s}")
}

fn record(id: &str) -> InboxRecord {
    use crate::inbound::{ChatKind, InboundMessage, Sender};
    InboxRecord {
        message: InboundMessage {
            channel: "test".into(),
            account_id: "default".into(),
            chat_kind: ChatKind::Group,
            chat_id: "c".into(),
            thread_id: None,
            message_id: id.into(),
            sender: Sender {
                id: "u".into(),
                name: "U".into(),
                is_bot: false,
            },
            text: id.into(),
            mentions: vec![],
            mentioned_bot: true,
            reply_to: None,
            timestamp_ms: 1,
            attachments: vec![],
            kind: crate::inbound::MessageKind::Message,
        },
        accepted_at_ms: 1,
        system_events: vec![],
        group_history: vec![],
    }
}

fn entry(kind: EntryKind, text: String) -> TranscriptEntry {
    let tokens = text.len() as u32;
    TranscriptEntry::new(kind, text, tokens, 1)
}

fn check(store: &Store, model: &Model) {
    for s in 0..SESSIONS {
        let k = key(s);
        let stored = store.session(&k).unwrap();
        let want = model.sessions.get(&k);
        match (&stored, want) {
            (None, None) => {}
            (Some(r), Some(entries)) => {
                let got: Vec<(EntryKind, String)> = store
                    .transcript(r.id, 0, 10_000)
                    .unwrap()
                    .into_iter()
                    .map(|(_, e)| (e.kind, e.text.to_string()))
                    .collect();
                assert_eq!(&got, entries, "transcript of {k}");
                assert_eq!(r.entries, entries.len() as u64);
                let tokens: u64 = entries.iter().map(|(_, t)| t.len() as u64).sum();
                assert_eq!(r.tokens, tokens);
                assert_eq!(
                    r.compaction_count,
                    model.compactions.get(&k).copied().unwrap_or(0)
                );
            }
            (got, want) => panic!("{k}: store has {got:?}, model {want:?}"),
        }
        let pending: Vec<String> = store
            .pending(&k, 0, 1_000)
            .unwrap()
            .into_iter()
            .map(|i| i.record.message.message_id.clone())
            .collect();
        let want: Vec<String> = model
            .inbox
            .get(&k)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default();
        assert_eq!(pending, want, "inbox of {k}");
    }
}

fn run(ops: Vec<Op>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            data_dir: dir.path().to_path_buf(),
            cache_capacity_bytes: 1 << 20,
            durability: Durability::Batched,
            ..StorageConfig::default()
        };
        let mut store = Store::open(&config).unwrap();
        let mut model = Model::default();
        let mut counter = 0u64;
        let mut now = 1_000u64;
        for op in ops {
            now += 1;
            match op {
                Op::Enqueue(s) => {
                    counter += 1;
                    let id = format!("m{counter}");
                    store.enqueue(&key(s), record(&id)).unwrap();
                    model.inbox.entry(key(s)).or_default().push_back(id);
                }
                Op::Turn(s, n) => {
                    let k = key(s);
                    let items = store.pending(&k, 0, n).unwrap();
                    let mut entries: Vec<TranscriptEntry> = items
                        .iter()
                        .map(|i| entry(EntryKind::User, i.record.message.message_id.clone()))
                        .collect();
                    entries.push(entry(EntryKind::Assistant, format!("answer {now}")));
                    store
                        .commit_turn(&TurnCommit {
                            session_key: k.clone(),
                            entries: entries.clone(),
                            consumed: items.iter().map(|i| i.seq).collect(),
                            now_ms: now,
                            channel_messages: vec![],
                            replica: None,
                        })
                        .unwrap();
                    let queue = model.inbox.entry(k.clone()).or_default();
                    for _ in &items {
                        queue.pop_front();
                    }
                    model
                        .sessions
                        .entry(k)
                        .or_default()
                        .extend(entries.into_iter().map(|e| (e.kind, e.text.to_string())));
                }
                Op::Evict(s) => {
                    let k = key(s);
                    let evicted = store.evict_session(&k, None).unwrap();
                    assert_eq!(evicted.is_some(), model.sessions.remove(&k).is_some());
                    model.compactions.remove(&k);
                }
                Op::Compact(s, n) => {
                    let k = key(s);
                    let Some(r) = store.session(&k).unwrap() else {
                        continue;
                    };
                    let page = store.transcript(r.id, 0, n).unwrap();
                    let Some((through, _)) = page.last() else {
                        continue;
                    };
                    let summary = entry(EntryKind::Summary, format!("summary of {n} at {now}"));
                    let done = store
                        .compact_prefix(&k, r.next_seq, *through, &summary)
                        .unwrap();
                    assert!(done.is_some());
                    let entries = model.sessions.get_mut(&k).unwrap();
                    entries.drain(..page.len());
                    entries.insert(0, (summary.kind, summary.text.to_string()));
                    *model.compactions.entry(k).or_default() += 1;
                }
                Op::Reopen => {
                    store.close().await.unwrap();
                    drop(store);
                    store = Store::open(&config).unwrap();
                }
            }
            check(&store, &model);
        }
        let report = store.doctor(Depth::Full, false).unwrap();
        assert!(report.is_clean(), "{report}");
        let queued: usize = model.inbox.values().map(VecDeque::len).sum();
        assert_eq!(store.queued(), queued);
        store.close().await.unwrap();
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn store_agrees_with_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}
