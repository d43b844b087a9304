//! Properties over random sessions and budgets: the budget is never exceeded (unless what must
//! be sent — immutable blocks and the current message cut to its minimum — alone exceeds it),
//! the current message is always sent, the accounting adds up, the message limit holds, and
//! the messages need no tool-pairing repair.

use proptest::prelude::*;

use super::fixtures::*;
use crate::context::{MemoryStore, Placement, PresetConfig};
use crate::inbound::ChatKind;
use crate::store::{EntryKind, TranscriptEntry};
use crate::tools::repair_tool_messages;

#[derive(Debug, Clone)]
struct Spec {
    kind: u8,
    tokens: u32,
    age_min: u64,
}

fn spec() -> impl Strategy<Value = Spec> {
    (0u8..5, 1u32..3_000, 0u64..3_000).prop_map(|(kind, tokens, age_min)| Spec {
        kind,
        tokens,
        age_min,
    })
}

fn stored(s: &Spec, i: usize) -> Vec<TranscriptEntry> {
    let ago = s.age_min * MINUTE;
    let sized = |mut e: TranscriptEntry| {
        e.tokens = s.tokens;
        e
    };
    match s.kind {
        0 => vec![sized(user("question", &format!("u{i}"), ago))],
        1 => vec![sized(entry(EntryKind::Assistant, "answer", ago))],
        2 => vec![
            sized(tool_call(&format!("c{i}"), "t", "{}", ago)),
            sized(tool_result(&format!("c{i}"), "t", "result", ago)),
        ],
        // A call whose result was lost, and a result whose call was lost.
        3 => vec![sized(tool_call(&format!("lost{i}"), "t", "{}", ago))],
        _ => vec![sized(tool_result(&format!("orphan{i}"), "t", "r", ago))],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn budget_is_never_exceeded(
        specs in prop::collection::vec(spec(), 0..120),
        max_tokens in 1u32..40_000,
        window in 1_000u32..130_000,
        group in any::<bool>(),
        prompt_words in 1usize..400,
    ) {
        let mut config = config_with_workspace(None);
        config.context.system_prompt = "rule ".repeat(prompt_words);
        config.context.reserve_output_tokens = 500;
        config.model.context_window = window;
        for preset in ["assistant", "group"] {
            config.context.presets.insert(preset.into(), PresetConfig {
                max_tokens: Some(max_tokens),
                ..PresetConfig::default()
            });
        }
        // Entries oldest first: sort by age descending.
        let mut specs = specs;
        specs.sort_by_key(|s| std::cmp::Reverse(s.age_min));
        let mut store = MemoryStore::new();
        for (i, s) in specs.iter().enumerate() {
            for e in stored(s, i) {
                store.push_entry(1, e);
            }
        }
        let kind = if group { ChatKind::Group } else { ChatKind::Direct };
        let now = [current(inbound(kind, "now", "current question", 0), 1, vec![], vec![])];
        let engine = engine(&config);
        let a = assemble(&engine, &store, "agent:main:main", 1, &now);

        let sum: u32 = a.blocks.iter().map(|b| b.token_count).sum();
        prop_assert_eq!(sum, a.budget.used);
        // What must be sent whatever the budget: immutable blocks and the current message
        // (cut to fit, but never dropped).
        let required: u32 = a
            .blocks
            .iter()
            .filter(|b| b.immutable || b.must_keep())
            .map(|b| b.token_count)
            .sum();
        prop_assert!(
            a.budget.used <= a.budget.total
                || (a.budget.used == required && required > a.budget.total),
            "used {} > total {}", a.budget.used, a.budget.total
        );
        prop_assert!(a.blocks.iter().any(|b| b.must_keep()), "the current message is sent");
        let conversation = a.blocks.iter().filter(|b| b.placement() == Placement::Conversation).count();
        prop_assert!(conversation <= engine.policy(kind).max_messages);
        let mut messages = a.messages().to_vec();
        prop_assert_eq!(repair_tool_messages(&mut messages), 0, "{:?}", a.messages());
        prop_assert!(a.dropped.iter().all(|d| d.source != "system_prompt"));
    }
}
