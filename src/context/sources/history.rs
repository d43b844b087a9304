//! `history`: transcript entries, newest first, while they fit the remaining budget. Token
//! counts are the ones stored with each entry; nothing is re-tokenised.
//!
//! In group and channel chats a past user turn shows who spoke: `Name: text` lines in a
//! labelled untrusted block, after the chatter that turn carried (the unaddressed messages
//! before it, read from the chat record), each message once.
//!
//! A tool result that does not fit is not where history ends (dropping it would leave its call
//! unanswered): it comes with its middle cut out, as the tool-result guard would cut it, or
//! failing that as `[Old tool result content cleared]`.

use std::sync::Arc;

use serde::Deserialize;

use crate::context::processors::{
    CLEARED_TOOL_RESULT, KEEP_HEAD_CHARS, KEEP_TAIL_CHARS, TRIM_ABOVE_CHARS,
};
use crate::context::text::truncate_middle;
use crate::context::{
    BlockKind, BlockMeta, BlockText, ContextBlock, ContextError, ContextSource, MessageId,
    SessionView, StageContext, StageError, TokenBudget, ROOM_AFTER_SOURCE,
};
use crate::inbound::{sanitize_text, untrusted, untrusted_block, ChatKind};
use crate::model::MESSAGE_OVERHEAD_TOKENS;
use crate::store::{ChannelMessage, EntryKind, SharedEntry, TranscriptEntry};

/// The label of a past group turn's block.
pub(crate) const SPOKEN_LABEL: &str = "Chat messages";

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

pub(super) struct HistorySource;

impl HistorySource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self)
    }
}

/// The block of one transcript entry, written as one value (not a block and then its
/// metadata): a turn makes one per history entry.
pub(crate) fn entry_block(seq: u64, e: &Arc<SharedEntry>) -> ContextBlock {
    ContextBlock {
        metadata: BlockMeta {
            seq: Some(seq),
            message_id: MessageId::of_entry(e),
            timestamp_ms: Some(e.timestamp_ms),
            tool: e.tool.clone(),
            user_text: matches!(
                e.kind,
                EntryKind::User | EntryKind::Custom | EntryKind::SystemEvent
            ),
            ..BlockMeta::default()
        },
        ..ContextBlock::new(
            BlockKind::of_entry(e.kind),
            BlockText::Entry(Arc::clone(e)),
            e.tokens + MESSAGE_OVERHEAD_TOKENS,
        )
    }
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
        let mut out = Vec::new();
        self.collect_into(session, budget, &mut out)?;
        Ok(out)
    }

    fn collect_into(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
        out: &mut Vec<ContextBlock>,
    ) -> Result<(), ContextError> {
        let window = session.transcript()?;
        let mut room = budget.remaining();
        out.reserve(window.entries.len() + ROOM_AFTER_SOURCE);
        // Newest first: collection order is precedence among equal priorities, so the newest
        // entries are admitted (and kept when trimming) first.
        let chat = if session.chat_kind == ChatKind::Direct {
            None
        } else {
            Some(session.chat()?)
        };
        for (seq, entry) in &window.entries {
            out.push(entry_block(*seq, entry));
            let Some(block) = out.last_mut() else {
                break;
            };
            if let (Some(chat), EntryKind::User) = (&chat, entry.kind) {
                let chatter = chat.chatter.get(seq).map(Vec::as_slice).unwrap_or(&[]);
                with_speakers(block, entry, chatter, session);
            }
            if block.token_count > room && entry.kind == EntryKind::ToolResult {
                shrink_result(block, room, session);
            }
            let cost = block.token_count;
            if cost > room {
                // The first that does not fit is returned so the dump can say why history
                // ends here; the pipeline drops it.
                break;
            }
            room -= cost;
        }
        Ok(())
    }
}

/// Renders a past group user turn as `Name: text` lines (its chatter first) in one untrusted
/// block. Only the made-up parts are counted; the entry keeps its stored count.
fn with_speakers(
    block: &mut ContextBlock,
    entry: &TranscriptEntry,
    chatter: &[ChannelMessage],
    session: &SessionView<'_>,
) {
    let Some(sender) = &entry.sender else {
        return;
    };
    let mut lines = String::new();
    let mut made_up = 0u32;
    for m in chatter {
        let line = format!("{}: {}\n", untrusted(&m.sender_name), untrusted(&m.text));
        // A past turn's chatter is shown turn after turn until it is compacted.
        made_up = made_up.saturating_add(session.tokens.count_recurring(&line));
        lines.push_str(&line);
    }
    let name = format!("{}: ", untrusted(&sender.name));
    made_up = made_up.saturating_add(session.tokens.count_recurring(&name));
    lines.push_str(&name);
    // The message itself is not capped (the stored count stands for all of it).
    lines.push_str(&sanitize_text(&entry.text.replace('\0', "")).replace("```", "ˋˋˋ"));
    let frame = untrusted_block(SPOKEN_LABEL, "");
    made_up = made_up.saturating_add(session.tokens.count_recurring(&frame));
    block.content = untrusted_block(SPOKEN_LABEL, &lines).into();
    block.token_count = block.token_count.saturating_add(made_up);
    // The block holds sanitised text now; the sanitise processor must not frame it again.
    block.metadata.user_text = false;
    if !chatter.is_empty() {
        block
            .metadata
            .extra
            .insert("chatter".into(), chatter.len().to_string());
    }
}

/// Cuts a tool result that does not fit `room`: head and tail if that fits, else the cleared
/// placeholder. Left as it is if neither fits.
fn shrink_result(block: &mut ContextBlock, room: u32, session: &SessionView<'_>) {
    if block.content.chars().count() > TRIM_ABOVE_CHARS {
        let short = truncate_middle(&block.content, KEEP_HEAD_CHARS, KEEP_TAIL_CHARS).into_owned();
        let tokens = session.tokens.count(&short) + MESSAGE_OVERHEAD_TOKENS;
        if tokens <= room {
            block.content = short.into();
            block.token_count = tokens;
            return;
        }
    }
    let tokens = session.tokens.count_recurring(CLEARED_TOOL_RESULT) + MESSAGE_OVERHEAD_TOKENS;
    if tokens <= room {
        block.content = CLEARED_TOOL_RESULT.into();
        block.token_count = tokens;
    }
}
