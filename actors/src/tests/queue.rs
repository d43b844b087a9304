//! Queue modes: collect, followup, steer, interrupt; debounce; the cap and its drop policies;
//! passivation of the least recently used lanes past `max_live_lanes`.

use std::time::{Duration, Instant};

use super::{eventually, settings, settle, start, submit, WAIT};
use crate::{DropPolicy, LaneSettings, QueueMode, QueuePolicy};

fn policy(mode: QueueMode) -> QueuePolicy {
    QueuePolicy {
        mode,
        debounce: Duration::ZERO,
        cap: 20,
        drop: DropPolicy::Summarize,
    }
}

/// Submits `first` (a slow turn), waits until it runs, then submits `rest` while it runs.
async fn busy_then(
    h: &crate::SupervisorHandle<super::fake::Fake>,
    fake: &super::fake::Fake,
    first: &str,
    rest: &[&str],
) -> (u64, Vec<u64>) {
    let a = submit(h, "k", first).await;
    assert!(eventually(|| fake.starts("k").contains(&a), WAIT).await);
    let mut seqs = Vec::new();
    for text in rest {
        seqs.push(submit(h, "k", text).await);
    }
    (a, seqs)
}

#[tokio::test(start_paused = true)]
async fn collect_coalesces_what_queued_during_a_turn_into_one_turn() {
    let (fake, h) = start(settings()).await;
    fake.set_policy(policy(QueueMode::Collect));
    let (a, queued) = busy_then(&h, &fake, "sleep=300", &["", "", "", ""]).await;
    assert!(eventually(|| fake.completed("k").len() == 5, WAIT).await);
    settle().await;
    let batches = fake.batches("k");
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert_eq!(batches[0], (vec![a], vec![], false));
    assert_eq!(
        batches[1],
        (queued, vec![], true),
        "one turn, flagged as queued"
    );
    assert!(fake.inbox("k").is_empty());
}

#[tokio::test(start_paused = true)]
async fn followup_runs_one_turn_per_queued_message_in_order() {
    let (fake, h) = start(settings()).await;
    fake.set_policy(policy(QueueMode::Followup));
    let (a, queued) = busy_then(&h, &fake, "sleep=200", &["", "", ""]).await;
    assert!(eventually(|| fake.completed("k").len() == 4, WAIT).await);
    let batches: Vec<Vec<u64>> = fake.batches("k").into_iter().map(|b| b.0).collect();
    let mut expected = vec![vec![a]];
    expected.extend(queued.iter().map(|s| vec![*s]));
    assert_eq!(batches, expected);
}

#[tokio::test(start_paused = true)]
async fn debounce_waits_for_a_burst_to_settle() {
    let (fake, h) = start(settings()).await;
    fake.set_policy(QueuePolicy {
        debounce: Duration::from_millis(250),
        ..policy(QueueMode::Collect)
    });
    let a = submit(&h, "k", "sleep=100").await;
    // A burst that starts during the first turn and goes on after it ended: the gaps are far
    // below the debounce, so the whole burst becomes one turn.
    let mut burst = Vec::new();
    for _ in 0..8 {
        burst.push(submit(&h, "k", "").await);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert!(eventually(|| fake.completed("k").len() == 9, WAIT).await);
    settle().await;
    let batches: Vec<Vec<u64>> = fake.batches("k").into_iter().map(|b| b.0).collect();
    assert_eq!(batches, vec![vec![a], burst]);
}

#[tokio::test(start_paused = true)]
async fn interrupt_cancels_the_running_turn_and_answers_with_the_newest_in_view() {
    let (fake, h) = start(settings()).await;
    fake.set_policy(policy(QueueMode::Interrupt));
    let started = Instant::now();
    let (a, newer) = busy_then(&h, &fake, "hang-once=10000", &[""]).await;
    assert!(eventually(|| fake.completed("k").len() == 2, WAIT).await);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the slow turn was not waited for"
    );
    assert_eq!(fake.cancelled(), 1);
    let batches: Vec<Vec<u64>> = fake.batches("k").into_iter().map(|b| b.0).collect();
    assert_eq!(batches, vec![vec![a], vec![a, newer[0]]]);
    assert!(fake.inbox("k").is_empty());
}

#[tokio::test(start_paused = true)]
async fn steer_hands_new_messages_to_a_running_tool_loop() {
    let (fake, h) = start(settings()).await;
    fake.set_policy(policy(QueueMode::Steer));
    let (a, steered) = busy_then(&h, &fake, "sleep=300 steerable", &["", ""]).await;
    assert!(eventually(|| fake.completed("k").len() == 3, WAIT).await);
    settle().await;
    assert_eq!(
        fake.batches("k").len(),
        1,
        "the steered messages ran inside the first turn"
    );
    let mut all = vec![a];
    all.extend(steered);
    assert_eq!(fake.completed("k"), all);
}

