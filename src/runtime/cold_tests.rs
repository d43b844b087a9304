//! A cold session's thaw runs in its turn, not in admission: a message for another session
//! is acknowledged (and answered) while a large thaw runs, and the thawed session's messages
//! follow its old transcript in order.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{Config, QueueModeSetting};
use crate::inbound::{ChatKind, InboundMessage, MessageKind, Sender};
use crate::store::{EntryKind, TranscriptEntry, TurnCommit};
use crate::Runtime;

/// Longest wait for anything in these tests; a hang fails instead of blocking the suite.
const PATIENCE: Duration = Duration::from_secs(60);

fn message(chat: &str, id: &str) -> InboundMessage {
    InboundMessage {
        channel: "test".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Direct,
        chat_id: chat.into(),
        thread_id: None,
        message_id: id.into(),
        sender: Sender {
            id: format!("user-{chat}"),
            name: "Uma".into(),
            is_bot: false,
        },
        text: format!("text {id}"),
        mentions: vec![],
        mentioned_bot: false,
        reply_to: None,
        timestamp_ms: 0,
        attachments: vec![],
        kind: MessageKind::Message,
    }
}

/// Submits into the explicit session `agent:main:test:<chat>`.
async fn submit(rt: &Runtime, chat: &str, id: &str) -> String {
    within(
        &format!("{id}'s acknowledgement"),
        rt.submit_to(message(chat, id), Some(format!("agent:main:test:{chat}"))),
    )
    .await
    .unwrap()
    .session_key
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {PATIENCE:?}"))
}

/// Waits on a std channel without holding a tokio worker.
async fn recv(rx: &Arc<Mutex<mpsc::Receiver<()>>>) {
    let rx = Arc::clone(rx);
    tokio::task::spawn_blocking(move || rx.lock().unwrap().recv_timeout(PATIENCE))
        .await
        .unwrap()
        .expect("the thaw started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_thaw_holds_up_no_other_session_and_keeps_its_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::with_data_dir(dir.path());
    config.queue.mode = QueueModeSetting::Followup;
    config.queue.debounce_ms = 0;
    config.server.shutdown_grace_ms = 200;
    // No background compaction: the test counts the entries it wrote, and a compaction of
    // the long history racing the count replaced 802 of them by a summary once.
    config.compaction.soft_threshold = 1.0;
    config.compaction.window_trigger = false;
    let rt = Runtime::builder().config(config).build().await.unwrap();
    let store = rt.inner.store.clone();

    // Session A: one answered message, then a long history, then frozen.
    let mut first = rt.reply_to("a1");
    let key_a = submit(&rt, "a", "a1").await;
    within("a1's reply", first.recv()).await.unwrap();
    let entry = |i: u64| {
        let kind = if i.is_multiple_of(2) {
            EntryKind::User
        } else {
            EntryKind::Assistant
        };
        let text = format!("history {i} {}", "words ".repeat(40));
        TranscriptEntry::new(kind, text, 40, 1_000 + i)
    };
    for chunk in 0..20u64 {
        store
            .commit_turn(&TurnCommit {
                session_key: key_a.clone(),
                entries: (chunk * 100..(chunk + 1) * 100).map(entry).collect(),
                consumed: vec![],
                // Now, not 1970: a session last written in 1970 is the janitor's to prune, and
                // its first pass, racing these commits, once cut the history in two sessions.
                now_ms: crate::clock::now_ms() + chunk,
                channel_messages: vec![],
                replica: None,
            })
            .unwrap();
    }
    let before = rt.transcript(&key_a, 0, 10_000).unwrap().unwrap();
    assert_eq!(before.len(), 2 + 2_000);
    assert!(store.freeze_for_test(&key_a).unwrap(), "frozen");
    assert!(rt.session(&key_a).unwrap().unwrap().cold);

    // The thaw stops after reading its frame's header until the test lets it go.
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let started_rx = Arc::new(Mutex::new(started_rx));
    let release_rx = Mutex::new(release_rx);
    store.set_thaw_hook(move || {
        let _ = started_tx.send(());
        let _ = release_rx.lock().unwrap().recv_timeout(PATIENCE);
    });

    let mut a2 = rt.reply_to("a2");
    let mut a3 = rt.reply_to("a3");
    let mut b1 = rt.reply_to("b1");
    submit(&rt, "a", "a2").await;
    recv(&started_rx).await;
    // The thaw is held: the supervisor admits on.
    submit(&rt, "a", "a3").await;
    let key_b = submit(&rt, "b", "b1").await;
    assert_ne!(key_b, key_a);
    let reply = within("b1's reply", b1.recv()).await.unwrap();
    assert_eq!(reply.session_key, key_b);
    assert!(
        rt.session(&key_a).unwrap().unwrap().cold,
        "A is still being thawed"
    );

    release_tx.send(()).unwrap();
    within("a2's reply", a2.recv()).await.unwrap();
    within("a3's reply", a3.recv()).await.unwrap();
    let after = rt.transcript(&key_a, 0, 10_000).unwrap().unwrap();
    assert_eq!(after.len(), before.len() + 4);
    assert!(!rt.session(&key_a).unwrap().unwrap().cold);
    assert_eq!(
        after[..before.len()],
        before[..],
        "the thawed history first"
    );
    let tail: Vec<(EntryKind, Option<&str>)> = after[before.len()..]
        .iter()
        .map(|e| (e.kind, e.message_id.as_deref()))
        .collect();
    assert_eq!(
        tail,
        [
            (EntryKind::User, Some("a2")),
            (EntryKind::Assistant, None),
            (EntryKind::User, Some("a3")),
            (EntryKind::Assistant, None)
        ]
    );
    assert!(after.windows(2).all(|w| w[0].seq < w[1].seq));
    rt.shutdown().await.unwrap();
}
