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
    assert_eq!(c.context.sources.len(), 13, "the default pipeline stays");
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
    // Unset: the answering model of a real server writes summaries; `echo` cannot.
    assert_eq!(c.compaction.summarizer_model(&c.model), None);
    let real = Config::parse(
        "[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    assert_eq!(
        real.compaction.summarizer_model(&real.model).as_deref(),
        Some("m")
    );
    let extractive = Config::parse(
        "[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n[compaction]\nmodel = \"extractive\"\n",
    )
    .unwrap();
    assert_eq!(
        extractive.compaction.summarizer_model(&extractive.model),
        None
    );
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
    let telegram = c.channels.telegram.unwrap();
    assert_eq!(telegram.poll_limit, 100);
    assert!(telegram.stream_edits);
    assert_eq!(telegram.edit_interval_ms, 1_000);
    assert_eq!(c.channels.callback.unwrap().max_attempts, 5);
    assert!(Config::parse("[channels.callback]\n").is_err());
    assert!(Config::parse("[channels.telegram]\npoll_limit = 0\n").is_err());
    assert!(Config::parse("[channels.telegram]\nbogus = 1\n").is_err());
}

/// Every numeric key with a value out of its range: each is refused with an error naming the
/// key, the value and the allowed range (never accepted, never a panic later).
#[test]
fn every_numeric_key_has_a_range() {
    const HUGE: &str = "4611686018427387904"; // 2^62
    let cases: &[(&str, &str, &str)] = &[
        ("server", "max_body_bytes", "0"),
        ("server", "max_body_bytes", HUGE),
        ("server", "reply_timeout_ms", "0"),
        ("server", "reply_timeout_ms", HUGE),
        ("server", "events_buffer", "0"),
        ("server", "events_buffer", "1099511627776"),
        ("server", "events_buffer", HUGE),
        ("server", "shutdown_grace_ms", HUGE),
        ("server.rate_limit", "requests_per_second", "4000000000"),
        ("server.rate_limit", "burst", "4000000000"),
        ("server.rate_limit", "max_clients", HUGE),
        ("storage", "cache_capacity_bytes", "255"),
        ("storage", "cache_capacity_bytes", "0"),
        ("storage", "cache_capacity_bytes", HUGE),
        ("storage", "transcript_cache_bytes", HUGE),
        ("storage", "flush_every_ms", "0"),
        ("storage", "flush_every_ms", HUGE),
        ("storage", "max_queued_messages", "0"),
        ("storage", "max_queued_messages", HUGE),
        ("storage", "max_disk_bytes", "1000"),
        ("storage", "max_disk_bytes", HUGE),
        ("storage", "high_water", "0.0"),
        ("storage", "high_water", "1.5"),
        ("storage", "high_water", "nan"),
        ("storage", "janitor_interval_ms", "0"),
        ("storage", "janitor_interval_ms", HUGE),
        ("storage", "prune_after_days", "4000000000"),
        ("storage", "max_sessions", "0"),
        ("storage", "max_sessions", HUGE),
        ("lanes", "idle_timeout_ms", "0"),
        ("lanes", "idle_timeout_ms", HUGE),
        ("lanes", "queue_cap", "0"),
        ("lanes", "queue_cap", HUGE),
        ("lanes", "turn_retries", "4000000000"),
        ("lanes", "max_concurrent_turns", "0"),
        ("lanes", "max_concurrent_turns", HUGE),
        ("lanes", "max_live_lanes", "0"),
        ("lanes", "max_live_lanes", HUGE),
        ("queue", "debounce_ms", HUGE),
        ("queue", "cap", "0"),
        ("queue", "cap", HUGE),
        ("queue.by_channel.telegram", "debounce_ms", HUGE),
        ("queue.by_channel.telegram", "cap", "0"),
        ("queue.by_channel.telegram", "cap", HUGE),
        ("limits", "max_inbound_chars", "0"),
        ("limits", "max_inbound_chars", HUGE),
        ("limits", "max_future_skew_ms", HUGE),
        ("model", "context_window", "0"),
        ("model", "context_window", "4000000000"),
        ("model", "timeout_ms", "0"),
        ("model", "timeout_ms", HUGE),
        ("model", "connect_timeout_ms", "0"),
        ("model", "connect_timeout_ms", HUGE),
        ("model", "max_retries", "11"),
        ("model", "backoff_base_ms", "0"),
        ("model", "backoff_base_ms", "30000"),
        ("model", "backoff_max_ms", "0"),
        ("model", "backoff_max_ms", HUGE),
        ("context", "max_tokens", "0"),
        ("context", "max_tokens", "4000000000"),
        ("context", "reserve_output_tokens", "4000000000"),
        ("context", "cache_max_sessions", HUGE),
        ("context", "cache_max_age_ms", HUGE),
        ("context.presets.big", "max_messages", HUGE),
        ("context.presets.big", "max_tokens", "4000000000"),
        ("preflight", "dedupe_ttl_ms", HUGE),
        ("preflight", "dedupe_max_keys", "0"),
        ("preflight", "dedupe_max_keys", HUGE),
        ("preflight", "history_limit", HUGE),
        ("preflight", "history_max_chats", "0"),
        ("preflight", "history_max_chats", HUGE),
        ("preflight", "max_system_events", HUGE),
        ("compaction", "summary_max_tokens", "10"),
        ("compaction", "summary_max_tokens", "4000000000"),
        ("compaction", "keep_recent_ratio", "1.0"),
        ("compaction", "soft_threshold", "0.0"),
        ("compaction", "max_retries", "11"),
        ("compaction", "chunk_tokens", "10"),
        ("compaction", "chunk_tokens", "4000000000"),
        ("compaction", "max_concurrent", "0"),
        ("compaction", "max_concurrent", HUGE),
        ("compaction", "max_pending", "0"),
        ("compaction", "max_pending", HUGE),
        ("tools", "max_rounds", "4000000000"),
        ("tools", "max_calls_per_round", HUGE),
        ("tools", "max_result_chars", "10"),
        ("tools", "max_result_chars", HUGE),
        ("tools", "timeout_ms", "0"),
        ("tools", "timeout_ms", HUGE),
        ("channels.telegram", "poll_timeout_secs", "4000000000"),
        ("channels.telegram", "poll_limit", "0"),
        ("channels.telegram", "poll_limit", "101"),
        ("channels.telegram", "retry_backoff_ms", "0"),
        ("channels.telegram", "retry_backoff_ms", "70000"),
        ("channels.telegram", "max_retry_backoff_ms", HUGE),
        ("channels.telegram", "send_attempts", "0"),
        ("channels.telegram", "send_attempts", "4000000000"),
        ("channels.telegram", "edit_interval_ms", "249"),
        ("channels.telegram", "edit_interval_ms", "60001"),
        ("channels.discord", "edit_interval_ms", "249"),
        ("channels.discord", "edit_interval_ms", "60001"),
        ("channels.discord", "pluralkit_wait_ms", "10001"),
        ("channels.slack", "edit_interval_ms", "0"),
        ("channels.slack", "edit_interval_ms", HUGE),
        ("channels.slack", "catch_up_max_per_conversation", "0"),
        ("channels.slack", "catch_up_max_per_conversation", "10001"),
        ("channels.slack", "catch_up_max_per_conversation", HUGE),
    ];
    for (section, key, value) in cases {
        let text = format!("[{section}]\n{key} = {value}\n");
        let err = match Config::parse(&text) {
            Ok(_) => panic!("{section}.{key} = {value} was accepted"),
            Err(e) => e.to_string(),
        };
        let full_key = format!("{section}.{key}");
        assert!(err.contains(&full_key), "{full_key} = {value}: {err}");
        assert!(
            err.to_lowercase().contains(value),
            "{full_key} = {value}: {err}"
        );
        assert!(err.contains("allowed"), "{full_key} = {value}: {err}");
    }
    // The callback section needs its URL before its numbers are looked at.
    let callback = "[channels.callback]\nurl = \"http://127.0.0.1:1/h\"\n";
    for (key, value) in [
        ("max_attempts", "0"),
        ("max_attempts", "4000000000"),
        ("initial_backoff_ms", "0"),
        ("initial_backoff_ms", "40000"),
        ("max_backoff_ms", HUGE),
        ("timeout_ms", "0"),
        ("timeout_ms", HUGE),
    ] {
        let err = Config::parse(&format!("{callback}{key} = {value}\n")).unwrap_err();
        let full_key = format!("channels.callback.{key}");
        assert!(err.to_string().contains(&full_key), "{full_key}: {err}");
        assert!(err.to_string().contains(value), "{full_key}: {err}");
    }
    // Source priorities and weights.
    let source = |extra: &str| format!("[[context.sources]]\nname = \"history\"\n{extra}\n");
    assert!(Config::parse(&source("priority = 101")).is_err());
    assert!(Config::parse(&source("weight = 2000000000")).is_err());
}

