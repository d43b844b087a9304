//! Assembly: system prompt first (immutable), the current message(s) always, and as much
//! history as fits, newest kept first.

use super::{Assembly, ContextBlock, DroppedBlock, TokenBudget};
use crate::model::{Role, MESSAGE_OVERHEAD_TOKENS};
use crate::store::{EntryKind, TranscriptEntry};

/// What one assembly works from.
pub struct AssemblyInput<'a> {
    /// The trusted system prompt and its token count.
    pub system_prompt: (&'a str, u32),
    /// History, newest first, with transcript sequences.
    pub history_newest_first: &'a [(u64, TranscriptEntry)],
    /// Entries older than those in `history_newest_first` that exist but were not loaded.
    pub older_entries_not_loaded: u64,
    /// The message(s) this turn answers, oldest first, with their token counts.
    pub current: &'a [(String, u32)],
    /// The budget.
    pub budget: TokenBudget,
}

/// The role an entry is sent with.
fn role_of(kind: EntryKind) -> Role {
    match kind {
        EntryKind::Assistant | EntryKind::ToolCall => Role::Assistant,
        EntryKind::Summary => Role::System,
        EntryKind::User | EntryKind::ToolResult | EntryKind::SystemEvent | EntryKind::Custom => {
            Role::User
        }
    }
}

/// Assembles the context for one turn.
pub fn assemble(input: AssemblyInput<'_>) -> Assembly {
    let mut budget = input.budget;
    let system = ContextBlock {
        source: "system_prompt",
        role: Role::System,
        content: input.system_prompt.0.to_string(),
        priority: 100,
        token_count: input.system_prompt.1 + MESSAGE_OVERHEAD_TOKENS,
        immutable: true,
        seq: None,
    };
    budget.used = system.token_count;
    let stable_prefix_tokens = system.token_count;

    let current: Vec<ContextBlock> = input
        .current
        .iter()
        .map(|(text, tokens)| ContextBlock {
            source: "current_message",
            role: Role::User,
            content: text.clone(),
            priority: 90,
            token_count: tokens + MESSAGE_OVERHEAD_TOKENS,
            immutable: false,
            seq: None,
        })
        .collect();
    budget.used = budget
        .used
        .saturating_add(current.iter().map(|b| b.token_count).sum());

    let mut history = Vec::new();
    let mut dropped = Vec::new();
    let mut full = false;
    for (seq, entry) in input.history_newest_first {
        let cost = entry.tokens + MESSAGE_OVERHEAD_TOKENS;
        if full || cost > budget.remaining() {
            full = true;
            dropped.push(DroppedBlock {
                source: "history",
                seq: Some(*seq),
                token_count: cost,
                dropped_by: "trim_to_budget",
                reason: format!("{cost} tokens do not fit the {} left", budget.remaining()),
            });
            continue;
        }
        budget.used += cost;
        history.push(ContextBlock {
            source: "history",
            role: role_of(entry.kind),
            content: entry.text.clone(),
            priority: 50,
            token_count: cost,
            immutable: false,
            seq: Some(*seq),
        });
    }
    history.reverse();

    let mut blocks = Vec::with_capacity(history.len() + current.len() + 1);
    blocks.push(system);
    blocks.extend(history);
    blocks.extend(current);
    Assembly {
        blocks,
        dropped,
        older_entries_not_loaded: input.older_entries_not_loaded,
        budget,
        stable_prefix_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: EntryKind, text: &str, tokens: u32) -> TranscriptEntry {
        TranscriptEntry {
            kind,
            text: text.into(),
            message_id: None,
            sender: None,
            timestamp_ms: 0,
            tokens,
            tool: None,
        }
    }

    #[test]
    fn keeps_newest_history_that_fits() {
        let history = vec![
            (3, entry(EntryKind::Assistant, "c", 10)),
            (2, entry(EntryKind::User, "b", 10)),
            (1, entry(EntryKind::User, "a", 10)),
        ];
        let current = vec![("now".to_string(), 6)];
        // system 6+4=10, current 6+4=10, each history entry 14: room for two of three.
        let a = assemble(AssemblyInput {
            system_prompt: ("sys", 6),
            history_newest_first: &history,
            older_entries_not_loaded: 0,
            current: &current,
            budget: TokenBudget::new(48, 1000, 100),
        });
        let texts: Vec<&str> = a.blocks.iter().map(|b| b.content.as_str()).collect();
        assert_eq!(texts, ["sys", "b", "c", "now"]);
        assert_eq!(a.budget.used, 48);
        assert_eq!(a.dropped.len(), 1);
        assert_eq!(a.dropped[0].seq, Some(1));
        assert!(a.budget.used <= a.budget.total);
    }

    #[test]
    fn budget_is_min_of_profile_and_window() {
        assert_eq!(TokenBudget::new(32_000, 8_192, 1_024).total, 7_168);
        assert_eq!(TokenBudget::new(4_000, 128_000, 4_096).total, 4_000);
        assert_eq!(TokenBudget::new(4_000, 100, 4_096).total, 0);
    }
}
