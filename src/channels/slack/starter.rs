//! Where Slack has a thread session's starter (the seed's `ThreadStarterBody`): the thread's
//! first message, its `ts` the replies' `thread_ts`, read with `conversations.replies`
//! (`ts` = the thread, `limit` 1: Slack lists the first message first). Whether to read it,
//! the bound on the read, keeping it and what a failure leaves are shared with Discord
//! (`channels/thread_starter.rs`).

use super::api::{ApiError, WebApi};
use super::convert::{display_name, unescape};
use super::events::SlackMessage;
use super::ts;
use crate::channels::thread_starter::Fetched;
use crate::secret::Secret;
use crate::store::ThreadStarter;

/// The first message `m` of a thread as kept: its author's name and its text (Slack's
/// escapes undone), or its files' names.
pub(crate) fn starter_of(m: &SlackMessage) -> ThreadStarter {
    let text = unescape(m.text.as_deref().unwrap_or_default());
    let text = if text.trim().is_empty() {
        let names: Vec<&str> = m.files.iter().filter_map(|f| f.name.as_deref()).collect();
        if names.is_empty() {
            "(no text)".to_string()
        } else {
            format!("(files: {})", names.join(", "))
        }
    } else {
        text
    };
    ThreadStarter {
        sender_name: display_name(m),
        text,
        message_id: m.ts.clone(),
        timestamp_ms: ts::millis(&m.ts),
    }
}

/// One read of the first message of thread `thread_ts` in `channel` (the caller bounds the
/// time). A refusal (`thread_not_found`, a missing scope) or no such message: absent.
pub(crate) async fn read_starter(
    api: &WebApi,
    bot: &Secret,
    channel: &str,
    thread_ts: &str,
) -> Fetched {
    match api.thread_parent(bot, channel, thread_ts).await {
        Ok(Some(m)) => Fetched::Found(starter_of(&m)),
        Ok(None) | Err(ApiError::Final(_)) => Fetched::Absent,
        Err(error) => Fetched::Failed(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starter_keeps_the_name_the_unescaped_text_or_the_files() {
        let m: SlackMessage = serde_json::from_value(serde_json::json!({
            "user": "U2", "user_profile": {"display_name": "Ann"},
            "text": "plan &lt;offsite&gt; &amp; food", "ts": "1700000000.000100"
        }))
        .unwrap();
        let s = starter_of(&m);
        assert_eq!(
            (
                s.sender_name.as_str(),
                s.text.as_str(),
                s.message_id.as_str()
            ),
            ("Ann", "plan <offsite> & food", "1700000000.000100")
        );
        assert_eq!(s.timestamp_ms, 1_700_000_000_000);
        let f: SlackMessage = serde_json::from_value(serde_json::json!({
            "user": "U3", "text": "", "ts": "1.000001", "files": [{"name": "a.png"}]
        }))
        .unwrap();
        let s = starter_of(&f);
        assert_eq!(
            (s.sender_name.as_str(), s.text.as_str()),
            ("U3", "(files: a.png)")
        );
    }
}
