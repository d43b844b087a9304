//! `tool_pairing`: every tool call in context must be answered by its result right after it,
//! or providers reject the request for good. Orphan results (their call was trimmed, or a
//! message came between) are dropped; a call without a result gets a synthetic error result,
//! or is dropped if even that does not fit the budget. The pipeline runs this after the
//! configured processors on every assembly.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use crate::context::{
    BlockKind, BlockMeta, Blocks, ContextBlock, ContextError, ContextProcessor, Placement,
    SessionView, StageContext, StageError,
};
use crate::model::MESSAGE_OVERHEAD_TOKENS;
use crate::store::ToolInfo;

/// The content of a synthetic result for a call whose result is missing.
pub(crate) const MISSING_RESULT_TEXT: &str =
    "error: this tool call has no result (it was lost or left out of the context)";

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

/// The `tool_pairing` processor.
#[derive(Debug, Default)]
pub(crate) struct ToolPairing;

impl ToolPairing {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self)
    }
}

type Order = (u64, u8, u32);

impl ContextProcessor for ToolPairing {
    fn name(&self) -> &str {
        "tool_pairing"
    }

    fn process(&self, blocks: &mut Blocks, session: &SessionView<'_>) -> Result<(), ContextError> {
        let mut conv: Vec<&ContextBlock> = blocks
            .blocks()
            .iter()
            .filter(|b| b.placement() == Placement::Conversation)
            .collect();
        if !conv
            .iter()
            .any(|b| matches!(b.kind, BlockKind::ToolCall | BlockKind::ToolResult))
        {
            return Ok(());
        }
        conv.sort_by_key(|b| b.conversation_order());

        let mut drop: HashMap<Order, &'static str> = HashMap::new();
        let mut missing: Vec<ContextBlock> = Vec::new();
        // The calls of the current assistant turn and which of them are answered.
        let mut open: Vec<&ContextBlock> = Vec::new();
        let mut answered: HashSet<&str> = HashSet::new();
        let mut close = |open: &mut Vec<&ContextBlock>, answered: &mut HashSet<&str>| {
            for call in open.drain(..) {
                if let Some(t) = &call.metadata.tool {
                    if !answered.contains(t.call_id.as_str()) {
                        missing.push((*call).clone());
                    }
                }
            }
            answered.clear();
        };
        let mut previous = None;
        for b in conv {
            match b.kind {
                BlockKind::ToolCall => {
                    if previous != Some(BlockKind::ToolCall) {
                        close(&mut open, &mut answered);
                    }
                    match &b.metadata.tool {
                        Some(_) => open.push(b),
                        None => {
                            drop.insert(b.conversation_order(), "tool call without its call id");
                        }
                    }
                }
                BlockKind::ToolResult => {
                    let id = b.metadata.tool.as_ref().map(|t| t.call_id.as_str());
                    let pending = id.is_some_and(|id| {
                        open.iter()
                            .any(|c| c.metadata.tool.as_ref().is_some_and(|t| t.call_id == id))
                    });
                    match id {
                        Some(id) if pending && answered.insert(id) => {}
                        _ => {
                            drop.insert(
                                b.conversation_order(),
                                "orphan tool result: its call is not right before it",
                            );
                        }
                    }
                }
                _ => close(&mut open, &mut answered),
            }
            previous = Some(b.kind);
        }
        close(&mut open, &mut answered);

        if !drop.is_empty() {
            blocks.drop_where(|b| {
                (b.placement() == Placement::Conversation)
                    .then(|| drop.get(&b.conversation_order()))
                    .flatten()
                    .map(|r| r.to_string())
            });
        }
        if missing.is_empty() {
            return Ok(());
        }
        let cost = session.tokens.count_recurring(MISSING_RESULT_TEXT) + MESSAGE_OVERHEAD_TOKENS;
        let mut unfillable: HashSet<Order> = HashSet::new();
        for call in missing {
            if blocks.used().saturating_add(cost) > blocks.total() {
                unfillable.insert(call.conversation_order());
                continue;
            }
            let tool = call.metadata.tool.as_ref().map(|t| {
                Box::new(ToolInfo {
                    call_id: t.call_id.clone(),
                    name: t.name.clone(),
                    arguments: String::new(),
                })
            });
            let result = ContextBlock {
                kind: BlockKind::ToolResult,
                content: MISSING_RESULT_TEXT.into(),
                token_count: cost,
                metadata: BlockMeta {
                    seq: call.metadata.seq,
                    timestamp_ms: call.metadata.timestamp_ms,
                    tool,
                    synthetic: true,
                    ..BlockMeta::default()
                },
                immutable: false,
                ..call
            };
            blocks.insert(result);
        }
        if !unfillable.is_empty() {
            blocks.drop_where(|b| {
                (b.kind == BlockKind::ToolCall && unfillable.contains(&b.conversation_order()))
                    .then(|| "tool call without result and no room for a synthetic one".into())
            });
        }
        Ok(())
    }
}
