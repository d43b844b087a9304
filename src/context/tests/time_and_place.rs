//! The `time_and_place` line through the whole pipeline: where it lands, what it leaves alone
//! (the stable prefix and its token count), and the cache turning over with the minute.

use std::sync::Arc;

use super::fixtures::*;
use crate::config::Config;
use crate::context::{
    Assembly, AssemblyRequest, BlockKind, ContextEngine, CurrentMessage, MemoryStore, Placement,
    Registry,
};
use crate::inbound::ChatKind;
use crate::model::Role;

const KEY: &str = "agent:main:main";
const GROUP_KEY: &str = "agent:main:telegram:group:-100123";

fn assemble_at(
    engine: &ContextEngine,
    store: &MemoryStore,
    key: &str,
    current: &[CurrentMessage],
    now_ms: u64,
) -> Arc<Assembly> {
    engine
        .assemble(
            store,
            AssemblyRequest {
                session_key: key,
                stored: store.stored(1),
                current,
                queue: Default::default(),
                now_ms,
            },
        )
        .unwrap()
}

fn system_text(a: &Assembly) -> String {
    let m = a.messages().remove(0);
    assert_eq!(m.role, Role::System);
    m.content.into_string()
}

fn workspace_config() -> Config {
    config_with_workspace(Some(&golden_dir().join("workspace")))
}

#[test]
fn the_line_ends_the_system_message_after_the_prefix() {
    let config = workspace_config();
    let mut store = MemoryStore::new();
    store.push_entry(
        1,
        entry(
            crate::store::EntryKind::Summary,
            "Earlier: the offsite.",
            MINUTE,
        ),
    );
    let now = [current(
        inbound(ChatKind::Direct, "m1", "hi", 0),
        1,
        vec![],
        vec![],
    )];
    let a = assemble_at(&engine(&config), &store, KEY, &now, NOW);

    let kinds: Vec<BlockKind> = a.blocks.iter().map(|b| b.kind).collect();
    let at = kinds
        .iter()
        .position(|k| *k == BlockKind::TimeAndPlace)
        .expect("the time block is in the default pipeline");
    let block = &a.blocks[at];
    assert_eq!(block.placement(), Placement::SystemEnd);
    assert_eq!(block.source, "time_and_place");
    assert_eq!(
        block.content,
        "Current time: 2025-11-30 02:33 UTC (Sunday). Channel: telegram, direct chat."
    );
    // After every other system block, the prefix (system prompt, bootstrap, skills) first.
    assert!(a.blocks[..at]
        .iter()
        .all(|b| matches!(b.placement(), Placement::Prefix | Placement::System)));
    assert!(a.blocks[..at].iter().any(|b| b.kind == BlockKind::Skills));
    assert!(a.blocks[..at].iter().any(|b| b.kind == BlockKind::Summary));
    assert!(system_text(&a).ends_with(block.content.as_str()));
    assert!(system_text(&a).starts_with("You are Turnstile's test agent."));
    // Sent in the system message, never counted in the stable prefix.
    let prefix: u32 = a
        .blocks
        .iter()
        .filter(|b| b.placement() == Placement::Prefix)
        .map(|b| b.token_count)
        .sum();
    assert_eq!(a.stable_prefix_tokens, prefix);
}

#[test]
fn the_prefix_is_unchanged_by_the_line_and_by_the_clock() {
    let with = workspace_config();
    let mut without = workspace_config();
    without
        .context
        .sources
        .retain(|s| s.name != "time_and_place");
    let store = MemoryStore::new();
    let now = [current(
        inbound(ChatKind::Group, "m1", "@bot hi", 0),
        1,
        vec![],
        vec![],
    )];
    let plain = assemble_at(&engine(&without), &store, GROUP_KEY, &now, NOW);
    let engine = engine(&with);
    let first = assemble_at(&engine, &store, GROUP_KEY, &now, NOW);
    let later = assemble_at(&engine, &store, GROUP_KEY, &now, NOW + 61 * MINUTE);

    assert_eq!(first.stable_prefix_tokens, plain.stable_prefix_tokens);
    assert_eq!(later.stable_prefix_tokens, plain.stable_prefix_tokens);
    // The system message is the line-less one plus the line: byte-identical up to it.
    let base = system_text(&plain);
    for a in [&first, &later] {
        let text = system_text(a);
        assert!(text.starts_with(&base), "{text}");
        assert!(text[base.len()..].starts_with("\n\nCurrent time: "));
    }
    assert!(system_text(&first).contains("02:33 UTC"));
    assert!(system_text(&later).contains("03:34 UTC"));
    assert!(system_text(&later).ends_with("Channel: telegram, group chat."));
}

#[test]
fn the_cache_turns_over_with_the_minute() {
    let engine = engine(&config_with_workspace(None));
    let store = MemoryStore::new();
    let now = [current(
        inbound(ChatKind::Direct, "m1", "hi", 0),
        1,
        vec![],
        vec![],
    )];
    // NOW is 02:33:20; 02:33:59.999 is the same minute, 02:34:00 is not.
    let minute_start = NOW - NOW % MINUTE;
    let a = assemble_at(&engine, &store, KEY, &now, NOW);
    let same = assemble_at(&engine, &store, KEY, &now, minute_start + MINUTE - 1);
    assert!(Arc::ptr_eq(&a, &same), "same minute: a cache hit");
    let next = assemble_at(&engine, &store, KEY, &now, minute_start + MINUTE);
    assert!(
        !Arc::ptr_eq(&a, &next),
        "the next minute is not served stale"
    );
    assert!(system_text(&next).contains("02:34 UTC"));
    assert_eq!(engine.cache_stats().hits, 1);
    assert_eq!(engine.cache_stats().misses, 2);
}

#[test]
fn a_dump_without_a_message_takes_the_chat_from_the_key() {
    let mut config = config_with_workspace(None);
    config.context.time_zone = "Europe/Berlin".into();
    let engine = engine(&config);
    let store = MemoryStore::new();
    let group = assemble_at(&engine, &store, GROUP_KEY, &[], NOW);
    assert!(
        system_text(&group).ends_with(
            "Current time: 2025-11-30 02:33 UTC (Europe/Berlin: 2025-11-30 03:33 CET, \
             Sunday). Channel: telegram, group chat."
        ),
        "{}",
        system_text(&group)
    );
    let direct = assemble_at(&engine, &store, KEY, &[], NOW);
    assert!(system_text(&direct).ends_with("Chat: direct chat."));
}

#[test]
fn an_unknown_time_zone_is_a_config_error() {
    let err = Config::parse("[context]\ntime_zone = \"Mars/Olympus_Mons\"\n").unwrap_err();
    assert!(err.to_string().contains("context.time_zone"), "{err}");
    assert!(Config::parse("[context]\ntime_zone = \"\"\n").is_err());
    let ok = Config::parse("[context]\ntime_zone = \"America/New_York\"\n").unwrap();
    assert_eq!(ok.context.time_zone, "America/New_York");
    assert_eq!(Config::default().context.time_zone, "UTC");
    // A config built in code is checked when the engine is built.
    let mut bad = config_with_workspace(None);
    bad.context.time_zone = "Nowhere/Special".into();
    assert!(ContextEngine::new(&bad, &Registry::builtin(), tokens()).is_err());
}
