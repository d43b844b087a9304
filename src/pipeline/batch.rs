//! What a batch tells the context engine beyond its messages: whether they queued while the
//! agent was busy (coalesced under one header), and a one-line summary of each message the
//! queue cap dropped (`drop = "summarize"`).

use turnstile_actors::{DropPolicy, TurnBatch};

use crate::context::QueueInfo;
use crate::store::InboxItem;

/// Longest line kept for a message the cap dropped (`drop = "summarize"`).
pub(crate) const DROPPED_LINE_CHARS: usize = 160;

/// The queue view of `batch` for assembly.
pub(crate) fn queue_info(batch: &TurnBatch<InboxItem>) -> QueueInfo {
    let dropped: Vec<String> = match batch.drop_policy {
        DropPolicy::Summarize => batch.dropped.iter().map(dropped_line).collect(),
        DropPolicy::Oldest | DropPolicy::Newest => Vec::new(),
    };
    QueueInfo {
        coalesced: batch.queued && (batch.items.len() > 1 || !dropped.is_empty()),
        dropped,
    }
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
    use crate::store::InboxRecord;

    fn item(seq: u64, text: &str) -> InboxItem {
        let mut record = InboxRecord::direct_for_test(&seq.to_string(), text);
        record.message.channel = "t".into();
        InboxItem {
            seq,
            record: Arc::new(record),
        }
    }

    #[test]
    fn a_single_message_is_not_coalesced() {
        let info = queue_info(&TurnBatch::single(item(1, "hi")));
        assert!(!info.coalesced);
        assert!(info.dropped.is_empty());
    }

    #[test]
    fn queued_batches_are_coalesced_and_dropped_messages_summarised() {
        let batch = TurnBatch {
            items: vec![item(2, "second"), item(3, "third")],
            dropped: vec![item(1, &format!("first {}", "x ".repeat(200)))],
            drop_policy: DropPolicy::Summarize,
            queued: true,
        };
        let info = queue_info(&batch);
        assert!(info.coalesced);
        assert_eq!(info.dropped.len(), 1);
        assert!(info.dropped[0].starts_with("first x"));
        assert_eq!(info.dropped[0].chars().count(), DROPPED_LINE_CHARS + 1);
        let oldest = TurnBatch {
            drop_policy: DropPolicy::Oldest,
            ..batch
        };
        assert!(queue_info(&oldest).dropped.is_empty());
    }
}
