//! `group_history`: group messages the bot was not addressed in since its last reply (carried
//! on the inbox record), opened by `[Chat messages since your last reply - for context]`, the
//! lines inside a labelled untrusted block. The newest `max_lines` are kept, fewer if the
//! budget is short.

use std::collections::HashSet;

use serde::Deserialize;

use super::{fit_newest_lines, HISTORY_MARKER};
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::inbound::{untrusted, untrusted_block};
use crate::store::HistoryLine;

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Most lines shown. Default 50.
    max_lines: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self { max_lines: 50 }
    }
}

pub(super) struct GroupHistorySource {
    max_lines: usize,
}

impl GroupHistorySource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        Ok(Self {
            max_lines: p.max_lines,
        })
    }
}

impl ContextSource for GroupHistorySource {
    fn name(&self) -> &str {
        "group_history"
    }

    fn default_priority(&self) -> u8 {
        60
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        // Several queued items may carry overlapping history: union by message id, in time
        // order, without the messages this turn answers.
        let answering: Vec<&str> = session
            .current
            .iter()
            .map(|c| c.record.message.message_id.as_str())
            .collect();
        let mut seen: HashSet<&str> = answering.iter().copied().collect();
        let mut all: Vec<&HistoryLine> = Vec::new();
        for line in session.current.iter().flat_map(|c| &c.record.group_history) {
            if seen.insert(line.message_id.as_str()) {
                all.push(line);
            }
        }
        if all.is_empty() || self.max_lines == 0 {
            return Ok(Vec::new());
        }
        all.sort_by_key(|l| l.timestamp_ms);
        let keep_from = all.len().saturating_sub(self.max_lines);
        let lines: Vec<String> = all[keep_from..]
            .iter()
            .map(|l| format!("{}: {}", untrusted(&l.sender_name), untrusted(&l.text)))
            .collect();
        let frame = |body: &str| {
            format!(
                "{HISTORY_MARKER}\n{}",
                untrusted_block("Chat messages", body)
            )
        };
        let Some((content, tokens)) =
            fit_newest_lines(&lines, budget.remaining(), session.tokens, frame)
        else {
            return Ok(Vec::new());
        };
        let meta = BlockMeta {
            timestamp_ms: all.last().map(|l| l.timestamp_ms),
            ..BlockMeta::default()
        };
        Ok(vec![ContextBlock::new(
            BlockKind::GroupHistory,
            content,
            tokens,
        )
        .with_meta(meta)])
    }
}
