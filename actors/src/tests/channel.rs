//! The channel actor: submissions reach the supervisor, replies reach the transport.

use std::sync::Arc;

use super::fake::{Event, FakeChannel, Refusal};
use super::{eventually, settings, settle, start, WAIT};
use crate::{ChannelHandle, MAX_INFLIGHT_DELIVERIES};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_forwards_submissions_and_delivers_replies() {
    let (fake, h) = start(settings()).await;
    let channel = Arc::new(FakeChannel::new(false));
    let ch = ChannelHandle::start(Arc::clone(&channel), &h)
        .await
        .unwrap();

    let seq = ch
        .submit(Event::msg("k", ""))
        .await
        .unwrap()
        .expect("accepted through the channel");
    assert!(eventually(|| fake.completed("k") == [seq], WAIT).await);
    assert_eq!(
        ch.submit(Event::Invalid).await.unwrap(),
        Err(Refusal::Invalid),
        "refusals come back through the channel"
    );

    ch.deliver("hello".to_string()).unwrap();
    ch.clone().deliver("world".to_string()).unwrap();
    assert!(eventually(|| channel.delivered().len() == 2, WAIT).await);
    let mut delivered = channel.delivered();
    delivered.sort();
    assert_eq!(delivered, ["hello", "world"]);
    assert!(h.shutdown(WAIT).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_bounds_its_deliveries_in_flight() {
    let (_fake, h) = start(settings()).await;
    let channel = Arc::new(FakeChannel::new(true));
    let ch = ChannelHandle::start(Arc::clone(&channel), &h)
        .await
        .unwrap();

    let total = MAX_INFLIGHT_DELIVERIES + 16;
    for i in 0..total {
        ch.deliver(format!("r{i}")).unwrap();
    }
    assert!(eventually(|| channel.in_flight() == MAX_INFLIGHT_DELIVERIES, WAIT).await);
    settle().await;
    assert_eq!(channel.max_in_flight(), MAX_INFLIGHT_DELIVERIES);
    assert!(channel.delivered().is_empty());

    channel.gate.add_permits(total);
    assert!(eventually(|| channel.delivered().len() == total, WAIT).await);
    assert_eq!(channel.max_in_flight(), MAX_INFLIGHT_DELIVERIES);
}

/// Submissions do not go through the channel actor: deliveries stuck on a slow platform (every
/// slot taken, more waiting) do not hold them up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submissions_are_not_held_up_by_stuck_deliveries() {
    let (fake, h) = start(settings()).await;
    let channel = Arc::new(FakeChannel::new(true));
    let ch = ChannelHandle::start(Arc::clone(&channel), &h)
        .await
        .unwrap();
    for i in 0..MAX_INFLIGHT_DELIVERIES + 16 {
        ch.deliver(format!("r{i}")).unwrap();
    }
    assert!(eventually(|| channel.in_flight() == MAX_INFLIGHT_DELIVERIES, WAIT).await);
    let seq = ch
        .submit(Event::msg("k", ""))
        .await
        .expect("the supervisor answers")
        .expect("accepted while deliveries are stuck");
    assert!(eventually(|| fake.completed("k") == [seq], WAIT).await);
    channel.gate.add_permits(MAX_INFLIGHT_DELIVERIES + 16);
    assert!(
        eventually(
            || channel.delivered().len() == MAX_INFLIGHT_DELIVERIES + 16,
            WAIT
        )
        .await
    );
}
