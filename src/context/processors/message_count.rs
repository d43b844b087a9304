//! `message_count`: keeps the newest `max_messages` conversation blocks (the chat kind's
//! preset), dropping older ones.

use serde::Deserialize;

use crate::context::{
    Blocks, ContextError, ContextProcessor, Placement, SessionView, StageContext, StageError,
};

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Overrides the preset's `max_messages`.
    max_messages: Option<usize>,
}

/// The `message_count` processor.
#[derive(Debug, Default)]
pub(crate) struct MessageCount {
    max_messages: Option<usize>,
}

impl MessageCount {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        Ok(Self {
            max_messages: p.max_messages,
        })
    }
}

impl ContextProcessor for MessageCount {
    fn name(&self) -> &str {
        "message_count"
    }

    fn process(&self, blocks: &mut Blocks, session: &SessionView<'_>) -> Result<(), ContextError> {
        let max = self.max_messages.unwrap_or(session.policy.max_messages);
        let mut order: Vec<(u64, u8, u32)> = blocks
            .blocks()
            .iter()
            .filter(|b| b.placement() == Placement::Conversation)
            .map(|b| b.conversation_order())
            .collect();
        if order.len() <= max {
            return Ok(());
        }
        order.sort_unstable();
        // Everything before the newest `max` goes.
        let cut = order[order.len() - max - 1];
        let reason = format!("older than the newest {max} messages");
        blocks.drop_where(|b| {
            (b.placement() == Placement::Conversation && b.conversation_order() <= cut)
                .then(|| reason.clone())
        });
        Ok(())
    }
}
