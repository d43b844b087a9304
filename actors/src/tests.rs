//! Unit tests for the actors, driven by in-memory fakes (no disk, no network).
//!
//! # Layout
//! - `fake`: the [`fake::Fake`] backend (a `BTreeMap` inbox, a log of turns, in-flight
//!   counters) and a recording [`fake::FakeChannel`].
//! - `lanes`: ordering, one turn at a time, parallelism across keys, passivation, failing turns.
//! - `lifecycle`: recovery, the queue cap, draining and shutdown, lane restarts, admissions
//!   that do not wait for a starting lane's inbox read.
//! - `channel`: the channel actor and its handle.
//! - `compactor`: the compactor's dedupe, concurrency bound and pending cap.
//! - `model`: random interleavings checked against a trivially correct model.
//!
//! Waiting is done with [`eventually`], which polls; the only fixed sleeps are [`settle`], a
//! short window in which a wrong extra turn (a duplicate) would show up. Tests of timing
//! (debounce, idle timeouts, slow turns, drain deadlines) run on paused time
//! (`start_paused = true`): the fake's `sleep=MS` turns and the lanes' timers advance virtual
//! time, so they neither wait for real nor depend on the machine's load. Tests of concurrency
//! across threads stay on the multi-threaded runtime. `LaneQueue`'s own tests are in
//! `lane/queue_tests.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{LaneSettings, SupervisorHandle};

mod channel;
mod compactor;
mod fake;
mod lanes;
mod lifecycle;
mod model;
mod queue;

use fake::{Event, Fake};

/// How long any single wait may take before a test fails.
const WAIT: Duration = Duration::from_secs(5);

/// Settings for tests: long idle timeout (no passivation unless a test asks), roomy queue.
fn settings() -> LaneSettings {
    LaneSettings {
        idle_timeout: Duration::from_secs(60),
        queue_cap: 1_000,
        turn_retries: 1,
        rpc_timeout: Duration::from_secs(5),
        max_live_lanes: 10_000,
    }
}

/// Polls `cond` every few milliseconds until it holds or `timeout` passes; returns whether it
/// held.
async fn eventually(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Gives a wrongly queued duplicate turn the time to start, before a test checks that none did.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(60)).await;
}

async fn start(settings: LaneSettings) -> (Arc<Fake>, SupervisorHandle<Fake>) {
    start_with(Arc::new(Fake::new(settings))).await
}

async fn start_with(fake: Arc<Fake>) -> (Arc<Fake>, SupervisorHandle<Fake>) {
    let (handle, _join) = SupervisorHandle::start(Arc::clone(&fake))
        .await
        .expect("supervisor starts");
    (fake, handle)
}

/// Submits a message and returns its sequence; panics if it is not accepted.
async fn submit(h: &SupervisorHandle<Fake>, key: &str, text: &str) -> u64 {
    h.submit(Event::msg(key, text))
        .await
        .expect("supervisor answers")
        .expect("message accepted")
}
