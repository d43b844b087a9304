//! Provider rate limits: a 429 with `Retry-After` pauses the model for every session at once
//! (the shared per-model limiter), instead of each turn retrying alone into the same quota;
//! past `[model] max_connections` requests queue instead of failing.

use std::time::Duration;

use reqwest::StatusCode;

use crate::fake_model::{Behaviour, FakeModel};
use crate::small_window::{chat, openai_model};
use crate::support::{data_dir, start_server_with};

/// Sessions started, one every [`STAGGER`]: together they span most of the back-off window,
/// so turns retrying alone would keep hitting the server during it.
const SESSIONS: usize = 40;
const STAGGER: Duration = Duration::from_millis(20);
/// 429s the fake answers first, and the `Retry-After` of each.
const REFUSED: usize = 3;
const RETRY_AFTER: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_backs_the_model_off_for_every_session_at_once() {
    let fake = FakeModel::start(Behaviour {
        rate_limited_first: REFUSED,
        retry_after_secs: RETRY_AFTER.as_secs() as u32,
        ..Behaviour::default()
    })
    .await;
    let server = start_server_with(data_dir(), |c| {
        openai_model(c, &fake.base_url, "quota-model");
    })
    .await;
    let mut turns = Vec::new();
    for n in 0..SESSIONS {
        let api = server.api.clone();
        turns.push(tokio::spawn(async move {
            chat(&api, &format!("s-{n}"), &format!("turn-{n} hello")).await
        }));
        tokio::time::sleep(STAGGER).await;
    }
    for (n, turn) in turns.into_iter().enumerate() {
        let (status, reply) = turn.await.expect("the turn task");
        assert_eq!(status, StatusCode::OK, "session {n}: {reply}");
        assert!(reply.starts_with(&format!("answer turn-{n}")), "{reply:?}");
    }
    let seen = fake.seen();
    let first_429 = seen.iter().find(|s| s.status == 429).expect("a 429").at;
    // Requests already on their way when the 429 went out may still arrive; nothing else
    // may until Retry-After has passed.
    let during = seen
        .iter()
        .filter(|s| s.at > first_429 && s.at < first_429 + RETRY_AFTER - STAGGER)
        .count();
    assert!(
        during <= 3,
        "{during} requests reached the server during the back-off window"
    );
    let refused = seen.iter().filter(|s| s.status == 429).count();
    assert_eq!(refused, REFUSED);
    assert_eq!(seen.iter().filter(|s| s.status == 200).count(), SESSIONS);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_turns_queue_for_the_model_instead_of_failing() {
    const AT_ONCE: usize = 8;
    let fake = FakeModel::start(Behaviour {
        delay_ms: 200,
        ..Behaviour::default()
    })
    .await;
    let server = start_server_with(data_dir(), |c| {
        openai_model(c, &fake.base_url, "narrow-model");
        c.model.max_connections = 2;
    })
    .await;
    let turns: Vec<_> = (0..AT_ONCE)
        .map(|n| {
            let api = server.api.clone();
            tokio::spawn(
                async move { chat(&api, &format!("c-{n}"), &format!("turn-{n} hi")).await },
            )
        })
        .collect();
    for (n, turn) in turns.into_iter().enumerate() {
        let (status, reply) = turn.await.expect("the turn task");
        assert_eq!(status, StatusCode::OK, "session {n}: {reply}");
    }
    assert_eq!(
        fake.seen().len(),
        AT_ONCE,
        "each answered once, none retried"
    );
    assert!(
        fake.most_in_flight() <= 2,
        "{} requests at once",
        fake.most_in_flight()
    );
    server.stop().await;
}
