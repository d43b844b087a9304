//! Chat recall through the whole pipeline: lines under the day they were said, oldest first,
//! the newer of two disagreeing lines read as current, the answer after a recalled question,
//! the follow-up exchange after a best hit, questions put to the bot left out, and nothing
//! from another chat.

use super::fixtures::*;
use crate::context::sources::RECALL_LABEL;
use crate::context::{Assembly, MemoryStore};
use crate::inbound::ChatKind;
use crate::store::ChannelMessage;

const GROUP_KEY: &str = "agent:main:telegram:group:-100123";
const DAY: u64 = 24 * 60 * MINUTE;

/// A chat message of `chat` said `ago` ms before [`NOW`], `seq` in the chat's order.
fn said(chat: &str, seq: u64, name: &str, text: &str, ago: u64, addressed: bool) -> ChannelMessage {
    ChannelMessage {
        channel: "telegram".into(),
        chat_id: chat.into(),
        message_id: format!("{chat}-{seq}"),
        sender_id: format!("id-{name}"),
        sender_name: name.into(),
        text: text.into(),
        timestamp_ms: NOW - ago,
        reply_to: None,
        thread_id: None,
        seq,
        addressed,
    }
}

/// The chat record of `-100123`: `lines` in order, a day apart, the last a week ago; plus
/// filler so the lines are not the whole chat.
fn chat(lines: &[(&str, &str, bool)]) -> MemoryStore {
    let mut store = MemoryStore::new();
    let mut seq = 0;
    for (i, (name, text, addressed)) in lines.iter().enumerate() {
        for f in 0..5 {
            seq += 1;
            let ago = 7 * DAY + (lines.len() - i) as u64 * DAY + (10 - f) * MINUTE;
            store.push_channel_message(said(
                "-100123",
                seq,
                "Dave",
                "the build is slow",
                ago,
                false,
            ));
        }
        seq += 1;
        let ago = 7 * DAY + (lines.len() - i) as u64 * DAY;
        store.push_channel_message(said("-100123", seq, name, text, ago, *addressed));
    }
    store
}

fn ask(store: &MemoryStore, question: &str) -> std::sync::Arc<Assembly> {
    ask_with(store, question, &[])
}

/// [`ask`] with `chat_recall` parameters set.
fn ask_with(
    store: &MemoryStore,
    question: &str,
    params: &[(&str, toml::Value)],
) -> std::sync::Arc<Assembly> {
    let mut config = config_with_workspace(None);
    for s in &mut config.context.sources {
        if s.name == "chat_recall" {
            for (k, v) in params {
                s.params.insert((*k).into(), v.clone());
            }
        }
    }
    let msg = inbound(ChatKind::Group, "q", question, 0);
    assemble(
        &engine(&config),
        store,
        GROUP_KEY,
        1,
        &[current(msg, 1, vec![], vec![])],
    )
}

/// The recalled block's message lines (its day lines left out), or none.
fn said_lines(a: &Assembly) -> Vec<String> {
    recalled(a)
        .into_iter()
        .filter(|l| !l.starts_with("## "))
        .collect()
}

/// The recalled block's lines (between its fences), or none.
fn recalled(a: &Assembly) -> Vec<String> {
    let text: String = a.messages().iter().map(|m| m.content.to_string()).collect();
    let Some(block) = text.split(RECALL_LABEL).nth(1) else {
        return Vec::new();
    };
    block
        .split("```")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_newer_of_two_disagreeing_lines_comes_last_and_reads_as_current() {
    let store = chat(&[
        ("Priya", "the standup is at 9:00 in room Fjord", false),
        ("Bob", "the standup moved to 10:00, same room Fjord", false),
    ]);
    let a = ask(&store, "@bot when is the standup in room Fjord?");
    let lines = said_lines(&a);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].contains("at 9:00") && lines[1].contains("moved to 10:00"),
        "{lines:?}"
    );
    let text: String = a.messages().iter().map(|m| m.content.to_string()).collect();
    assert!(
        text.contains("where lines disagree, the newer one is current"),
        "{text}"
    );
    // Each line says who, under a line of its day: `## Sat 15 November 2025`, `Priya: …`.
    let all = recalled(&a);
    assert_eq!(all.len(), 4, "a day line above each: {all:?}");
    assert!(
        all[0].starts_with("## ") && all[0].ends_with(" 2025") && all[1].starts_with("Priya: "),
        "{all:?}"
    );
    assert!(all[2].starts_with("## ") && all[2] != all[0], "{all:?}");
}

