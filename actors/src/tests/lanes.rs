//! Lanes: FIFO per key, one turn at a time, parallel across keys, passivation, failing turns.

use std::time::{Duration, Instant};

use super::fake::{Event, Refusal};
use super::{eventually, settings, settle, start, submit, WAIT};
use crate::{LaneSettings, SupervisorMsg, TurnFailure};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_of_one_key_run_in_admission_order_exactly_once() {
    let (fake, h) = start(settings()).await;
    // Concurrent submitters: the admission order (the sequence the supervisor assigns) is the
    // order the lane must follow, whatever order the submitters happen to be scheduled in.
    let mut tasks = Vec::new();
    for i in 0..50 {
        let h = h.clone();
        let text = if i % 7 == 0 { "sleep=5" } else { "" };
        tasks.push(tokio::spawn(async move { submit(&h, "k", text).await }));
    }
    let mut admitted = Vec::new();
    for t in tasks {
        admitted.push(t.await.unwrap());
    }
    admitted.sort_unstable();

    assert!(
        eventually(|| fake.completed("k").len() == 50, WAIT).await,
        "not all items ran: {:?}",
        fake.completed("k")
    );
    settle().await;
    assert_eq!(
        fake.starts("k"),
        admitted,
        "each item starts once, in admission order"
    );
    assert_eq!(fake.completed("k"), admitted);
    assert!(fake.inbox("k").is_empty());
    assert_eq!(h.registry().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_key_never_runs_two_turns_at_once() {
    let (fake, h) = start(settings()).await;
    let first = submit(&h, "k", "sleep=300").await;
    assert!(eventually(|| fake.starts("k") == [first], WAIT).await);

    // These arrive while the first turn is running; some fail once and are retried.
    let mut admitted = vec![first];
    for i in 0..10 {
        let text = match i % 3 {
            0 => "sleep=10",
            1 => "sleep=3 error-once",
            _ => "panic-once",
        };
        admitted.push(submit(&h, "k", text).await);
    }
    assert!(
        fake.completed("k").is_empty(),
        "the first turn is still running while the others arrive"
    );

    assert!(eventually(|| fake.completed("k").len() == 11, WAIT).await);
    assert_eq!(
        fake.max_in_flight_per_key(),
        1,
        "turns of one key overlapped"
    );
    assert_eq!(fake.completed("k"), admitted);
    assert_eq!(fake.abandoned_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_run_in_parallel() {
    let (fake, h) = start(settings()).await;
    let began = Instant::now();
    for k in 0..10 {
        submit(&h, &format!("k{k}"), "sleep=200").await;
    }
    assert!(eventually(|| fake.completed_total() == 10, WAIT).await);
    let took = began.elapsed();

    assert!(
        fake.max_in_flight_total() > 1,
        "turns of different keys never overlapped"
    );
    // Serial execution would take at least 10 × 200 ms; this bound is deliberately loose.
    assert!(
        took < Duration::from_millis(10 * 200),
        "10 keys took {took:?}"
    );
    assert_eq!(fake.max_in_flight_per_key(), 1);
    assert_eq!(h.registry().len(), 10);
}

#[tokio::test(start_paused = true)]
async fn an_idle_lane_passivates_and_respawns_for_the_next_item() {
    let (fake, h) = start(LaneSettings {
        idle_timeout: Duration::from_millis(50),
        ..settings()
    })
    .await;
    let first = submit(&h, "k", "").await;
    assert!(h.registry().is_live("k"));
    assert!(eventually(|| fake.completed("k") == [first], WAIT).await);
    assert!(
        eventually(|| h.registry().is_empty(), WAIT).await,
        "the idle lane did not passivate"
    );
    let live = h
        .actor_ref()
        .call(SupervisorMsg::LiveLanes, Some(WAIT))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(live, 0, "the supervisor agrees with the registry");

    // The next item spawns the lane again; a slow turn keeps it live while we look.
    let second = submit(&h, "k", "sleep=100").await;
    assert!(h.registry().is_live("k"), "the new item spawned a lane");
    assert!(eventually(|| fake.completed("k") == [first, second], WAIT).await);
    assert!(eventually(|| h.registry().is_empty(), WAIT).await);
    assert_eq!(fake.starts("k"), [first, second]);
}

#[tokio::test(start_paused = true)]
async fn a_busy_lane_does_not_passivate() {
    let (fake, h) = start(LaneSettings {
        idle_timeout: Duration::from_millis(30),
        ..settings()
    })
    .await;
    // The turn outlasts the idle timeout several times over.
    let seq = submit(&h, "k", "sleep=200").await;
    assert!(eventually(|| fake.starts("k") == [seq], WAIT).await);
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(
        h.registry().is_live("k"),
        "a lane with a running turn passivated"
    );
    assert!(eventually(|| fake.completed("k") == [seq], WAIT).await);
    assert!(eventually(|| h.registry().is_empty(), WAIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_turn_is_retried_once_then_abandoned_and_the_lane_goes_on() {
    let (fake, h) = start(LaneSettings {
        turn_retries: 1,
        ..settings()
    })
    .await;
    let bad = submit(&h, "k", "panic").await;
    let good = submit(&h, "k", "").await;

    assert!(eventually(|| fake.completed("k") == [good], WAIT).await);
    assert_eq!(fake.starts("k"), [bad, bad, good], "one run and one retry");
    let abandoned = fake.abandoned("k");
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].0, [bad]);
    assert!(
        matches!(&abandoned[0].1, TurnFailure::Panicked(m) if m.contains("boom")),
        "{:?}",
        abandoned[0].1
    );
    assert!(fake.inbox("k").is_empty(), "the abandoned item is consumed");
    assert!(h.registry().is_live("k"), "the lane survived the panic");

    // ...and keeps serving its key.
    let later = submit(&h, "k", "").await;
    assert!(eventually(|| fake.completed("k") == [good, later], WAIT).await);
}

/// How an abandoned turn's failure must look; `None` when the turn must not be abandoned.
type Abandoned = Option<fn(&TurnFailure) -> bool>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_turns_follow_the_retry_budget() {
    // (turn_retries, directive, how often the item starts, how it is abandoned)
    let cases: [(u32, &str, usize, Abandoned); 6] = [
        (
            0,
            "panic",
            1,
            Some(|f| matches!(f, TurnFailure::Panicked(_))),
        ),
        (0, "error", 1, Some(|f| matches!(f, TurnFailure::Error(_)))),
        (
            1,
            "error",
            2,
            Some(|f| matches!(f, TurnFailure::Error(m) if m.contains("error"))),
        ),
        (
            2,
            "panic",
            3,
            Some(|f| matches!(f, TurnFailure::Panicked(_))),
        ),
        (1, "panic-once", 2, None),
        (1, "error-once", 2, None),
    ];
    for (retries, text, runs, failure) in cases {
        let (fake, h) = start(LaneSettings {
            turn_retries: retries,
            ..settings()
        })
        .await;
        let seq = submit(&h, "k", text).await;
        let next = submit(&h, "k", "").await;
        let case = format!("retries={retries} {text}");
        assert!(
            eventually(|| fake.completed("k").contains(&next), WAIT).await,
            "{case}"
        );
        settle().await;
        let starts = fake.starts("k");
        assert_eq!(starts.iter().filter(|s| **s == seq).count(), runs, "{case}");
        match failure {
            Some(expected) => {
                let abandoned = fake.abandoned("k");
                assert_eq!(abandoned.len(), 1, "{case}");
                assert_eq!(abandoned[0].0, [seq], "{case}");
                assert!(expected(&abandoned[0].1), "{case}: {:?}", abandoned[0].1);
                assert_eq!(fake.completed("k"), [next], "{case}");
            }
            None => {
                assert!(fake.abandoned("k").is_empty(), "{case}");
                assert_eq!(fake.completed("k"), [seq, next], "{case}");
            }
        }
        assert!(fake.inbox("k").is_empty(), "{case}");
        assert!(h.shutdown(WAIT).await, "{case}");
    }
}

#[tokio::test]
async fn refused_events_spawn_no_lane() {
    let (fake, h) = start(settings()).await;
    let refused = h.submit(Event::Invalid).await.unwrap();
    assert_eq!(refused, Err(Refusal::Invalid));
    assert!(h.registry().is_empty());
    assert_eq!(fake.inbox_len(), 0);
    assert!(fake.log().is_empty());
}