/// The edges of the ranges are accepted: a range is not off by one.
#[test]
fn range_edges_are_accepted() {
    for text in [
        "[server]\nevents_buffer = 65536\n",
        "[context]\nmax_tokens = 100000000\n",
        "[storage]\ncache_capacity_bytes = 1048576\n",
        "[storage]\nhigh_water = 1.0\nprune_after_days = 0\n",
        "[lanes]\nmax_concurrent_turns = 100000\n",
        "[queue]\ndebounce_ms = 0\n",
        "[model]\nbackoff_base_ms = 20000\n",
        "[channels.telegram]\npoll_limit = 1\n",
    ] {
        if let Err(e) = Config::parse(text) {
            panic!("{text:?} refused: {e}");
        }
    }
}

#[test]
fn small_windows_and_model_rate_limits_are_checked() {
    // A 2,048-token model with the default 4,096-token reserve: the reserve shrinks to fit.
    let c = Config::parse("[model]\ncontext_window = 2048\n").unwrap();
    assert_eq!(c.context.reserve_output_tokens, 4_096);
    assert!(Config::parse(&format!(
        "[model]\ncontext_window = {}\n",
        super::MIN_CONTEXT_WINDOW - 1
    ))
    .is_err());
    let c =
        Config::parse("[model]\nrequests_per_minute = 500\ntokens_per_minute = 90000\n").unwrap();
    assert_eq!(
        (c.model.requests_per_minute, c.model.tokens_per_minute),
        (500, 90_000)
    );
    let over = super::MAX_REQUESTS_PER_MINUTE + 1;
    assert!(Config::parse(&format!("[model]\nrequests_per_minute = {over}\n")).is_err());
    let over = super::MAX_TOKENS_PER_MINUTE + 1;
    assert!(Config::parse(&format!("[model]\ntokens_per_minute = {over}\n")).is_err());
    let defaults = Config::default();
    assert_eq!(defaults.lanes.max_concurrent_turns, 1_024);
    assert_eq!(
        (
            defaults.model.requests_per_minute,
            defaults.model.tokens_per_minute
        ),
        (0, 0)
    );
    // The README block shows the new defaults.
    let readme = include_str!("../../README.md");
    let start = readme.find("```toml\n[server]").unwrap() + "```toml\n".len();
    let block = &readme[start..];
    let parsed = Config::parse(&block[..block.find("```").unwrap()]).unwrap();
    assert_eq!(
        parsed.lanes.max_concurrent_turns,
        defaults.lanes.max_concurrent_turns
    );
    assert_eq!(parsed.model.requests_per_minute, 0);
    assert_eq!(parsed.model.tokens_per_minute, 0);
}