#[test]
fn the_day_is_written_once_per_day_above_its_lines() {
    // Three lines said on one day and one on the next: two day lines, each line under its
    // day; without day lines, each line carries its date.
    let mut store = MemoryStore::new();
    for (seq, name, text, ago) in [
        (1, "Ann", "the kayak trip is on Saturday", 9 * DAY),
        (2, "Bob", "kayak paddles are in my car", 9 * DAY - MINUTE),
        (
            3,
            "Ann",
            "the kayak rental opens at 8",
            9 * DAY - 2 * MINUTE,
        ),
        (4, "Dave", "the build is slow", 9 * DAY - 3 * MINUTE),
        (5, "Bob", "kayak trip moved to Sunday", 8 * DAY),
    ] {
        store.push_channel_message(said("-100123", seq, name, text, ago, false));
    }
    let a = ask(&store, "@bot when is the kayak trip?");
    let all = recalled(&a);
    let days: Vec<&String> = all.iter().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(days.len(), 2, "{all:?}");
    assert_eq!(all[0], *days[0], "the day comes first: {all:?}");
    assert_eq!(
        all[1..4],
        [
            "Ann: the kayak trip is on Saturday",
            "Bob: kayak paddles are in my car",
            "Ann: the kayak rental opens at 8"
        ],
        "{all:?}"
    );
    assert_eq!(all[4], *days[1], "{all:?}");
    assert_eq!(all[5], "Bob: kayak trip moved to Sunday", "{all:?}");
    // Switched off: the date on every line, no day lines, and more tokens for the same lines.
    let b = ask_with(
        &store,
        "@bot when is the kayak trip?",
        &[("day_lines", false.into())],
    );
    let dated = recalled(&b);
    assert_eq!(dated.len(), 4, "{dated:?}");
    let day = days[0].trim_start_matches("## ");
    assert_eq!(
        dated[0],
        format!("[{day}] Ann: the kayak trip is on Saturday")
    );
    let block = |a: &Assembly| {
        a.blocks
            .iter()
            .find(|b| b.kind == crate::context::BlockKind::ChatRecall)
            .map_or(0, |b| b.token_count)
    };
    assert!(block(&a) < block(&b), "{} vs {}", block(&a), block(&b));
}

#[test]
fn a_recalled_question_brings_its_answer_and_questions_to_the_bot_stay_out() {
    let store = chat(&[
        ("Alice", "@bot where did Ann move from?", true),
        (
            "Bob",
            "Ann, where did you move from before joining us?",
            false,
        ),
        ("Ann", "Sweden, four years ago.", false),
    ]);
    let a = ask(&store, "@bot where did Ann move from?");
    let lines = recalled(&a).join("\n");
    assert!(
        lines.contains("Sweden, four years ago."),
        "the answer after the question:\n{lines}"
    );
    assert!(
        !lines.contains("@bot where did Ann"),
        "a question to the bot is no fact:\n{lines}"
    );
}

#[test]
fn nothing_is_recalled_from_another_chat() {
    let mut store = chat(&[("Priya", "the vault code is KX-9911", false)]);
    // The same words in a direct chat with Priya and in another group.
    store.push_channel_message(said(
        "dm-priya",
        1,
        "Priya",
        "my vault code is QQ-1234",
        DAY,
        false,
    ));
    store.push_channel_message(said(
        "-100999",
        1,
        "Omar",
        "vault code ZZ-0001 for the other team",
        DAY,
        false,
    ));
    let a = ask(&store, "@bot what is the vault code?");
    let lines = recalled(&a).join("\n");
    assert!(lines.contains("KX-9911"), "{lines}");
    assert!(
        !lines.contains("QQ-1234") && !lines.contains("ZZ-0001"),
        "{lines}"
    );
}

#[test]
fn a_second_round_finds_what_the_first_hits_name() {
    // "Where does Ann climb?" shares words with the first line only (its words and its
    // sender); Bob's line says where the Harbor gym is, and is found through what the first
    // names.
    let store = chat(&[
        ("Ann", "I climb at the Harbor gym every weekend", false),
        ("Bob", "lunch was great today", false),
        (
            "Bob",
            "Harbor moved to the old tram depot on Quay Street",
            false,
        ),
    ]);
    let a = ask(&store, "@bot where does Ann climb?");
    let lines = recalled(&a).join("\n");
    assert!(lines.contains("every weekend"), "{lines}");
    assert!(lines.contains("Quay Street"), "{lines}");
    assert!(!lines.contains("lunch was great"), "{lines}");
}

