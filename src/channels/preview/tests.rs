use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex as StdMutex;

use tokio::sync::Notify;

use super::*;

const TELEGRAM_LIKE: TextLimit = TextLimit::Utf16(4_096);

#[tokio::test(start_paused = true)]
async fn the_throttle_spaces_edits_by_the_interval() {
    let interval = Duration::from_millis(1_000);
    let mut t = Throttle::new(interval);
    let start = Instant::now();
    assert_eq!(t.next_at(start), start, "the first goes at once");
    t.sent(start);
    tokio::time::advance(Duration::from_millis(300)).await;
    assert_eq!(t.next_at(Instant::now()), start + interval);
    tokio::time::advance(Duration::from_millis(2_000)).await;
    let now = Instant::now();
    assert_eq!(t.next_at(now), now, "past the interval: at once");
    t.sent(now + Duration::from_secs(5));
    assert_eq!(t.next_at(now), now + Duration::from_secs(5) + interval);
}

#[test]
fn a_draft_stops_at_one_message_and_a_new_round_starts_afresh() {
    let mut d = Draft::new(TELEGRAM_LIKE);
    d.push(0, "ab");
    d.push(0, "c");
    assert_eq!(d.text, "abc");
    d.push(0, &"x".repeat(4_096));
    assert_eq!(d.text.encode_utf16().count(), 4_096);
    d.push(1, "new");
    assert_eq!(d.text, "new");
}

#[test]
fn a_draft_counts_in_the_platforms_unit() {
    // "😀" is two UTF-16 units and one character.
    let mut utf16 = Draft::new(TextLimit::Utf16(3));
    utf16.push(0, "😀😀");
    assert_eq!(utf16.text, "😀");
    let mut chars = Draft::new(TextLimit::Chars(3));
    chars.push(0, "😀😀😀😀");
    assert_eq!(chars.text, "😀😀😀");
}

#[test]
fn a_reply_to_all_of_an_interrupted_turns_messages_takes_its_preview_over() {
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(takes_over(&ids(&["1"]), &ids(&["1", "2"])));
    assert!(takes_over(&ids(&["1", "2"]), &ids(&["2", "1"])));
    assert!(!takes_over(&ids(&["1"]), &ids(&["2"])));
    assert!(!takes_over(&ids(&["1", "3"]), &ids(&["1", "2"])));
}

/// Records calls and signals each; `full` says the rate limit has no room.
#[derive(Default)]
struct Fake {
    calls: StdMutex<Vec<String>>,
    sent: Notify,
    full: AtomicBool,
}

impl PreviewApi for Arc<Fake> {
    type Id = i64;

    async fn send(&self, text: &str) -> Result<i64, PreviewError> {
        self.calls.lock().unwrap().push(format!("send {text}"));
        self.sent.notify_one();
        Ok(7)
    }

    async fn edit(&self, id: &i64, text: &str) -> Result<(), PreviewError> {
        self.calls.lock().unwrap().push(format!("edit {id} {text}"));
        self.sent.notify_one();
        Ok(())
    }

    async fn has_room(&self, _id: &i64) -> bool {
        let full = self.full.load(Ordering::SeqCst);
        if full {
            self.calls.lock().unwrap().push("no room".into());
            self.sent.notify_one();
        }
        !full
    }
}

#[tokio::test(start_paused = true)]
async fn deltas_inside_one_interval_make_one_trailing_edit() {
    let fake = Arc::new(Fake::default());
    let (tx, rx) = watch::channel(Draft::new(TELEGRAM_LIKE));
    tx.send_modify(|d| d.push(0, "a"));
    let interval = Duration::from_millis(1_000);
    let until = Instant::now() + Duration::from_secs(60);
    let api = Arc::clone(&fake);
    let task = tokio::spawn(async move { show(&api, rx, interval, until).await });
    fake.sent.notified().await;
    for piece in ["b", "c", "d"] {
        tokio::time::advance(Duration::from_millis(100)).await;
        tx.send_modify(|d| d.push(0, piece));
    }
    tokio::task::yield_now().await;
    assert_eq!(*fake.calls.lock().unwrap(), vec!["send a"], "no edit yet");
    fake.sent.notified().await;
    assert_eq!(*fake.calls.lock().unwrap(), vec!["send a", "edit 7 abcd"]);
    drop(tx);
    assert_eq!(task.await.unwrap(), Some(7));
    assert_eq!(fake.calls.lock().unwrap().len(), 2, "no edit after the end");
}

#[tokio::test(start_paused = true)]
async fn no_room_in_the_rate_limit_skips_the_edit_and_the_next_delta_tries_again() {
    let fake = Arc::new(Fake::default());
    fake.full.store(true, Ordering::SeqCst);
    let (tx, rx) = watch::channel(Draft::new(TextLimit::Chars(2_000)));
    tx.send_modify(|d| d.push(0, "a"));
    let interval = Duration::from_millis(1_000);
    let until = Instant::now() + Duration::from_secs(60);
    let api = Arc::clone(&fake);
    let task = tokio::spawn(async move { show(&api, rx, interval, until).await });
    fake.sent.notified().await;
    tx.send_modify(|d| d.push(0, "b"));
    fake.sent.notified().await;
    assert_eq!(*fake.calls.lock().unwrap(), vec!["send a", "no room"]);
    fake.full.store(false, Ordering::SeqCst);
    tx.send_modify(|d| d.push(0, "c"));
    fake.sent.notified().await;
    assert_eq!(
        *fake.calls.lock().unwrap(),
        vec!["send a", "no room", "edit 7 abc"]
    );
    drop(tx);
    assert_eq!(task.await.unwrap(), Some(7));
}
