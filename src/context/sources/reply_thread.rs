//! `reply_thread`: when the current message replies to another, the thread around that target
//! — its parent chain (≤ `max_depth`), its direct replies and the chat's messages within
//! ±`window_ms` of it — de-duplicated, in time order, inside a labelled untrusted block. When
//! the budget is short the messages farthest in time from the target go first; the target is
//! always kept (cut if it alone does not fit). Not when the target is the thread session's
//! kept starter: `thread_starter` shows it (a Slack thread reply always names the thread's
//! first message as the one it replies to).

use std::collections::HashSet;

use serde::Deserialize;

use crate::context::text::{format_ts, prefix_chars};
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::inbound::{untrusted, untrusted_block};
use crate::model::MESSAGE_OVERHEAD_TOKENS;
use crate::store::ChannelMessage;

/// The label of the thread block.
pub const THREAD_LABEL: &str = "Reply thread (the message replied to is marked >>)";

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Longest parent chain followed. Default 10.
    max_depth: usize,
    /// Most direct replies of the target. Default 10.
    max_replies: usize,
    /// Neighbours within this many ms of the target. Default 300,000 (5 min).
    window_ms: u64,
    /// Most neighbours. Default 20.
    max_neighbours: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            max_depth: 10,
            max_replies: 10,
            window_ms: 300_000,
            max_neighbours: 20,
        }
    }
}

pub(super) struct ReplyThreadSource {
    p: Params,
}

impl ReplyThreadSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        Ok(Self { p: c.params()? })
    }

    /// The thread around `target`, time-ordered, de-duplicated, without `exclude` (except the
    /// target itself).
    fn thread(
        &self,
        session: &SessionView<'_>,
        target: ChannelMessage,
        exclude: &HashSet<String>,
    ) -> Result<Vec<ChannelMessage>, ContextError> {
        let store = session.store();
        let (channel, chat) = (target.channel.clone(), target.chat_id.clone());
        let mut found = Vec::new();
        let mut parent = target.reply_to.clone();
        let mut seen: HashSet<String> = HashSet::from([target.message_id.clone()]);
        for _ in 0..self.p.max_depth {
            let Some(id) = parent.take() else { break };
            if !seen.insert(id.clone()) {
                break;
            }
            match store.channel_message(&channel, &chat, &id)? {
                Some(m) => {
                    parent = m.reply_to.clone();
                    found.push(m);
                }
                None => break,
            }
        }
        found.extend(store.channel_replies(
            &channel,
            &chat,
            &target.message_id,
            self.p.max_replies,
        )?);
        let ts = target.timestamp_ms;
        found.extend(store.channel_messages_between(
            &channel,
            &chat,
            ts.saturating_sub(self.p.window_ms),
            ts.saturating_add(self.p.window_ms),
            self.p.max_neighbours,
        )?);
        let mut keep: HashSet<String> = HashSet::new();
        let mut out: Vec<ChannelMessage> = found
            .into_iter()
            .filter(|m| {
                m.message_id != target.message_id
                    && !exclude.contains(&m.message_id)
                    && keep.insert(m.message_id.clone())
            })
            .collect();
        out.push(target);
        out.sort_by(|a, b| (a.timestamp_ms, &a.message_id).cmp(&(b.timestamp_ms, &b.message_id)));
        Ok(out)
    }
}

/// Whether `id` is the kept starter of the thread session (an unreadable record: not).
fn is_thread_starter(session: &SessionView<'_>, id: &str) -> bool {
    matches!(session.store().thread_starter(session.key), Ok(Some(s)) if s.message_id == id)
}

fn line(m: &ChannelMessage, is_target: bool) -> String {
    format!(
        "{}[{}] {}: {}",
        if is_target { ">> " } else { "" },
        format_ts(m.timestamp_ms),
        untrusted(&m.sender_name),
        untrusted(&m.text)
    )
}

impl ContextSource for ReplyThreadSource {
    fn name(&self) -> &str {
        "reply_thread"
    }

    fn default_priority(&self) -> u8 {
        65
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let Some(current) = session
            .current
            .iter()
            .rev()
            .find(|c| c.record.message.reply_to.is_some())
        else {
            return Ok(Vec::new());
        };
        let m = &current.record.message;
        let Some(target_id) = m.reply_to.as_deref() else {
            return Ok(Vec::new());
        };
        if is_thread_starter(session, target_id) {
            // A reply to its thread's starter (every Slack thread reply names the thread's
            // first message): `thread_starter` shows that message, once.
            return Ok(Vec::new());
        }
        let Some(target) = session.store().channel_message(
            &session.chat_channel(&m.channel),
            &m.chat_id,
            target_id,
        )?
        else {
            return Ok(Vec::new());
        };
        // Messages already in this turn, its pending history, the history read or its chatter
        // need not be repeated.
        let mut exclude: HashSet<String> = session.chat()?.shown.clone();
        for (_, e) in &session.transcript()?.entries {
            if let Some(id) = &e.message_id {
                exclude.insert(id.clone());
            }
        }
        let target_ts = target.timestamp_ms;
        let target_msg_id = target.message_id.clone();
        let mut thread = self.thread(session, target, &exclude)?;
        let frame = |lines: &[String]| untrusted_block(THREAD_LABEL, &lines.join("\n"));
        let room = budget.remaining();
        loop {
            let lines: Vec<String> = thread
                .iter()
                .map(|t| line(t, t.message_id == target_msg_id))
                .collect();
            let content = frame(&lines);
            let tokens = session.tokens.count(&content) + MESSAGE_OVERHEAD_TOKENS;
            if tokens <= room {
                for t in &thread {
                    session.claim(&t.message_id);
                }
                let meta = BlockMeta {
                    message_id: Some(target_msg_id.into()),
                    timestamp_ms: Some(target_ts),
                    ..BlockMeta::default()
                };
                return Ok(vec![ContextBlock::new(
                    BlockKind::ReplyThread,
                    content,
                    tokens,
                )
                .with_meta(meta)]);
            }
            // Drop the message farthest in time from the target; then cut the target itself.
            let farthest = thread
                .iter()
                .enumerate()
                .filter(|(_, t)| t.message_id != target_msg_id)
                .max_by_key(|(_, t)| t.timestamp_ms.abs_diff(target_ts))
                .map(|(i, _)| i);
            match farthest {
                Some(i) => {
                    thread.remove(i);
                }
                None => {
                    let Some(t) = thread.first_mut() else {
                        return Ok(Vec::new());
                    };
                    let chars = t.text.chars().count();
                    if chars == 0 {
                        return Ok(Vec::new());
                    }
                    t.text = prefix_chars(&t.text, chars / 2).to_string();
                }
            }
        }
    }
}
