//! How a batch of queued messages is put to the model: one message as itself; messages that
//! queued while the agent was busy under OpenClaw's `[Queued messages while agent was busy]`
//! header; messages the queue cap dropped as one 160-char line each (`summarize`) or not at
//! all.

use turnstile_actors::{DropPolicy, TurnBatch};

use crate::store::InboxItem;

/// The header of a coalesced batch.
pub const QUEUED_HEADER: &str = "[Queued messages while agent was busy]";
/// Longest line kept for a message the cap dropped (`drop = "summarize"`).
pub const DROPPED_LINE_CHARS: usize = 160;

/// The text of the current message(s) of a turn.
pub fn render_current(batch: &TurnBatch<InboxItem>) -> String {
    let summarised: Vec<String> = match batch.drop_policy {
        DropPolicy::Summarize => batch.dropped.iter().map(dropped_line).collect(),
        DropPolicy::Oldest | DropPolicy::Newest => Vec::new(),
    };
    if let ([only], true) = (batch.items.as_slice(), summarised.is_empty()) {
        return only.record.message.text.clone();
    }
    let mut out = String::from(QUEUED_HEADER);
    if !summarised.is_empty() {
        out.push_str(&format!(
            "\n\n[{} earlier queued messages were dropped; one line each]",
            summarised.len()
        ));
        for line in summarised {
            out.push_str("\n- ");
            out.push_str(&line);
        }
    }
    for (i, item) in batch.items.iter().enumerate() {
        out.push_str(&format!("\n\n---\nQueued #{}\n", i + 1));
        out.push_str(&item.record.message.text);
    }
    out
}

fn dropped_line(item: &InboxItem) -> String {
    let flat: String = item
        .record
        .message
        .text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut line: String = flat.chars().take(DROPPED_LINE_CHARS).collect();
    if flat.chars().count() > DROPPED_LINE_CHARS {
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::inbound::{ChatKind, InboundMessage, Sender};
    use crate::store::InboxRecord;

    fn item(seq: u64, text: &str) -> InboxItem {
        InboxItem {
            seq,
            record: Arc::new(InboxRecord {
                message: InboundMessage {
                    channel: "t".into(),
                    account_id: "default".into(),
                    chat_kind: ChatKind::Direct,
                    chat_id: "c".into(),
                    thread_id: None,
                    message_id: seq.to_string(),
                    sender: Sender {
                        id: "u".into(),
                        name: String::new(),
                        is_bot: false,
                    },
                    text: text.into(),
                    mentions: vec![],
                    mentioned_bot: false,
                    reply_to: None,
                    timestamp_ms: 1,
                    attachments: vec![],
                    kind: crate::inbound::MessageKind::Message,
                },
                accepted_at_ms: 1,
                system_events: vec![],
                group_history: vec![],
            }),
        }
    }

    #[test]
    fn one_message_is_itself() {
        assert_eq!(render_current(&TurnBatch::single(item(1, "hi"))), "hi");
    }

    #[test]
    fn queued_messages_are_coalesced_under_the_header() {
        let batch = TurnBatch {
            items: vec![item(2, "second"), item(3, "third")],
            dropped: vec![item(1, &format!("first {}", "x ".repeat(200)))],
            drop_policy: DropPolicy::Summarize,
            queued: true,
        };
        let text = render_current(&batch);
        assert!(text.starts_with(QUEUED_HEADER));
        assert!(text.contains("\n---\nQueued #1\nsecond"));
        assert!(text.contains("\n---\nQueued #2\nthird"));
        let line = text.lines().find(|l| l.starts_with("- first")).unwrap();
        assert_eq!(line.chars().count(), 2 + DROPPED_LINE_CHARS + 1);
        let oldest = TurnBatch {
            drop_policy: DropPolicy::Oldest,
            ..batch
        };
        assert!(!render_current(&oldest).contains("first"));
    }
}
