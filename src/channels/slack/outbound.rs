//! What a reply looks like on Slack: the JSON body of each `chat.postMessage`.
//!
//! - The text is escaped as Slack asks (`&`, `<`, `>`), so nothing the model writes is read
//!   as markup: `<!channel>`, `<!here>`, `<!everyone>`, `<!subteam^…>` and `<@U…>` arrive
//!   as text and ping nobody; `link_names` is off, so a bare `@channel` stays text too.
//! - Replies go in the thread of the message answered (`thread_ts`).
//! - Pieces of at most [`MAX_MESSAGE_CHARS`] characters, cut on lines and code fences (the
//!   Discord channel's splitter).

use serde_json::{json, Value};

/// Longest text of one message, in characters, before escaping: Slack's recommended limit
/// (it truncates a message's text past 40,000; escaping grows a piece at most fivefold).
pub(crate) const MAX_MESSAGE_CHARS: usize = 4_000;

/// `text` with Slack's three control characters escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// The body of one piece: `text` (escaped here) to `channel`, in thread `thread_ts` when
/// given.
pub(crate) fn message_body(channel: &str, text: &str, thread_ts: Option<&str>) -> Value {
    let mut body = json!({
        "channel": channel,
        "text": escape(text),
        "link_names": false,
        "unfurl_links": false,
        "unfurl_media": false,
    });
    if let Some(ts) = thread_ts {
        body["thread_ts"] = json!(ts);
    }
    body
}

/// The body of a `chat.update` of the message `ts` in `channel` to `text` (escaped here).
pub(crate) fn update_body(channel: &str, ts: &str, text: &str) -> Value {
    json!({"channel": channel, "ts": ts, "text": escape(text), "link_names": false})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasts_and_mentions_are_escaped() {
        let b = message_body(
            "C1",
            "<!channel> <!here|here> <!everyone> <@U1> a&b",
            Some("1.5"),
        );
        let text = b["text"].as_str().unwrap();
        assert_eq!(
            text,
            "&lt;!channel&gt; &lt;!here|here&gt; &lt;!everyone&gt; &lt;@U1&gt; a&amp;b"
        );
        assert!(!text.contains('<') && !text.contains('>'));
        assert_eq!(b["thread_ts"], json!("1.5"));
        assert_eq!(b["link_names"], json!(false));
        assert!(message_body("C1", "x", None).get("thread_ts").is_none());
        let u = update_body("C1", "1.5", "<!here>");
        assert_eq!(u["text"], json!("&lt;!here&gt;"));
        assert_eq!((&u["channel"], &u["ts"]), (&json!("C1"), &json!("1.5")));
    }
}
