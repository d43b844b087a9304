//! The support tree's own checks: a wrong helper would make every test meaningless.

use crate::support::{all_answered, Entry, SseStream};

#[tokio::test]
async fn sse_reader_handles_split_lines_comments_and_crlf() {
    let wire = "event: reply\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: one\r\ndata: two\r\n\r\ndata:[DONE]\n\n";
    // Every split point, so events and lines that straddle chunks are covered.
    for cut in 0..wire.len() {
        let pieces = vec![
            Ok(wire.as_bytes()[..cut].to_vec()),
            Ok(wire.as_bytes()[cut..].to_vec()),
        ];
        let mut stream = SseStream::from_bytes(futures_util::stream::iter(pieces));
        let mut events = Vec::new();
        while let Some(e) = stream.next().await {
            events.push((e.event, e.data));
        }
        assert_eq!(
            events,
            [
                (Some("reply".to_string()), r#"{"a":1}"#.to_string()),
                (None, "one\ntwo".to_string()),
                (None, "[DONE]".to_string()),
            ],
            "cut at {cut}"
        );
    }
}

#[test]
fn all_answered_checks_presence_order_and_answers() {
    let entry = |seq: u64, kind: &str, id: Option<&str>| Entry {
        seq,
        kind: kind.into(),
        text: String::new(),
        message_id: id.map(Into::into),
        sender: None,
        timestamp_ms: 1,
        tokens: 1,
    };
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let entries = [
        entry(1, "user", Some("a")),
        entry(2, "assistant", None),
        entry(3, "user", Some("x")),
        entry(4, "assistant", None),
        entry(5, "user", Some("b")),
    ];
    assert!(all_answered(&entries[..4], &ids(&["a"])).is_ok());
    // `x` was never acknowledged (in flight at a kill): it may be there or not.
    assert!(all_answered(&entries[..4], &ids(&["a", "x"])).is_ok());
    assert!(all_answered(&entries[..2], &ids(&["a", "b"])).is_err());
    // Present but not answered yet.
    assert!(all_answered(&entries, &ids(&["a", "b"])).is_err());
    let answered = [&entries[..], &[entry(6, "assistant", None)]].concat();
    assert!(all_answered(&answered, &ids(&["a", "b"])).is_ok());
    let out_of_order = std::panic::catch_unwind(|| all_answered(&answered, &ids(&["b", "a"])));
    assert!(out_of_order.is_err());
    let twice = [&answered[..], &[entry(7, "user", Some("a"))]].concat();
    assert!(std::panic::catch_unwind(|| all_answered(&twice, &ids(&["a"]))).is_err());
    // The oldest ids may be compacted into a summary, but only the oldest.
    let compacted = [
        entry(4, "summary", None),
        entry(5, "user", Some("b")),
        entry(6, "assistant", None),
    ];
    assert!(all_answered(&compacted, &ids(&["a", "b"])).is_ok());
    assert!(all_answered(&compacted[1..], &ids(&["a", "b"])).is_err());
    assert!(all_answered(&compacted, &ids(&["a", "b", "c"])).is_err());
}
