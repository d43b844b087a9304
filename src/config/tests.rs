use std::path::Path;

use super::*;

#[test]
fn empty_file_gives_defaults() {
    let c = Config::parse("").unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:7878");
    assert_eq!(c.storage.durability, Durability::Strict);
}

#[test]
fn the_janitor_mode_is_also_spelled_mode() {
    let c = Config::parse("[storage]\nmode = \"warn\"\n").unwrap();
    assert_eq!(c.storage.janitor_mode, JanitorMode::Warn);
}

#[test]
fn unknown_keys_are_rejected() {
    let err = Config::parse("[storage]\nmax_dsk_bytes = 3\n").unwrap_err();
    assert!(err.to_string().contains("max_dsk_bytes"), "{err}");
    assert!(Config::parse("[nope]\n").is_err());
}

#[test]
fn session_and_preflight_sections() {
    let c = Config::parse(
        r#"
[session]
dm_scope = "per-account-channel-peer"
scope = "global"
[session.identity_links]
alice = ["telegram:1", "2"]
[preflight]
allow_bots = "mentions"
dm_policy = "allowlist"
group_policy = "disabled"
mention_patterns = ['\bbot\b']
[preflight.channels.discord]
allow_bots = true
"#,
    )
    .unwrap();
    assert_eq!(c.session.dm_scope, DmScope::PerAccountChannelPeer);
    assert_eq!(c.session.scope, SessionScope::Global);
    assert_eq!(c.session.identity_links["alice"].len(), 2);
    assert_eq!(c.preflight.allow_bots, AllowBots::Mentions);
    assert_eq!(c.preflight.dm_policy, AccessPolicy::Allowlist);
    assert_eq!(
        c.preflight.channels["discord"].allow_bots,
        Some(AllowBots::Yes)
    );
    assert!(c.preflight.require_mention);
    assert!(Config::parse("[session]\ndm_scope = \"per-chat\"\n").is_err());
    assert!(Config::parse("[preflight]\ndedupe_max_keys = 0\n").is_err());
    assert!(Config::parse("[preflight]\ndm_policy = \"closed\"\n").is_err());
    // The config round-trips through TOML (allow_bots as a bool or a word).
    let text = toml::to_string(&c).unwrap();
    assert_eq!(
        Config::parse(&text).unwrap().preflight.allow_bots,
        AllowBots::Mentions
    );
}

#[test]
fn agent_tools_and_context_sections_parse() {
    let c = Config::parse(
        "[agent]\nworkspace_dir = \"/srv/agent\"\n[tools]\nmax_rounds = 3\n\
         [context]\ncache_max_sessions = 0\n[context.chat_kinds]\ngroup = \"support\"\n",
    )
    .unwrap();
    assert_eq!(
        c.agent.workspace_dir.as_deref(),
        Some(Path::new("/srv/agent"))
    );
    assert_eq!(c.tools.max_rounds, 3);
    assert_eq!(c.context.chat_kinds.group, "support");
    assert_eq!(c.context.sources.len(), 12, "the default pipeline stays");
    assert!(Config::parse("[tools]\nmax_result_chars = 10\n").is_err());
    assert!(Config::parse("[context.presets.x]\nmax_messages = 0\n").is_err());
}

#[test]
fn readme_config_parses() {
    let readme = include_str!("../../README.md");
    let start = readme.find("```toml\n[server]").unwrap() + "```toml\n".len();
    let block = &readme[start..];
    let block = &block[..block.find("```").unwrap()];
    Config::parse(block).unwrap();
}

#[test]
fn values_are_checked() {
    assert!(Config::parse("[lanes]\nqueue_cap = 0\n").is_err());
    assert!(Config::parse("[model]\nprovider = \"openai\"\n").is_err());
    assert!(Config::parse("[storage]\ndurability = \"batched\"\n").is_ok());
    assert!(Config::parse("[storage]\nhigh_water = 1.5\n").is_err());
    assert!(Config::parse("[storage]\nmax_disk_bytes = 1000\n").is_err());
    let c = Config::parse("[storage]\njanitor_mode = \"warn\"\nmax_sessions = 5\n").unwrap();
    assert_eq!(c.storage.janitor_mode, JanitorMode::Warn);
    assert_eq!(c.storage.max_sessions, Some(5));
}

#[test]
fn openai_settings_are_checked() {
    let ok = "[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:8000/v1\"\n\
              model = \"m\"\nfallbacks = [\"m2\"]\nmax_retries = 2\n";
    let c = Config::parse(ok).unwrap();
    assert_eq!(c.model.fallbacks, vec!["m2".to_string()]);
    assert_eq!(c.model.backoff_max_ms, 20_000);
    let bad_url = "[model]\nprovider = \"openai\"\nbase_url = \"nope\"\n";
    assert!(Config::parse(bad_url).is_err());
    let too_many = format!("{ok}max_retries = 99\n").replace("max_retries = 2\n", "");
    assert!(Config::parse(&too_many).is_err());
}

#[test]
fn the_readme_config_block_is_valid_and_shows_the_defaults() {
    let readme = include_str!("../../README.md");
    let block = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    let parsed = Config::parse(block).unwrap();
    let defaults = Config::default();
    assert_eq!(parsed.model.max_retries, defaults.model.max_retries);
    assert_eq!(parsed.model.backoff_max_ms, defaults.model.backoff_max_ms);
    assert_eq!(
        parsed.compaction.chunk_tokens,
        defaults.compaction.chunk_tokens
    );
    assert_eq!(
        parsed.compaction.summary_max_tokens,
        defaults.compaction.summary_max_tokens
    );
}

#[test]
fn compaction_settings_are_checked() {
    let c = Config::parse("").unwrap();
    assert_eq!(c.compaction.summary_max_tokens, 1_024);
    assert!(!c.compaction.uses_model());
    assert!(Config::parse("[compaction]\nkeep_recent_ratio = 1.5\n").is_err());
    assert!(Config::parse("[compaction]\nmodel = \"extractive\"\n").is_ok());
    // A summariser model needs an OpenAI-compatible server.
    assert!(Config::parse("[compaction]\nmodel = \"small\"\n").is_err());
}

#[test]
fn ops_sections_parse_and_are_checked() {
    let c = Config::parse(
        "[server]\napi_key_env = \"K\"\n[server.rate_limit]\nrequests_per_second = 5\nby = \"key\"\n\
         [channels.telegram]\napi_base = \"http://127.0.0.1:1\"\n\
         [channels.callback]\nurl = \"http://127.0.0.1:2/hook\"\n",
    )
    .unwrap();
    assert_eq!(c.server.rate_limit.by, RateLimitBy::Key);
    assert_eq!(c.channels.telegram.unwrap().poll_limit, 100);
    assert_eq!(c.channels.callback.unwrap().max_attempts, 5);
    assert!(Config::parse("[channels.callback]\n").is_err());
    assert!(Config::parse("[channels.telegram]\npoll_limit = 0\n").is_err());
    assert!(Config::parse("[channels.telegram]\nbogus = 1\n").is_err());
}