#[tokio::test(start_paused = true)]
async fn steer_falls_back_to_followups_when_the_turn_takes_nothing() {
    let (fake, h) = start(settings()).await;
    fake.set_policy(policy(QueueMode::Steer));
    let (a, later) = busy_then(&h, &fake, "sleep=200", &["", ""]).await;
    assert!(eventually(|| fake.completed("k").len() == 3, WAIT).await);
    let batches: Vec<Vec<u64>> = fake.batches("k").into_iter().map(|b| b.0).collect();
    assert_eq!(batches, vec![vec![a], vec![later[0]], vec![later[1]]]);
}

#[tokio::test(start_paused = true)]
async fn the_cap_drops_per_policy_and_everything_is_consumed() {
    for (drop, keep_newest) in [
        (DropPolicy::Summarize, true),
        (DropPolicy::Oldest, true),
        (DropPolicy::Newest, false),
    ] {
        let (fake, h) = start(settings()).await;
        fake.set_policy(QueuePolicy {
            cap: 3,
            drop,
            ..policy(QueueMode::Collect)
        });
        let (_, queued) = busy_then(&h, &fake, "sleep=200", &["", "", "", "", "", ""]).await;
        assert!(eventually(|| fake.batches("k").len() == 2, WAIT).await);
        assert!(
            eventually(|| fake.inbox("k").is_empty(), WAIT).await,
            "{drop:?}"
        );
        let (items, dropped, queued_flag) = fake.batches("k")[1].clone();
        let (kept, gone) = if keep_newest {
            (queued[3..].to_vec(), queued[..3].to_vec())
        } else {
            (queued[..3].to_vec(), queued[3..].to_vec())
        };
        assert_eq!(items, kept, "{drop:?}");
        assert_eq!(dropped, gone, "{drop:?}");
        assert!(queued_flag);
    }
}

#[tokio::test(start_paused = true)]
async fn past_max_live_lanes_the_least_recently_used_idle_lanes_passivate() {
    let (fake, h) = start(LaneSettings {
        max_live_lanes: 5,
        ..settings()
    })
    .await;
    for i in 0..30 {
        submit(&h, &format!("k{i}"), "").await;
    }
    assert!(eventually(|| fake.completed_total() == 30, WAIT).await);
    assert!(
        eventually(|| h.registry().len() <= 5 + 1, WAIT).await,
        "live lanes: {}",
        h.registry().len()
    );
    // A passivated key comes back on its next message.
    submit(&h, "k0", "").await;
    assert!(eventually(|| fake.completed("k0").len() == 2, WAIT).await);
}

#[tokio::test(start_paused = true)]
async fn a_passivated_lane_leaves_no_task_behind() {
    // Idle timers far in the future: a passivated lane's pending idle timer must not outlive
    // it (its task would hold the lane's mailbox for the whole timeout).
    let (fake, h) = start(LaneSettings {
        max_live_lanes: 5,
        idle_timeout: Duration::from_secs(600),
        ..settings()
    })
    .await;
    let lanes = 200;
    for i in 0..lanes {
        submit(&h, &format!("k{i}"), "").await;
    }
    assert!(eventually(|| fake.completed_total() == lanes, WAIT).await);
    assert!(eventually(|| h.registry().len() <= 5 + 1, WAIT).await);
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    assert!(
        eventually(|| alive() < 50, WAIT).await,
        "{} tasks alive after {lanes} lanes, all but a handful passivated",
        alive()
    );
}

#[tokio::test(start_paused = true)]
async fn a_lane_asked_to_passivate_while_busy_passivates_when_its_turn_ends() {
    let (fake, h) = start(LaneSettings {
        max_live_lanes: 1,
        ..settings()
    })
    .await;
    let slow = submit(&h, "k0", "sleep=300").await;
    assert!(eventually(|| fake.starts("k0").contains(&slow), WAIT).await);
    // A second lane puts the supervisor past `max_live_lanes`: it asks k0, which is busy.
    submit(&h, "k1", "").await;
    assert!(eventually(|| fake.completed_total() == 2, WAIT).await);
    // k0 goes as soon as its turn ends, not after its 60 s idle timeout.
    assert!(
        eventually(|| h.registry().len() == 1, WAIT).await,
        "live lanes: {}",
        h.registry().len()
    );
    assert!(!h.registry().is_live("k0"));
}
