//! `current_message`: the message(s) this turn answers. In group chats the sender is named in
//! a labelled untrusted block; when pending group history precedes it, the
//! `[Current message - respond to this]` marker opens it. Messages that queued while the agent
//! was busy and are answered together come under [`QUEUED_HEADER`], numbered, after one line per
//! message the queue cap dropped. Attachments follow the text, one line each (see
//! `attachments.rs`), and with `[model] vision` image URLs ride along for the model.

use serde::Deserialize;

use super::attachments::Attached;
use super::CURRENT_MARKER;

/// OpenClaw's header of a coalesced batch (`queue.mode = "collect"`).
pub const QUEUED_HEADER: &str = "[Queued messages while agent was busy]";
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::inbound::{untrusted, untrusted_block, ChatKind};
use crate::model::MESSAGE_OVERHEAD_TOKENS;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

pub(super) struct CurrentSource {
    /// `[model] vision`: image URLs are sent to the model.
    vision: bool,
}

impl CurrentSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self {
            vision: c.config.model.vision,
        })
    }
}

impl ContextSource for CurrentSource {
    fn name(&self) -> &str {
        "current_message"
    }

    fn default_priority(&self) -> u8 {
        95
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        _budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let has_history = session
            .current
            .iter()
            .any(|c| !c.record.group_history.is_empty());
        let mut out = Vec::with_capacity(session.current.len());
        let queue = &session.queue;
        for (i, current) in session.current.iter().enumerate() {
            let m = &current.record.message;
            let mut head = String::new();
            if i == 0 && has_history {
                head.push_str(CURRENT_MARKER);
                head.push('\n');
            }
            if queue.coalesced {
                if i == 0 {
                    head.push_str(QUEUED_HEADER);
                    head.push('\n');
                    if !queue.dropped.is_empty() {
                        let lines: Vec<String> = queue
                            .dropped
                            .iter()
                            .map(|l| format!("- {}", untrusted(l)))
                            .collect();
                        head.push_str(&format!(
                            "[{} earlier queued messages were dropped; one line each]\n{}\n",
                            queue.dropped.len(),
                            lines.join("\n")
                        ));
                    }
                }
                head.push_str(&format!("---\nQueued #{}\n", i + 1));
            }
            if m.chat_kind != ChatKind::Direct {
                let who = format!(
                    "{} (id {})",
                    untrusted(&m.sender.name),
                    untrusted(&m.sender.id)
                );
                head.push_str(&untrusted_block("Sender", &who));
                head.push('\n');
            }
            let head_tokens = if head.is_empty() {
                0
            } else {
                session.tokens.count_recurring(&head)
            };
            let attached = Attached::of(&m.attachments, &m.text, self.vision, &session.tokens);
            let meta = BlockMeta {
                message_id: Some(m.message_id.clone().into()),
                timestamp_ms: Some(m.timestamp_ms),
                user_text: true,
                image_urls: attached.image_urls,
                ..BlockMeta::default()
            };
            out.push(
                ContextBlock::new(
                    BlockKind::CurrentMessage,
                    head + &m.text + &attached.text,
                    current.tokens + head_tokens + attached.tokens + MESSAGE_OVERHEAD_TOKENS,
                )
                .with_meta(meta),
            );
        }
        Ok(out)
    }
}
