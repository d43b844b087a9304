//! `thread_starter`: in a thread session, the message the thread started from (the seed's
//! `ThreadStarterBody`), which its channel read once from the platform and kept with the
//! session. Shown on every turn of the thread as one labelled untrusted block in the final
//! user message (`Thread started by NAME: text`), not as a turn of the conversation: the
//! starter was usually written to the parent channel, before the session existed. Not shown
//! when the starter is itself among the messages this turn answers or already in the history
//! read (a forum post's first message). Cut to fit a short budget.

use serde::Deserialize;

use crate::context::text::prefix_chars;
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::inbound::{untrusted, untrusted_block};
use crate::model::MESSAGE_OVERHEAD_TOKENS;
use crate::store::ThreadStarter;

/// The label of the starter block.
pub const THREAD_STARTER_LABEL: &str = "Thread starter";

/// Halvings of the starter's text tried before it is left out for want of budget.
const CUT_ATTEMPTS: usize = 6;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

pub(super) struct ThreadStarterSource;

impl ThreadStarterSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self)
    }
}

/// The block's text for `starter`, its text cut to `chars` characters.
fn render(starter: &ThreadStarter, text: &str) -> String {
    untrusted_block(
        THREAD_STARTER_LABEL,
        &format!(
            "Thread started by {}: {}",
            untrusted(&starter.sender_name),
            untrusted(text)
        ),
    )
}

impl ContextSource for ThreadStarterSource {
    fn name(&self) -> &str {
        "thread_starter"
    }

    fn default_priority(&self) -> u8 {
        70
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let starter = match session.store().thread_starter(session.key) {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(Vec::new()),
            Err(error) => {
                // A damaged record costs the block, not the turn.
                tracing::warn!(%error, session = session.key, "unreadable thread starter; not shown");
                return Ok(Vec::new());
            }
        };
        let id = starter.message_id.as_str();
        if session
            .current
            .iter()
            .any(|c| c.record.message.message_id == id)
            || session
                .transcript()?
                .entries
                .iter()
                .any(|(_, e)| e.message_id.as_deref() == Some(id))
        {
            return Ok(Vec::new());
        }
        let mut text: &str = &starter.text;
        for _ in 0..CUT_ATTEMPTS {
            let content = render(&starter, text);
            let tokens = session.tokens.count(&content) + MESSAGE_OVERHEAD_TOKENS;
            if tokens <= budget.remaining() {
                let meta = BlockMeta {
                    message_id: Some(starter.message_id.clone().into()),
                    timestamp_ms: (starter.timestamp_ms > 0).then_some(starter.timestamp_ms),
                    ..BlockMeta::default()
                };
                return Ok(vec![ContextBlock::new(
                    BlockKind::ThreadStarter,
                    content,
                    tokens,
                )
                .with_meta(meta)]);
            }
            text = prefix_chars(text, text.chars().count() / 2);
        }
        Ok(Vec::new())
    }
}
