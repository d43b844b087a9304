//! `system_events`: platform events (joins, renames, pins…) queued since the last turn, shown
//! as `System: [ts] text` lines inside a labelled untrusted block. Consecutive duplicates are
//! skipped; the newest `max_events` are kept, fewer if the budget is short.

use serde::Deserialize;

use super::fit_newest_lines;
use crate::context::text::format_ts;
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::inbound::{untrusted, untrusted_block};

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Most events shown. Default 20.
    max_events: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self { max_events: 20 }
    }
}

pub(super) struct SystemEventsSource {
    max_events: usize,
}

impl SystemEventsSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        Ok(Self {
            max_events: p.max_events,
        })
    }
}

impl ContextSource for SystemEventsSource {
    fn name(&self) -> &str {
        "system_events"
    }

    fn default_priority(&self) -> u8 {
        80
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let mut lines: Vec<String> = Vec::new();
        let mut last: Option<&str> = None;
        for event in session.current.iter().flat_map(|c| &c.record.system_events) {
            if last == Some(event.text.as_str()) {
                continue;
            }
            last = Some(event.text.as_str());
            lines.push(format!(
                "System: [{}] {}",
                format_ts(event.timestamp_ms),
                untrusted(&event.text)
            ));
        }
        if lines.is_empty() || self.max_events == 0 {
            return Ok(Vec::new());
        }
        let keep_from = lines.len().saturating_sub(self.max_events);
        let frame = |body: &str| untrusted_block("System events since your last reply", body);
        let Some((content, tokens)) = fit_newest_lines(
            &lines[keep_from..],
            budget.remaining(),
            session.tokens,
            frame,
        ) else {
            return Ok(Vec::new());
        };
        let meta = BlockMeta {
            timestamp_ms: session
                .current
                .iter()
                .flat_map(|c| &c.record.system_events)
                .map(|e| e.timestamp_ms)
                .max(),
            ..BlockMeta::default()
        };
        Ok(vec![ContextBlock::new(
            BlockKind::PendingEvents,
            content,
            tokens,
        )
        .with_meta(meta)])
    }
}
