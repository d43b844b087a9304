//! Pending group history (preflight step 6): group messages that did not address the bot are
//! kept in the chat's durable record (the `channel_messages` tree, written by the admission),
//! and the next message that addresses the bot there carries those since the previous one
//! (`InboxRecord::group_history`), so the model sees what was said since it last spoke.
//! Preflight only names the place (chat and thread, per bot account); nothing is held here.

use crate::store::{ChannelMessage, HistoryLine};

/// Longest text of one pending-history line, in characters (the model sees untrusted text
/// capped at `MAX_UNTRUSTED_CHARS` anyway).
pub const MAX_HISTORY_LINE_CHARS: usize = 1_000;

/// A recorded chat message as a pending-history line (its text capped).
pub fn history_line(m: &ChannelMessage) -> HistoryLine {
    let mut line = m.history_line();
    line.text = super::cap_chars(&line.text, MAX_HISTORY_LINE_CHARS);
    line
}
