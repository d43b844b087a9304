//! `system_prompt`: the trusted system prompt (`context.system_prompt`), immutable.

use std::sync::OnceLock;

use serde::Deserialize;

use crate::context::{
    BlockKind, ContextBlock, ContextError, ContextSource, SessionView, StageContext, StageError,
    TokenBudget,
};
use crate::model::MESSAGE_OVERHEAD_TOKENS;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Replaces `context.system_prompt` for this stage.
    text: Option<String>,
}

pub(super) struct SystemPromptSource {
    text: String,
    /// Counted on first use (the vocabulary is loaded off the start-up path).
    tokens: OnceLock<u32>,
}

impl SystemPromptSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        Ok(Self {
            text: p
                .text
                .unwrap_or_else(|| c.config.context.system_prompt.clone()),
            tokens: OnceLock::new(),
        })
    }
}

impl ContextSource for SystemPromptSource {
    fn name(&self) -> &str {
        "system_prompt"
    }

    fn default_priority(&self) -> u8 {
        100
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        _budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let mut blocks = Vec::with_capacity(2);
        if !self.text.is_empty() {
            let tokens = *self.tokens.get_or_init(|| session.tokens.count(&self.text));
            let mut block = ContextBlock::new(
                BlockKind::SystemPrompt,
                self.text.clone(),
                tokens + MESSAGE_OVERHEAD_TOKENS,
            );
            // Never trimmed or dropped: without it the agent has no instructions at all.
            block.immutable = true;
            blocks.push(block);
        }
        // The client's own instructions (its request's system messages), after the trusted
        // prompt; kept whole like it, since the client asked for exactly them.
        if let Some(text) = session.store().session_instructions(session.key)? {
            if !text.is_empty() {
                let tokens = session.tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS;
                let mut block = ContextBlock::new(BlockKind::SystemPrompt, text, tokens);
                block.immutable = true;
                blocks.push(block);
            }
        }
        Ok(blocks)
    }
}