#[test]
fn recall_fills_the_budget_the_turn_leaves() {
    // Sixty lines share one word with the question: the old cut (forty hits) kept fewer.
    let lines: Vec<(String, String)> = (0..60)
        .map(|i| ("Priya".to_string(), format!("garden bed {i} got tomatoes")))
        .collect();
    let refs: Vec<(&str, &str, bool)> = lines
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str(), false))
        .collect();
    let store = chat(&refs);
    let a = ask(&store, "@bot what is in the garden?");
    let garden = recalled(&a)
        .iter()
        .filter(|l| l.contains("garden bed"))
        .count();
    assert_eq!(garden, 60, "{:?}", recalled(&a));
    assert!(a.budget.used <= a.budget.total);
}

#[test]
fn the_best_hits_bring_the_exchange_around_them() {
    // With `neighbours`: the hit, the reply a minute later that shares no word with the
    // question, and unrelated chatter hours away.
    let mut store = MemoryStore::new();
    let base = 9 * DAY;
    for (seq, name, text, ago) in [
        (1, "Dave", "the build is slow", base + 120 * MINUTE),
        (2, "Ann", "we adopted a greyhound called Pixel", base),
        (
            3,
            "Bob",
            "congrats, you will love having a buddy",
            base - MINUTE,
        ),
        (4, "Dave", "the build is slow", base - 3 * 60 * MINUTE),
    ] {
        store.push_channel_message(said("-100123", seq, name, text, ago, false));
    }
    let a = ask(&store, "@bot what did Ann adopt?");
    assert!(
        !recalled(&a).join("\n").contains("love having a buddy"),
        "off by default"
    );
    let a = ask_with(
        &store,
        "@bot what did Ann adopt?",
        &[("neighbours", 3.into())],
    );
    let lines = recalled(&a).join("\n");
    assert!(lines.contains("greyhound"), "{lines}");
    assert!(lines.contains("love having a buddy"), "the reply:\n{lines}");
    assert!(!lines.contains("build is slow"), "{lines}");
}

#[test]
fn a_best_hit_brings_the_follow_up_question_put_to_it_and_its_answer() {
    // "What games?" and "charades" share no word with the question; they follow the hit, a
    // minute apart, and come with it. Chatter an hour later does not; nor, with `follow`
    // off, the exchange.
    let mut store = MemoryStore::new();
    let base = 9 * DAY;
    for (seq, name, text, ago) in [
        (1, "Dave", "the build is slow", base + 120 * MINUTE),
        (2, "Ann", "we had a picnic by the lake with the choir", base),
        (3, "Bob", "nice! what games did you play?", base - MINUTE),
        (4, "Ann", "charades and a scavenger hunt", base - 2 * MINUTE),
        (5, "Dave", "the build is slow", base - 3 * 60 * MINUTE),
    ] {
        store.push_channel_message(said("-100123", seq, name, text, ago, false));
    }
    let question = "@bot what happened at the picnic?";
    let lines = said_lines(&ask(&store, question)).join("\n");
    assert!(lines.contains("picnic by the lake"), "{lines}");
    assert!(lines.contains("what games did you play?"), "{lines}");
    assert!(lines.contains("charades and a scavenger hunt"), "{lines}");
    assert!(!lines.contains("build is slow"), "{lines}");
    // The second round finds Ann's answer through her name too: without it, the exchange
    // comes through `follow` alone.
    let no_second = [("expand_seeds", 0.into())];
    let lines = said_lines(&ask_with(&store, question, &no_second)).join("\n");
    assert!(lines.contains("charades and a scavenger hunt"), "{lines}");
    let off = [("expand_seeds", 0.into()), ("follow", 0.into())];
    let off = said_lines(&ask_with(&store, question, &off)).join("\n");
    assert!(
        !off.contains("what games") && !off.contains("charades"),
        "{off}"
    );
}

