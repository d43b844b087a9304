//! Lifecycle: recovery at start-up, the lane queue cap, draining and shutdown, lane restarts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fake::{Event, Fake, Refusal};
use super::{eventually, settings, settle, start, start_with, submit, WAIT};
use crate::{LaneSettings, SessionKey, SupervisorMsg};

fn keys(names: &[&str]) -> Vec<SessionKey> {
    names.iter().map(|k| SessionKey::from(*k)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_left_in_the_inbox_run_after_recover() {
    // A small queue cap, so recovering 7 items takes several refills.
    let fake = Arc::new(Fake::new(LaneSettings {
        queue_cap: 2,
        ..settings()
    }));
    let a: Vec<u64> = (0..7).map(|_| fake.seed("a", "")).collect();
    let b: Vec<u64> = (0..3).map(|_| fake.seed("b", "sleep=5")).collect();
    let (fake, h) = start_with(fake).await;

    settle().await;
    assert!(fake.log().is_empty(), "nothing runs before recover");
    assert!(h.registry().is_empty());

    h.recover(keys(&["a", "b", "nothing-left"])).unwrap();
    assert!(
        eventually(
            || fake.completed("a") == a && fake.completed("b") == b,
            WAIT
        )
        .await
    );
    settle().await;
    assert_eq!(fake.starts("a"), a);
    assert_eq!(fake.starts("b"), b);
    assert_eq!(fake.inbox_len(), 0);
    assert!(h.registry().is_live("nothing-left"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_both_recovered_and_routed_runs_once() {
    let fake = Arc::new(Fake::new(settings()));
    let r1 = fake.seed("r", "sleep=100");
    let r2 = fake.seed("r", "");
    let q1 = fake.seed("q", "sleep=50");
    let (fake, h) = start_with(fake).await;

    // Recovered first, then routed (the supervisor handles both in this order: same sender).
    h.recover(keys(&["r"])).unwrap();
    let routed = |key: &str, seq| Event::Existing {
        key: key.to_string(),
        seq,
    };
    assert_eq!(h.submit(routed("r", r1)).await.unwrap(), Ok(r1));
    assert_eq!(h.submit(routed("r", r2)).await.unwrap(), Ok(r2));
    // Routed first (the route spawns the lane, which recovers the item), then recovered.
    assert_eq!(h.submit(routed("q", q1)).await.unwrap(), Ok(q1));
    h.recover(keys(&["q"])).unwrap();

    assert!(eventually(|| fake.completed("r") == [r1, r2], WAIT).await);
    assert!(eventually(|| fake.completed("q") == [q1], WAIT).await);
    settle().await;
    assert_eq!(fake.starts("r"), [r1, r2]);
    assert_eq!(fake.starts("q"), [q1]);
    assert_eq!(h.registry().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn items_past_the_queue_cap_are_refetched_in_order() {
    let (fake, h) = start(LaneSettings {
        queue_cap: 2,
        ..settings()
    })
    .await;
    let mut admitted = vec![submit(&h, "k", "sleep=300").await];
    for _ in 0..19 {
        admitted.push(submit(&h, "k", "").await);
    }
    assert!(
        fake.completed("k").is_empty(),
        "all 20 arrive while the first turn runs"
    );

    assert!(
        eventually(|| fake.completed("k").len() == 20, WAIT).await,
        "{:?}",
        fake.completed("k")
    );
    settle().await;
    assert_eq!(fake.starts("k"), admitted);
    assert_eq!(fake.completed("k"), admitted);
    assert!(fake.inbox("k").is_empty());

    let calls = fake.pending_calls();
    assert!(
        calls.iter().all(|(_, _, limit, _)| *limit <= 2),
        "a lane never asks for more than its cap: {calls:?}"
    );
    // The first two queue slots take items 2 and 3 as they arrive; the remaining 17 overflow and
    // must come back through `pending`, at most 2 per call.
    let refetched: usize = calls.iter().skip(1).map(|(_, _, _, n)| n).sum();
    assert!(
        refetched >= 17,
        "overflowed items were refetched: {calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_running_turn_and_leaves_the_queue_in_the_inbox() {
    let (fake, h) = start(settings()).await;
    let running = submit(&h, "k", "sleep=300").await;
    let queued = [submit(&h, "k", "").await, submit(&h, "k", "").await];
    let idle = submit(&h, "idle", "").await;
    assert!(eventually(|| fake.starts("k") == [running], WAIT).await);
    assert!(eventually(|| fake.completed("idle") == [idle], WAIT).await);

    assert!(h.shutdown(WAIT).await, "drained before the deadline");
    assert_eq!(
        fake.completed("k"),
        [running],
        "shutdown returned only after the running turn finished"
    );
    assert_eq!(
        fake.starts("k"),
        [running],
        "no new turn started while draining"
    );
    assert_eq!(fake.inbox("k"), queued, "queued items stay in the inbox");
    assert!(h.registry().is_empty());
    assert!(
        h.submit(Event::msg("k", "")).await.is_err(),
        "the supervisor is gone after shutdown"
    );

    // The next start replays what was left.
    let (fake, h) = start_with(fake).await;
    h.recover(keys(&["k"])).unwrap();
    assert!(
        eventually(
            || fake.completed("k") == [running, queued[0], queued[1]],
            WAIT
        )
        .await
    );
    assert!(h.shutdown(WAIT).await);
}

#[tokio::test(start_paused = true)]
async fn submissions_during_a_drain_are_refused() {
    let (fake, h) = start(settings()).await;
    let running = submit(&h, "k", "sleep=200").await;
    assert!(eventually(|| fake.starts("k") == [running], WAIT).await);

    // Ask for the drain directly, so that the submission below is ordered after it in the
    // supervisor's mailbox (the public `shutdown` also stops the supervisor once drained).
    let (tx, drained) = ractor::concurrency::oneshot();
    h.actor_ref()
        .send_message(SupervisorMsg::Drain(tx.into()))
        .unwrap();
    assert_eq!(
        h.submit(Event::msg("k", "")).await.unwrap(),
        Err(Refusal::ShuttingDown)
    );
    assert_eq!(
        h.submit(Event::msg("other", "")).await.unwrap(),
        Err(Refusal::ShuttingDown)
    );
    h.recover(keys(&["other"])).unwrap();

    tokio::time::timeout(WAIT, drained)
        .await
        .expect("drain answers once the running turn ended")
        .unwrap();
    assert_eq!(fake.completed("k"), [running]);
    assert!(
        h.registry().is_empty(),
        "recover starts no lane while draining"
    );
    assert_eq!(
        fake.inbox_len(),
        0,
        "refused submissions were never written"
    );
    assert!(h.shutdown(WAIT).await, "a second drain answers at once");
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_up_at_its_deadline() {
    let (fake, h) = start(settings()).await;
    let seq = submit(&h, "k", "sleep=3000").await;
    assert!(eventually(|| fake.starts("k") == [seq], WAIT).await);
    let began = Instant::now();
    assert!(!h.shutdown(Duration::from_millis(100)).await);
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(
        fake.inbox("k"),
        [seq],
        "the unfinished item stays in the inbox"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_lane_is_restarted_and_recovers_its_items() {
    // With a cap of 1 the lane reads the inbox again after every turn, which is where the
    // injected storage error hits.
    let (fake, h) = start(LaneSettings {
        queue_cap: 1,
        ..settings()
    })
    .await;
    let first = submit(&h, "k", "sleep=100").await;
    fake.fail_pending("k", 1);
    let second = submit(&h, "k", "").await;

    assert!(eventually(|| fake.completed("k") == [first, second], WAIT).await);
    assert_eq!(
        fake.pending_failures_left("k"),
        0,
        "the lane hit the failure"
    );
    settle().await;
    assert_eq!(fake.starts("k"), [first, second]);
    assert!(
        h.registry().is_live("k"),
        "a replacement lane serves the key"
    );
    let third = submit(&h, "k", "").await;
    assert!(eventually(|| fake.completed("k") == [first, second, third], WAIT).await);
}

/// A lane can die between the supervisor finding it in the registry and sending to it; the
/// route then starts a replacement. The supervision event that follows must not start a
/// second one: two lanes for one key would run the same items twice, concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_dying_while_an_item_is_routed_is_replaced_once() {
    let (fake, h) = start(LaneSettings {
        queue_cap: 1,
        ..settings()
    })
    .await;
    let first = submit(&h, "k", "sleep=80").await;
    assert!(eventually(|| fake.starts("k") == [first], WAIT).await);
    fake.fail_pending("k", 1);
    // `admit` holds the supervisor for 250 ms; meanwhile the first turn ends and the lane dies
    // on the injected error, so the route finds a dead lane.
    let second = submit(&h, "k", "admit-delay=250 sleep=100").await;
    assert_eq!(
        fake.pending_failures_left("k"),
        0,
        "the lane died during admit"
    );

    assert!(
        eventually(|| fake.completed("k") == [first, second], WAIT).await,
        "{:?}",
        fake.log()
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        fake.starts("k"),
        [first, second],
        "the routed item ran twice"
    );
    assert_eq!(fake.max_in_flight_per_key(), 1);
    assert_eq!(h.registry().len(), 1);
    assert!(h.shutdown(WAIT).await);
}

/// A lane reads the inbox after it started, on a task of its own: admissions (to any key)
/// never wait for a lane's storage read. Before, the supervisor awaited the read while
/// spawning, and this submission waited out the RPC timeout behind it.
#[tokio::test(start_paused = true)]
async fn admissions_do_not_wait_for_a_starting_lane_to_read_the_inbox() {
    let fake = Arc::new(Fake::new(settings()));
    let left = fake.seed("slow", "");
    fake.delay_pending("slow", settings().rpc_timeout * 3);
    let (fake, h) = start_with(fake).await;
    h.recover(keys(&["slow"])).unwrap();
    let other = submit(&h, "other", "").await;
    let slow = submit(&h, "slow", "").await;
    assert!(eventually(|| fake.completed("other") == [other], WAIT).await);
    assert!(
        fake.completed("slow").is_empty(),
        "the slow read has not come back yet"
    );
    // Once it does, the recovered item runs first, then the routed one.
    assert!(eventually(|| fake.completed("slow") == [left, slow], WAIT * 10).await);
    assert!(h.shutdown(WAIT).await);
}
