//! `trim_to_budget`: admits blocks in precedence order (priority desc, weight desc, collection
//! index — for history that is newest first) while they fit the budget; immutable blocks and
//! the current message are always admitted (the pipeline cut an oversized current message to
//! fit when it was collected). Once a conversation block does not fit, the rest of its source's
//! conversation (older messages) goes too, so history has no holes.

use std::collections::HashSet;

use serde::Deserialize;

use crate::context::{
    Blocks, ContextError, ContextProcessor, Placement, SessionView, StageContext, StageError,
};

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

/// The `trim_to_budget` processor.
#[derive(Debug, Default)]
pub(crate) struct TrimToBudget;

impl TrimToBudget {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self)
    }
}

impl ContextProcessor for TrimToBudget {
    fn name(&self) -> &str {
        "trim_to_budget"
    }

    fn process(&self, blocks: &mut Blocks, _session: &SessionView<'_>) -> Result<(), ContextError> {
        trim(blocks);
        Ok(())
    }
}

/// Drops what does not fit, as described in the module docs.
pub(crate) fn trim(blocks: &mut Blocks) {
    let total = blocks.total();
    if blocks.used() <= total {
        return;
    }
    let mut used: u32 = blocks
        .blocks()
        .iter()
        .filter(|b| b.immutable || b.must_keep())
        .fold(0, |a, b| a.saturating_add(b.token_count));
    let mut closed: HashSet<String> = HashSet::new();
    blocks.drop_where(|b| {
        if b.immutable || b.must_keep() {
            return None;
        }
        let conversation = b.placement() == Placement::Conversation;
        if conversation && closed.contains(b.source.as_ref()) {
            return Some("older than a message that did not fit the budget".into());
        }
        let left = total.saturating_sub(used);
        if b.token_count <= left {
            used += b.token_count;
            return None;
        }
        if conversation {
            closed.insert(b.source.to_string());
        }
        Some(format!(
            "{} tokens do not fit the {left} left",
            b.token_count
        ))
    });
}
