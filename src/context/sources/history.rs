//! `history`: transcript entries, newest first, while they fit the remaining budget. Token
//! counts are the ones stored with each entry; nothing is re-tokenised.
//!
//! A tool result that does not fit is not where history ends (dropping it would leave its call
//! unanswered): it comes with its middle cut out, as the tool-result guard would cut it, or
//! failing that as `[Old tool result content cleared]`.

use serde::Deserialize;

use crate::context::processors::{
    CLEARED_TOOL_RESULT, KEEP_HEAD_CHARS, KEEP_TAIL_CHARS, TRIM_ABOVE_CHARS,
};
use crate::context::text::truncate_middle;
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    TokenBudget,
};
use crate::model::MESSAGE_OVERHEAD_TOKENS;
use crate::store::{EntryKind, TranscriptEntry};

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

pub(super) struct HistorySource;

impl HistorySource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, String> {
        let _: Params = c.params()?;
        Ok(Self)
    }
}

/// The block of one transcript entry.
pub(crate) fn entry_block(seq: u64, e: &TranscriptEntry) -> ContextBlock {
    let meta = BlockMeta {
        seq: Some(seq),
        message_id: e.message_id.clone(),
        timestamp_ms: Some(e.timestamp_ms),
        tool: e.tool.clone().map(Box::new),
        user_text: matches!(
            e.kind,
            EntryKind::User | EntryKind::Custom | EntryKind::SystemEvent
        ),
        ..BlockMeta::default()
    };
    ContextBlock::new(
        BlockKind::of_entry(e.kind),
        e.text.clone(),
        e.tokens + MESSAGE_OVERHEAD_TOKENS,
    )
    .with_meta(meta)
}

impl ContextSource for HistorySource {
    fn name(&self) -> &str {
        "history"
    }

    fn default_priority(&self) -> u8 {
        50
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let window = session.transcript()?;
        let mut room = budget.remaining();
        let mut out = Vec::new();
        // Newest first: collection order is precedence among equal priorities, so the newest
        // entries are admitted (and kept when trimming) first.
        for (seq, entry) in &window.entries {
            let mut block = entry_block(*seq, entry);
            if block.token_count > room && entry.kind == EntryKind::ToolResult {
                shrink_result(&mut block, room, session);
            }
            let cost = block.token_count;
            out.push(block);
            if cost > room {
                // The first that does not fit is returned so the dump can say why history
                // ends here; the pipeline drops it.
                break;
            }
            room -= cost;
        }
        Ok(out)
    }
}

/// Cuts a tool result that does not fit `room`: head and tail if that fits, else the cleared
/// placeholder. Left as it is if neither fits.
fn shrink_result(block: &mut ContextBlock, room: u32, session: &SessionView<'_>) {
    if block.content.chars().count() > TRIM_ABOVE_CHARS {
        let short = truncate_middle(&block.content, KEEP_HEAD_CHARS, KEEP_TAIL_CHARS).into_owned();
        let tokens = session.tokens.count(&short) + MESSAGE_OVERHEAD_TOKENS;
        if tokens <= room {
            block.content = short;
            block.token_count = tokens;
            return;
        }
    }
    let tokens = session.tokens.count_recurring(CLEARED_TOOL_RESULT) + MESSAGE_OVERHEAD_TOKENS;
    if tokens <= room {
        block.content = CLEARED_TOOL_RESULT.to_string();
        block.token_count = tokens;
    }
}
