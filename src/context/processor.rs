//! [`ContextProcessor`]: a step that rewrites or drops collected blocks, and [`Blocks`], the
//! working set it edits.

use std::borrow::Cow;

use serde::Serialize;

use super::block::{ContextBlock, DroppedBlock};
use super::error::ContextError;
use super::order::sort_by_computed_key;
use super::session::SessionView;

/// A step over the collected blocks. Processors run in the configured order; each must be
/// idempotent (running it twice changes nothing more) and should not depend on the order of
/// the others where it can avoid it.
pub trait ContextProcessor: Send + Sync {
    /// The name it is registered under.
    fn name(&self) -> &str;

    /// Rewrites or drops blocks of `blocks`.
    fn process(&self, blocks: &mut Blocks, session: &SessionView<'_>) -> Result<(), ContextError>;
}

/// A transcript span a TTL `keep: summary` rule left out of the context, for the compactor to
/// summarise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SummarySpan {
    /// Oldest transcript sequence in the span.
    pub from_seq: u64,
    /// Newest transcript sequence in the span.
    pub to_seq: u64,
    /// Entries in the span (that were read).
    pub entries: u64,
    /// Their tokens.
    pub tokens: u64,
}

/// The blocks of one assembly, kept in precedence order (priority desc, weight desc,
/// collection index), with the record of what was dropped. Immutable blocks cannot be dropped
/// or edited through it.
#[derive(Debug, Clone)]
pub struct Blocks {
    items: Vec<ContextBlock>,
    dropped: Vec<DroppedBlock>,
    total: u32,
    stage: Cow<'static, str>,
    summary_span: Option<SummarySpan>,
}

impl Blocks {
    /// A working set over `items` for a budget of `total` tokens.
    pub fn new(mut items: Vec<ContextBlock>, dropped: Vec<DroppedBlock>, total: u32) -> Self {
        // Precedence keys are unique (the collection index is).
        sort_by_computed_key(&mut items, ContextBlock::precedence);
        Self {
            items,
            dropped,
            total,
            stage: Cow::Borrowed(""),
            summary_span: None,
        }
    }

    /// Names the stage that drops from now on (the pipeline sets it before each processor).
    pub fn set_stage(&mut self, stage: Cow<'static, str>) {
        self.stage = stage;
    }

    /// The kept blocks, in precedence order.
    pub fn blocks(&self) -> &[ContextBlock] {
        &self.items
    }

    /// The dropped blocks so far.
    pub fn dropped(&self) -> &[DroppedBlock] {
        &self.dropped
    }

    /// The budget's total.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Tokens of the kept blocks.
    pub fn used(&self) -> u32 {
        self.items
            .iter()
            .fold(0u32, |acc, b| acc.saturating_add(b.token_count))
    }

    /// Drops every block for which `why` gives a reason, recording the current stage. `why`
    /// sees every block in precedence order; immutable blocks are kept whatever it says.
    pub fn drop_where(&mut self, mut why: impl FnMut(&ContextBlock) -> Option<String>) {
        let stage = &self.stage;
        let dropped = &mut self.dropped;
        self.items.retain(|b| match why(b) {
            Some(reason) if !b.immutable => {
                dropped.push(DroppedBlock::new(b, stage.clone(), reason));
                false
            }
            _ => true,
        });
    }

    /// Applies `edit` to every mutable block, then restores precedence order.
    pub fn edit(&mut self, mut edit: impl FnMut(&mut ContextBlock)) {
        for b in self.items.iter_mut().filter(|b| !b.immutable) {
            edit(b);
        }
        sort_by_computed_key(&mut self.items, ContextBlock::precedence);
    }

    /// Adds a block (e.g. a synthetic tool result) in its precedence position.
    pub fn insert(&mut self, block: ContextBlock) {
        let at = self
            .items
            .partition_point(|b| b.precedence() <= block.precedence());
        self.items.insert(at, block);
    }

    /// Marks the transcript entry `seq` with `tokens` as left out for the compactor.
    pub fn mark_for_summary(&mut self, seq: u64, tokens: u32) {
        let t = u64::from(tokens);
        self.summary_span = Some(match self.summary_span {
            None => SummarySpan {
                from_seq: seq,
                to_seq: seq,
                entries: 1,
                tokens: t,
            },
            Some(s) => SummarySpan {
                from_seq: s.from_seq.min(seq),
                to_seq: s.to_seq.max(seq),
                entries: s.entries + 1,
                tokens: s.tokens + t,
            },
        });
    }

    /// The span marked for the compactor.
    pub fn summary_span(&self) -> Option<SummarySpan> {
        self.summary_span
    }

    /// Splits into kept blocks (precedence order), dropped blocks and the summary span.
    pub fn into_parts(self) -> (Vec<ContextBlock>, Vec<DroppedBlock>, Option<SummarySpan>) {
        (self.items, self.dropped, self.summary_span)
    }
}