#[test]
fn the_cluster_section_is_parsed_and_needs_its_feature() {
    let text = "[cluster]\nnats = [\"nats://127.0.0.1:4222\"]\nnode_id = \"n1\"\n\
                partitions = 64\nlease_ms = 5000\n";
    assert!(Config::parse("").unwrap().cluster.is_none());
    let parsed = Config::parse(text);
    if cfg!(feature = "cluster") {
        let cluster = parsed.unwrap().cluster.unwrap();
        assert_eq!((cluster.partitions, cluster.lease_ms), (64, 5000));
        assert!(Config::parse(&text.replace("64", "0")).is_err());
    } else {
        let err = parsed.unwrap_err().to_string();
        assert!(err.contains("`cluster` feature"), "{err}");
    }
    // Every key is required, and no other is allowed.
    let err = Config::parse("[cluster]\nnode_id = \"n1\"\n").unwrap_err();
    assert!(err.to_string().contains("missing field"), "{err}");
    let err = Config::parse(&format!("{text}lease_msec = 1\n")).unwrap_err();
    assert!(err.to_string().contains("lease_msec"), "{err}");
}

#[test]
fn schedules_are_checked_with_clear_errors() {
    let ok = Config::parse(
        "[agents.ops]\n[[schedules]]\nid = \"digest\"\ncron = \"30 9 * * mon-fri\"\n\
         time_zone = \"Europe/Berlin\"\nagent = \"ops\"\nmessage = \"post the digest\"\n\
         missed = \"skip\"\n[[schedules]]\nid = \"hb\"\nevery_ms = 1800000\nheartbeat = true\n",
    )
    .unwrap();
    assert_eq!(ok.schedules.len(), 2);
    assert_eq!(ok.schedules[0].missed, crate::config::Missed::Skip);
    for (text, says) in [
        ("id = \"d\"\nmessage = \"m\"\n", "exactly one of cron"),
        (
            "id = \"d\"\ncron = \"@daily\"\nevery_ms = 1000\nmessage = \"m\"\n",
            "exactly one",
        ),
        ("id = \"d\"\ncron = \"* * *\"\nmessage = \"m\"\n", "five"),
        ("id = \"d\"\nevery_ms = 10\nmessage = \"m\"\n", "every_ms"),
        (
            "id = \"d\"\ncron = \"@daily\"\ntime_zone = \"Mars/Base\"\nmessage = \"m\"\n",
            "time_zone",
        ),
        (
            "id = \"d\"\ncron = \"@daily\"\nagent = \"nobody\"\nmessage = \"m\"\n",
            "nobody",
        ),
        ("id = \"d\"\ncron = \"@daily\"\n", "message"),
        (
            "id = \"D d\"\ncron = \"@daily\"\nmessage = \"m\"\n",
            "schedules.id",
        ),
        (
            "id = \"d\"\ncron = \"@daily\"\nmessage = \"m\"\nmissed = \"later\"\n",
            "later",
        ),
    ] {
        let err = Config::parse(&format!("[[schedules]]\n{text}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{text}: {err}");
    }
    let twice = "[[schedules]]\nid = \"d\"\ncron = \"@daily\"\nmessage = \"m\"\n";
    let err = Config::parse(&format!("{twice}{twice}")).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    if cfg!(feature = "cluster") {
        let cluster = "[cluster]\nnats = [\"nats://127.0.0.1:4222\"]\nnode_id = \"n1\"\n\
                       partitions = 64\nlease_ms = 5000\n";
        // A cluster runs each job on its session's owner (`docs/schedules.md`).
        let ok = Config::parse(&format!("{cluster}{twice}")).expect("schedules in a cluster");
        assert_eq!(ok.schedules.len(), 1);
    }
}
