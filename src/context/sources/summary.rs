//! `compaction_summary`: the newest compaction summary, which stands for everything older
//! (history reading stops at it).

use std::sync::OnceLock;

use serde::Deserialize;

use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::model::MESSAGE_OVERHEAD_TOKENS;

/// The line that opens the summary block.
pub const SUMMARY_HEADER: &str = "Summary of the earlier conversation:";

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

pub(super) struct SummarySource {
    header_tokens: OnceLock<u32>,
}

impl SummarySource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self {
            header_tokens: OnceLock::new(),
        })
    }
}

impl ContextSource for SummarySource {
    fn name(&self) -> &str {
        "compaction_summary"
    }

    fn default_priority(&self) -> u8 {
        70
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        _budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let window = session.transcript()?;
        let Some((seq, entry)) = &window.summary else {
            return Ok(Vec::new());
        };
        let header = *self
            .header_tokens
            .get_or_init(|| session.tokens.count(SUMMARY_HEADER) + 1);
        let meta = BlockMeta {
            seq: Some(*seq),
            timestamp_ms: Some(entry.timestamp_ms),
            ..BlockMeta::default()
        };
        Ok(vec![ContextBlock::new(
            BlockKind::Summary,
            format!("{SUMMARY_HEADER}\n{}", entry.text),
            entry.tokens + header + MESSAGE_OVERHEAD_TOKENS,
        )
        .with_meta(meta)])
    }
}
