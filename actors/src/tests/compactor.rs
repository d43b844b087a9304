//! The compactor: one compaction per key however many ask, the concurrency bound, the
//! pending cap, and waiting callers ahead of background work.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::{eventually, WAIT};
use crate::{
    BackendError, CompactionOutcome, CompactionReason, CompactionResult, CompactionWork,
    CompactorHandle, CompactorSettings, ErrorKind, SessionKey,
};

/// Fake work: each compaction takes a permit from `gate` (closed until the test adds
/// permits), counts calls per key and the most running at once.
struct Gated {
    gate: Semaphore,
    calls: Mutex<HashMap<String, usize>>,
    started: Mutex<Vec<String>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

impl Gated {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            gate: Semaphore::new(0),
            calls: Mutex::new(HashMap::new()),
            started: Mutex::new(Vec::new()),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
        })
    }

    fn calls(&self, key: &str) -> usize {
        self.calls.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    fn started(&self) -> Vec<String> {
        self.started.lock().unwrap().clone()
    }
}

impl CompactionWork for Gated {
    async fn compact(&self, key: &SessionKey, _reason: CompactionReason) -> CompactionResult {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default() += 1;
        self.started.lock().unwrap().push(key.to_string());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let permit = self
            .gate
            .acquire()
            .await
            .map_err(|e| BackendError::new(ErrorKind::Interrupted, e.to_string()))?;
        permit.forget();
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(CompactionOutcome {
            tokens_before: 100,
            tokens_after: key.len() as u64,
            entries_compacted: 1,
        })
    }
}

async fn start(work: &Arc<Gated>, max_concurrent: usize, max_pending: usize) -> CompactorHandle {
    let settings = CompactorSettings {
        max_concurrent,
        max_pending,
        wait_timeout: WAIT,
    };
    CompactorHandle::start(Arc::clone(work), settings)
        .await
        .expect("compactor starts")
        .0
}

#[tokio::test]
async fn one_compaction_per_key_and_every_waiter_gets_its_outcome() {
    let work = Gated::new();
    let h = start(&work, 1, 8).await;
    let key: SessionKey = Arc::from("sess-a");
    h.request(key.clone(), CompactionReason::Soft);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (h, key) = (h.clone(), key.clone());
            tokio::spawn(async move { h.compact(key, CompactionReason::Overflow).await })
        })
        .collect();
    assert!(eventually(|| work.calls("sess-a") == 1, WAIT).await);
    tokio::time::sleep(Duration::from_millis(30)).await;
    work.gate.add_permits(10);
    for w in waiters {
        let outcome = w.await.unwrap().unwrap().unwrap();
        assert_eq!(outcome.tokens_after, 6);
    }
    assert_eq!(work.calls("sess-a"), 1, "joined, not repeated");
    // A later request is a new compaction.
    h.compact(key, CompactionReason::Manual)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(work.calls("sess-a"), 2);
    h.stop();
}

#[tokio::test]
async fn concurrency_is_bounded_and_waiting_callers_go_first() {
    let work = Gated::new();
    let h = start(&work, 2, 16).await;
    for i in 0..5 {
        h.request(Arc::from(format!("bg-{i}")), CompactionReason::Soft);
    }
    assert!(eventually(|| work.started().len() == 2, WAIT).await);
    let urgent = {
        let h = h.clone();
        tokio::spawn(async move {
            h.compact(Arc::from("urgent"), CompactionReason::Overflow)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    work.gate.add_permits(100);
    urgent.await.unwrap().unwrap().unwrap();
    assert!(eventually(|| work.started().len() == 6, WAIT).await);
    assert_eq!(work.max_running.load(Ordering::SeqCst), 2);
    assert_eq!(
        work.started()[2],
        "urgent",
        "the waiting caller went before queued background work"
    );
    h.stop();
}

#[tokio::test]
async fn a_request_past_the_pending_cap_is_refused_at_once() {
    let work = Gated::new();
    let h = start(&work, 1, 1).await;
    h.request(Arc::from("running"), CompactionReason::Soft);
    assert!(eventually(|| work.started().len() == 1, WAIT).await);
    h.request(Arc::from("queued"), CompactionReason::Soft);
    let refused = h
        .compact(Arc::from("third"), CompactionReason::Manual)
        .await
        .unwrap();
    assert!(refused.unwrap_err().message().contains("busy"));
    work.gate.add_permits(10);
    assert!(eventually(|| work.calls("queued") == 1, WAIT).await);
    assert_eq!(work.calls("third"), 0);
    h.stop();
}