#[test]
fn a_hit_followed_by_its_own_senders_question_brings_no_exchange() {
    // The next line is the hit's sender asking on (not a question put to the hit), and the
    // next question of another member comes hours later: neither is a follow-up.
    let mut store = MemoryStore::new();
    let base = 9 * DAY;
    for (seq, name, text, ago) in [
        (1, "Ann", "we had a picnic by the lake", base),
        (2, "Ann", "anyone up for chess tonight?", base - MINUTE),
        (3, "Bob", "sure, at eight", base - 2 * MINUTE),
        (
            4,
            "Ann",
            "the picnic blanket is washed",
            base - 3 * 60 * MINUTE,
        ),
        (5, "Bob", "who left the printer on?", base - 5 * 60 * MINUTE),
        (6, "Dave", "me, sorry", base - 5 * 60 * MINUTE - MINUTE),
    ] {
        store.push_channel_message(said("-100123", seq, name, text, ago, false));
    }
    let lines = said_lines(&ask(&store, "@bot what happened at the picnic?")).join("\n");
    assert!(lines.contains("picnic by the lake"), "{lines}");
    assert!(!lines.contains("sure, at eight"), "{lines}");
    assert!(!lines.contains("printer"), "{lines}");
}

#[test]
fn a_message_admitted_after_the_one_answered_is_not_recalled() {
    // The question is in the chat record (written at admission); a line admitted while its
    // turn waited comes after it and is no part of "earlier in this chat", even on a
    // session's first turn, when no transcript window bounds the search.
    let mut store = chat(&[("Priya", "the standup is at 9:00 in room Fjord", false)]);
    let mut question = said(
        "-100123",
        100,
        "Alice",
        "@bot when is the standup?",
        0,
        true,
    );
    question.message_id = "q".into();
    store.push_channel_message(question);
    store.push_channel_message(said(
        "-100123",
        101,
        "Bob",
        "the standup moved to 10:00 in room Fjord",
        0,
        false,
    ));
    let lines = recalled(&ask(&store, "@bot when is the standup?")).join("\n");
    assert!(lines.contains("at 9:00"), "{lines}");
    assert!(!lines.contains("moved to 10:00"), "{lines}");
}

#[test]
fn a_line_that_greets_a_member_is_not_about_them() {
    // "What has Priya been up to?": Bob's "Thanks, Priya!" names her only to thank her;
    // Priya's own line says what she did. Recalling one line, hers comes; without the rule,
    // the short greeting that says her name wins.
    let store = chat(&[
        (
            "Priya",
            "I adopted a cat from the shelter and named her Miso",
            false,
        ),
        ("Bob", "Thanks, Priya!", false),
    ]);
    // The sender's boost off, so only the rules tell the lines apart.
    let one = [
        ("speaker_boost", toml::Value::from(1.0)),
        ("top_n", 1.into()),
        ("fill_n", 0.into()),
        ("follow", 0.into()),
        ("expand_seeds", 0.into()),
    ];
    let question = "@bot what has Priya been up to?";
    let lines = said_lines(&ask_with(&store, question, &one));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("named her Miso"), "{lines:?}");
    let mut off = one.to_vec();
    off.push(("skip_greeted", false.into()));
    off.push(("sender_field", false.into()));
    let lines = said_lines(&ask_with(&store, question, &off));
    assert!(lines[0].contains("Thanks, Priya"), "{lines:?}");
}

#[test]
fn the_block_counts_the_tokens_of_its_text() {
    // Lines are counted once each, with their newline, and the block is not counted again:
    // the sum is the count of the block's text, whatever the lines end in.
    let lines = [
        ("Ann", "the kayak trip is on Saturday!", false),
        ("Bob", "kayak paddles — in my car…", false),
        ("Ann", "kayak rental: opens at 8.   ", false),
        ("Bob", "kayak?\nyes, kayak", false),
        ("Cleo", "naïve kayak question: 10:30 or 11?", false),
    ];
    let store = chat(&lines);
    let a = ask(&store, "@bot anything about the kayak?");
    let block = a
        .blocks
        .iter()
        .find(|b| b.kind == crate::context::BlockKind::ChatRecall)
        .expect("a recall block");
    let exact = tokens().count(block.content.as_str()) + crate::model::MESSAGE_OVERHEAD_TOKENS;
    assert!(
        (exact..=exact + 1).contains(&block.token_count),
        "counted {} for {exact}",
        block.token_count
    );
    assert!(said_lines(&a).len() >= 5, "{:?}", recalled(&a));
}
