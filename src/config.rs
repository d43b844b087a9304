//! `turnstile.toml`: every setting, its default, and why it exists.
//!
//! Unknown keys are an error (a typo must not silently fall back to a default). Secrets are
//! never written here: the file names environment variables that hold them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::context::{
    default_processors, default_sources, ChatKindPresets, PresetConfig, StageSpec,
};
use crate::error::ConfigError;

/// The smallest accepted `storage.max_disk_bytes`: an empty sled database alone takes about a
/// megabyte.
pub const MIN_DISK_BYTES: u64 = 4 << 20;

/// The whole configuration. Every section and key is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`: the HTTP listener.
    pub server: ServerConfig,
    /// `[storage]`: the sled database and durability.
    pub storage: StorageConfig,
    /// `[session]`: session-key derivation.
    pub session: SessionConfig,
    /// `[lanes]`: session-lane behaviour (passivation, queues, retries).
    pub lanes: LanesConfig,
    /// `[queue]`: what happens to messages that arrive while a turn runs.
    pub queue: QueueConfig,
    /// `[limits]`: admission limits on inbound messages.
    pub limits: LimitsConfig,
    /// `[model]`: which model answers turns.
    pub model: ModelConfig,
    /// `[context]`: how a turn's context is assembled.
    pub context: ContextConfig,
    /// `[preflight]`: which inbound messages become turns.
    pub preflight: PreflightConfig,
    /// `[compaction]`: summarising old transcript spans.
    pub compaction: CompactionConfig,
    /// `[agent]`: the agent's workspace (bootstrap files, skills, memory notes).
    pub agent: AgentConfig,
    /// `[tools]`: limits of the tool loop (for applications that register tools).
    pub tools: ToolsConfig,
    /// `[channels]`: transports beyond the HTTP API (Telegram, webhook callbacks).
    pub channels: ChannelsConfig,
}

/// `[server]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on. Default `127.0.0.1:7878`.
    pub listen: SocketAddr,
    /// Largest accepted request body in bytes. Default 256 KiB.
    pub max_body_bytes: usize,
    /// How long an OpenAI-compatible request waits for its reply, in ms. Default 120,000.
    pub reply_timeout_ms: u64,
    /// Replies buffered for each `/v1/events` subscriber before a slow one misses some.
    /// Default 1,024.
    pub events_buffer: usize,
    /// How long graceful shutdown waits for running turns, in ms. Default 8,000.
    pub shutdown_grace_ms: u64,
    /// Name of the environment variable holding the API key (a bearer token). When it is set,
    /// every endpoint but `/healthz` and `/readyz` requires `Authorization: Bearer <key>`;
    /// when it is not, the server refuses to listen on anything but loopback. Default
    /// `TURNSTILE_API_KEY`.
    pub api_key_env: String,
    /// `[server.rate_limit]`: per-client request rate limits.
    pub rate_limit: RateLimitConfig,
}

/// What a rate limit counts requests by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitBy {
    /// The client's IP address (as the TCP peer; behind a proxy that is the proxy).
    Ip,
    /// The bearer token presented (clients without one are counted by IP).
    Key,
}

/// `[server.rate_limit]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Sustained requests per second allowed per client; 0 turns rate limiting off. Over the
    /// limit a request gets 429 with `Retry-After`. Default 0 (off).
    pub requests_per_second: u32,
    /// Requests a client may send in a burst above the sustained rate. Default 50.
    pub burst: u32,
    /// `ip` (default) or `key`.
    pub by: RateLimitBy,
    /// Most clients tracked at once; past it idle clients are forgotten, and if none is idle new
    /// clients share one bucket. Default 10,000.
    pub max_clients: usize,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            requests_per_second: 0,
            burst: 50,
            by: RateLimitBy::Ip,
            max_clients: 10_000,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            max_body_bytes: 256 * 1024,
            reply_timeout_ms: 120_000,
            events_buffer: 1_024,
            shutdown_grace_ms: 8_000,
            api_key_env: "TURNSTILE_API_KEY".into(),
            rate_limit: RateLimitConfig::default(),
        }
    }
}

/// When a write counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Flushed to disk before it is acknowledged (group commit: one flush covers every write
    /// waiting at that moment). Nothing acknowledged is lost on a crash.
    Strict,
    /// Acknowledged at once and flushed every `flush_every_ms`: a crash may lose what was
    /// acknowledged in the last interval.
    Batched,
}

/// `[storage]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// The data directory (the sled database lives in `<data_dir>/db`). Default
    /// `./turnstile-data`.
    pub data_dir: PathBuf,
    /// sled's page cache in bytes. sled's own default (1 GiB) is far too much for an embedded
    /// default. Default 64 MiB.
    pub cache_capacity_bytes: u64,
    /// `strict` (default) or `batched`.
    pub durability: Durability,
    /// Flush period for `batched` durability, in ms. Default 100.
    pub flush_every_ms: u64,
    /// Most unconsumed messages in the durable inbox across all sessions; past it submissions
    /// get 429. Default 100,000.
    pub max_queued_messages: usize,
    /// The disk budget for everything under `data_dir` (database, archives, exports, logs), in
    /// bytes, measured as blocks really allocated. Default 1 GiB.
    pub max_disk_bytes: u64,
    /// Fraction of `max_disk_bytes` above which the janitor frees space. Default 0.8.
    pub high_water: f64,
    /// How often the janitor measures the data dir, in ms (it also runs at once when writes
    /// may have crossed high water). Default 60,000.
    pub janitor_interval_ms: u64,
    /// `enforce` (default: archives are deleted and sessions evicted) or `warn` (only logged).
    /// SPEC §8 calls it `mode`; both names are accepted.
    #[serde(alias = "mode")]
    pub janitor_mode: JanitorMode,
    /// Write an evicted session's transcript as gzip-compressed JSONL into
    /// `<data_dir>/archives` before evicting it. Archives count against the budget and are the
    /// first thing deleted. Default false.
    pub keep_archives: bool,
    /// Sessions not updated for this many days are evicted; 0 keeps them. Default 30.
    pub prune_after_days: u32,
    /// Most sessions kept; the oldest beyond it are evicted. Default: no limit.
    pub max_sessions: Option<u64>,
    /// Share of `max_disk_bytes` for the cold tier: sessions evicted for the budget are moved
    /// into compressed segment files under `<data_dir>/cold` (loaded back on their next
    /// message or read) instead of deleted, and the oldest segments are deleted past this
    /// share. 0 turns the cold tier off. In `[0, 0.6]`, used up to half of `high_water`.
    /// Default 0 (off); 0.4 keeps about 1.5× the budget in raw text (see ARCHITECTURE.md).
    pub cold_max_fraction: f64,
}

/// What the janitor does above high water.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JanitorMode {
    /// Delete archives, then evict sessions, until usage is below high water.
    Enforce,
    /// Only log (and report) what would be freed.
    Warn,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./turnstile-data"),
            cache_capacity_bytes: 64 * 1024 * 1024,
            durability: Durability::Strict,
            flush_every_ms: 100,
            max_queued_messages: 100_000,
            max_disk_bytes: 1 << 30,
            high_water: 0.8,
            janitor_interval_ms: 60_000,
            janitor_mode: JanitorMode::Enforce,
            keep_archives: false,
            prune_after_days: 30,
            max_sessions: None,
            cold_max_fraction: 0.0,
        }
    }
}

/// How direct messages map to sessions (`[session] dm_scope`), as in OpenClaw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DmScope {
    /// Every direct message shares `agent:<agent>:main` (continuity across channels).
    #[default]
    Main,
    /// One session per peer across channels: `agent:<agent>:direct:<peer>`.
    PerPeer,
    /// One session per channel and peer: `agent:<agent>:<channel>:direct:<peer>`.
    PerChannelPeer,
    /// One session per bot account, channel and peer:
    /// `agent:<agent>:<channel>:<account>:direct:<peer>`.
    PerAccountChannelPeer,
}

/// Whether messages get per-chat sessions (`[session] scope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionScope {
    /// Session keys are derived per sender/chat (default).
    #[default]
    PerSender,
    /// Everything goes to the one session `global`.
    Global,
}

/// `[session]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// The agent id used in session keys (normalised: lowercase, `[a-z0-9_-]`). Default `main`.
    pub agent_id: String,
    /// `main` (default) | `per-peer` | `per-channel-peer` | `per-account-channel-peer`.
    pub dm_scope: DmScope,
    /// `per-sender` (default) | `global` (everything in the session `global`).
    pub scope: SessionScope,
    /// `[session.identity_links]`: canonical name → the peers that are that person, each
    /// `peer` or `channel:peer`, e.g. `alice = ["telegram:111", "discord:222"]`. A linked peer's
    /// direct messages use the canonical name as the peer (ignored under `dm_scope = "main"`).
    /// A peer may be listed under one name only. Default empty.
    pub identity_links: BTreeMap<String, Vec<String>>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            agent_id: "main".into(),
            dm_scope: DmScope::Main,
            scope: SessionScope::PerSender,
            identity_links: BTreeMap::new(),
        }
    }
}

/// `[lanes]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LanesConfig {
    /// A lane idle this long stops and frees its memory, in ms. Default 600,000 (10 min).
    pub idle_timeout_ms: u64,
    /// Items a lane holds in memory; more stay in the durable inbox until there is room.
    /// Default 1,000.
    pub queue_cap: usize,
    /// How often a failed or panicked turn is retried before an error reply. Default 1.
    pub turn_retries: u32,
    /// Most model calls running at once across all sessions. Default 64.
    pub max_concurrent_turns: usize,
    /// Most live lanes; past it the least recently used idle lanes are passivated. Default
    /// 10,000.
    pub max_live_lanes: usize,
}

impl Default for LanesConfig {
    fn default() -> Self {
        Self {
            idle_timeout_ms: 600_000,
            queue_cap: 1_000,
            turn_retries: 1,
            max_concurrent_turns: 64,
            max_live_lanes: 10_000,
        }
    }
}

/// `[queue] mode`: how messages queued during a turn become turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueModeSetting {
    /// Coalesce everything queued into one next turn (default).
    Collect,
    /// One turn per message, in order.
    Followup,
    /// Add to the running turn before its next model call if it is in a tool loop, else
    /// followup.
    Steer,
    /// Cancel the running turn and run again with the newest message in view.
    Interrupt,
}

/// `[queue] drop`: what the cap drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DropSetting {
    /// Drop the oldest, keeping one 160-char line of each for the next turn (default).
    Summarize,
    /// Drop the oldest.
    Oldest,
    /// Drop the newest.
    Newest,
}

/// `[queue]`, and `[queue.by_channel.<name>]` overrides.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// `collect` (default) | `followup` | `steer` | `interrupt`.
    pub mode: QueueModeSetting,
    /// After a turn, wait until queued messages stopped arriving for this long. Default 500.
    pub debounce_ms: u64,
    /// Most messages waiting for a turn per session. Default 20.
    pub cap: usize,
    /// `summarize` (default) | `oldest` | `newest`.
    pub drop: DropSetting,
    /// Per-channel overrides of the keys above.
    pub by_channel: std::collections::BTreeMap<String, QueueOverride>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            mode: QueueModeSetting::Collect,
            debounce_ms: 500,
            cap: 20,
            drop: DropSetting::Summarize,
            by_channel: Default::default(),
        }
    }
}

/// `[queue.by_channel.<name>]`: any key of `[queue]` for one channel.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueOverride {
    /// Overrides `queue.mode`.
    pub mode: Option<QueueModeSetting>,
    /// Overrides `queue.debounce_ms`.
    pub debounce_ms: Option<u64>,
    /// Overrides `queue.cap`.
    pub cap: Option<usize>,
    /// Overrides `queue.drop`.
    pub drop: Option<DropSetting>,
}

/// `[limits]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Longest accepted message text, in characters. Default 32,000.
    pub max_inbound_chars: usize,
    /// How far in the future a message timestamp may lie, in ms (clock skew). Default 300,000.
    pub max_future_skew_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_inbound_chars: 32_000,
            max_future_skew_ms: 300_000,
        }
    }
}

/// `[model]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// `echo` (built in, no network, default) or `openai` (any OpenAI-compatible server).
    pub provider: String,
    /// Base URL of an OpenAI-compatible server, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// Model name sent to the server; also picks the tokenizer. Default `echo`.
    pub model: String,
    /// Name of the environment variable holding the API key. Default `OPENAI_API_KEY`.
    pub api_key_env: String,
    /// The model's context window in tokens. Default 128,000.
    pub context_window: u32,
    /// Total time one request attempt may take, in ms, including reading a streamed answer.
    /// Default 60,000.
    pub timeout_ms: u64,
    /// Time allowed to open a connection, in ms. Default 10,000.
    pub connect_timeout_ms: u64,
    /// Retries of one model after a 408/409/429/5xx answer or a connection error, with
    /// exponential back-off and jitter. Default 3 (at most 10).
    pub max_retries: u32,
    /// First back-off delay in ms; doubles per retry. Default 500.
    pub backoff_base_ms: u64,
    /// Longest back-off delay in ms. A `Retry-After` longer than this is not waited for: the
    /// next fallback model is tried instead. Default 20,000.
    pub backoff_max_ms: u64,
    /// Models tried in order when `model` still fails after its retries (not on a
    /// context overflow, which needs compaction instead). Default none (at most 8).
    pub fallbacks: Vec<String>,
    /// The model accepts images: image attachments of the current message that carry a URL
    /// are sent as `image_url` parts of the user message (a text-only model rejects such
    /// parts, hence off by default). Their text lines are sent either way. Default false.
    pub vision: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            provider: "echo".into(),
            base_url: String::new(),
            model: "echo".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            context_window: 128_000,
            timeout_ms: 60_000,
            connect_timeout_ms: 10_000,
            max_retries: 3,
            backoff_base_ms: 500,
            backoff_max_ms: 20_000,
            fallbacks: Vec::new(),
            vision: false,
        }
    }
}

/// Most retries `[model] max_retries` and `[compaction] max_retries` may ask for.
pub const MAX_MODEL_RETRIES: u32 = 10;

/// Most fallback models `[model] fallbacks` may name.
pub const MAX_FALLBACK_MODELS: usize = 8;

/// `[compaction]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// The summariser model, served by the `[model]` server (same `base_url` and key). Empty
    /// or `extractive` (default): the built-in extractive summariser, no network.
    pub model: String,
    /// Longest summary in tokens, `Exact identifiers` included. Default 1,024.
    pub summary_max_tokens: u32,
    /// Share of the budget kept verbatim (newest history) when compacting. Default 0.25.
    pub keep_recent_ratio: f64,
    /// Share of the budget that history may fill before background compaction starts.
    /// Default 0.7.
    pub soft_threshold: f64,
    /// Retries of a failed summariser call before falling back to the extractive summariser.
    /// Default 3 (at most 10).
    pub max_retries: u32,
    /// Most tokens of transcript sent to the summariser model in one call; a larger span is
    /// summarised chunk by chunk, each chunk rolling the previous summary forward. Must leave
    /// room in the summariser's window for the prompt, the previous summary and the answer.
    /// Default 12,000.
    pub chunk_tokens: u32,
    /// Compactions the Compactor actor runs at once, across sessions. Default 2.
    pub max_concurrent: usize,
    /// Sessions waiting for a compaction at most; further requests are refused (a background
    /// one is skipped, a waiting turn answers with an error). Default 1,024.
    pub max_pending: usize,
    /// In group and channel chats, compact as soon as the history window leaves stored
    /// entries out (the message limit is short there, long before the token threshold), so
    /// what the window no longer shows is in the rolling summary. Default true.
    pub window_trigger: bool,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            model: String::new(),
            summary_max_tokens: 1_024,
            keep_recent_ratio: 0.25,
            soft_threshold: 0.7,
            max_retries: 3,
            chunk_tokens: 12_000,
            max_concurrent: 2,
            max_pending: 1_024,
            window_trigger: true,
        }
    }
}

impl CompactionConfig {
    /// Whether summaries come from a model (rather than the built-in extractive summariser).
    pub fn uses_model(&self) -> bool {
        let m = self.model.trim();
        !m.is_empty() && m != "extractive"
    }
}

/// `[context]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// The system prompt (trusted).
    pub system_prompt: String,
    /// Most tokens any turn's context may use, whatever its preset says. Default 32,000.
    pub max_tokens: u32,
    /// Tokens kept free for the model's answer. Default 4,096.
    pub reserve_output_tokens: u32,
    /// Sessions whose last assembly is cached (for dumps and retried turns). 0 disables the
    /// cache. Default 256.
    pub cache_max_sessions: usize,
    /// Longest a cached assembly is reused, in ms (TTL decay moves with the clock). Default
    /// 30,000.
    pub cache_max_age_ms: u64,
    /// `[context.chat_kinds]`: the preset of each chat kind. Default direct → `assistant`,
    /// group and channel → `group`.
    pub chat_kinds: ChatKindPresets,
    /// `[context.presets.<name>]`: presets defined or overridden here (`max_messages`,
    /// `max_tokens`, `ttl`); built in: `assistant`, `support`, `group`. Default none.
    pub presets: BTreeMap<String, PresetConfig>,
    /// `[[context.sources]]`: the sources in collection order (`name`, `priority`, `weight`,
    /// `params`). Default: `system_prompt`, `current_message`, `bootstrap`, `skills`,
    /// `time_and_place`, `system_events`, `reply_thread`, `group_history`, `compaction_summary`,
    /// `memory_recall`, `history`.
    pub sources: Vec<StageSpec>,
    /// `[[context.processors]]`: the processors in order (`name`, `params`). Default: `dedupe`,
    /// `sanitize`, `message_count`, `ttl_decay`, `tool_result_guard`, `trim_to_budget`.
    pub processors: Vec<StageSpec>,
    /// The IANA time zone (e.g. `Europe/Berlin`) the `time_and_place` source shows the current
    /// time in, besides UTC: the model otherwise has no idea what "tomorrow morning" means to
    /// its users. An unknown name is an error at load. Default `UTC`.
    pub time_zone: String,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            system_prompt: "You are a helpful assistant.".into(),
            max_tokens: 32_000,
            reserve_output_tokens: 4_096,
            cache_max_sessions: 256,
            cache_max_age_ms: 30_000,
            chat_kinds: ChatKindPresets::default(),
            presets: BTreeMap::new(),
            sources: default_sources(),
            processors: default_processors(),
            time_zone: "UTC".into(),
        }
    }
}

/// `[agent]`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// The agent workspace: bootstrap files (`AGENTS.md`, `SOUL.md`, `TOOLS.md`, `IDENTITY.md`,
    /// `USER.md`, `MEMORY.md`), `skills/**/SKILL.md` and `memory/YYYY-MM-DD.md`. Default none:
    /// those sources add nothing.
    pub workspace_dir: Option<PathBuf>,
}

/// `[tools]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Most rounds of tool calls in one turn before the model must answer. Default 8.
    pub max_rounds: u32,
    /// Most tool calls run per round; further calls get an error result. Default 16.
    pub max_calls_per_round: usize,
    /// Tool results longer than this many characters are cut (head and tail kept) before they
    /// are stored. Default 40,000.
    pub max_result_chars: usize,
    /// How long one tool call may run, in ms. Default 60,000.
    pub timeout_ms: u64,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            max_rounds: 8,
            max_calls_per_round: 16,
            max_result_chars: 40_000,
            timeout_ms: 60_000,
        }
    }
}

/// `[channels]`: optional transports. A section that is present turns its channel on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    /// `[channels.telegram]`: a Telegram bot (Bot API, long polling).
    pub telegram: Option<TelegramConfig>,
    /// `[channels.callback]`: replies POSTed to a URL, signed with HMAC-SHA256.
    pub callback: Option<CallbackConfig>,
}

/// `[channels.telegram]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    /// Name of the environment variable holding the bot token. Default
    /// `TURNSTILE_TELEGRAM_TOKEN`.
    pub bot_token_env: String,
    /// The Bot API base URL (tests point it at a fake server). Default
    /// `https://api.telegram.org`.
    pub api_base: String,
    /// The account id this bot's messages carry (session keys of direct messages may use
    /// it). Default `default`.
    pub account_id: String,
    /// How long one `getUpdates` long poll waits on the server, in seconds. Default 30.
    pub poll_timeout_secs: u32,
    /// Most updates fetched per poll (the Bot API allows 1–100). Default 100.
    pub poll_limit: u32,
    /// Pause after a failed poll, doubled per consecutive failure up to
    /// `max_retry_backoff_ms`, in ms. Default 1,000.
    pub retry_backoff_ms: u64,
    /// Longest pause between retries (polls and sends), in ms. Default 60,000.
    pub max_retry_backoff_ms: u64,
    /// How often one chunk of a reply is tried before it is given up (it stays readable in
    /// the transcript and on `/v1/events`). Default 5.
    pub send_attempts: u32,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            bot_token_env: "TURNSTILE_TELEGRAM_TOKEN".into(),
            api_base: "https://api.telegram.org".into(),
            account_id: "default".into(),
            poll_timeout_secs: 30,
            poll_limit: 100,
            retry_backoff_ms: 1_000,
            max_retry_backoff_ms: 60_000,
            send_attempts: 5,
        }
    }
}

/// `[channels.callback]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallbackConfig {
    /// Where replies are POSTed (JSON). Required.
    pub url: String,
    /// Name of the environment variable holding the HMAC secret. Default
    /// `TURNSTILE_CALLBACK_SECRET`.
    pub secret_env: String,
    /// The message channels (the `channel` field of inbound messages) whose replies are posted;
    /// empty means every channel that no other configured channel serves. Default empty.
    pub channels: Vec<String>,
    /// Attempts per reply before it is given up (it stays readable in the transcript and on
    /// `/v1/events`). Default 5.
    pub max_attempts: u32,
    /// Pause before the first retry, doubled per attempt (with jitter), in ms. Default 500.
    pub initial_backoff_ms: u64,
    /// Longest pause between attempts, in ms (also caps a receiver's `Retry-After`). Default
    /// 30,000.
    pub max_backoff_ms: u64,
    /// Timeout of one attempt, in ms. Default 10,000.
    pub timeout_ms: u64,
}

impl Default for CallbackConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            secret_env: "TURNSTILE_CALLBACK_SECRET".into(),
            channels: Vec::new(),
            max_attempts: 5,
            initial_backoff_ms: 500,
            max_backoff_ms: 30_000,
            timeout_ms: 10_000,
        }
    }
}

/// Whether messages from other bots are answered (`[preflight] allow_bots`): `false`, `true`
/// or `"mentions"`. The bot's own messages are always dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "AllowBotsToml", into = "AllowBotsToml")]
pub enum AllowBots {
    /// Other bots are ignored (default).
    #[default]
    No,
    /// Other bots are treated like people.
    Yes,
    /// Other bots are answered only when they explicitly mention this bot (implicit mentions
    /// do not count, so two bots cannot loop by replying to each other).
    Mentions,
}

/// The TOML shape of [`AllowBots`]: a boolean or the string `"mentions"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum AllowBotsToml {
    Flag(bool),
    Word(String),
}

impl TryFrom<AllowBotsToml> for AllowBots {
    type Error = String;

    fn try_from(raw: AllowBotsToml) -> Result<Self, String> {
        match raw {
            AllowBotsToml::Flag(false) => Ok(AllowBots::No),
            AllowBotsToml::Flag(true) => Ok(AllowBots::Yes),
            AllowBotsToml::Word(w) => match w.as_str() {
                "false" => Ok(AllowBots::No),
                "true" => Ok(AllowBots::Yes),
                "mentions" => Ok(AllowBots::Mentions),
                other => Err(format!(
                    "allow_bots: expected false, true or \"mentions\", found {other:?}"
                )),
            },
        }
    }
}

impl From<AllowBots> for AllowBotsToml {
    fn from(v: AllowBots) -> Self {
        match v {
            AllowBots::No => AllowBotsToml::Flag(false),
            AllowBots::Yes => AllowBotsToml::Flag(true),
            AllowBots::Mentions => AllowBotsToml::Word("mentions".into()),
        }
    }
}

/// Who may talk to the bot in direct messages, or in which groups it answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessPolicy {
    /// Everyone / every group (default).
    #[default]
    Open,
    /// Only the listed senders (`allow_from`) / chats (`group_allow_from`).
    Allowlist,
    /// Nobody / no group.
    Disabled,
}

/// `[preflight]`: the decisions taken before a message becomes a turn (SPEC §2.3). Every
/// message passes, in order: dedupe, bots, policy, (system events), mention gating; each
/// decision is counted by reason.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreflightConfig {
    /// This bot's own user ids, each `id` (any channel) or `channel:id`. Messages from them are
    /// always dropped (the platform echoing the bot's replies) and remembered as bot messages,
    /// so a reply to one counts as a mention; a mention of one of them mentions the bot.
    /// Default empty.
    pub bot_user_ids: Vec<String>,
    /// In groups and channels, answer only messages that address the bot. Default true.
    pub require_mention: bool,
    /// `false` (default) | `true` | `"mentions"`: whether other bots are answered.
    pub allow_bots: AllowBots,
    /// `open` (default) | `allowlist` (only `allow_from`) | `disabled`: direct messages.
    pub dm_policy: AccessPolicy,
    /// `open` (default) | `allowlist` (only `group_allow_from`) | `disabled`: groups and
    /// channels.
    pub group_policy: AccessPolicy,
    /// Senders allowed under `dm_policy = "allowlist"`: `id` or `channel:id`, `"*"` for all.
    /// Phone numbers on phone channels are compared in E.164. Default empty.
    pub allow_from: Vec<String>,
    /// Chats allowed under `group_policy = "allowlist"`: `chat_id` or `channel:chat_id`, `"*"`
    /// for all. Default empty.
    pub group_allow_from: Vec<String>,
    /// Members who may talk to the bot inside groups and channels (whatever `group_policy`
    /// lets in): sender `id` or `channel:id`, compared like `allow_from`. When non-empty,
    /// messages of anyone else in a group are dropped with reason `policy` (so they become
    /// neither turns nor pending history); platform events are not filtered. Default empty:
    /// every member.
    pub group_member_allow_from: Vec<String>,
    /// Regexes (case-insensitive) that count as mentioning the bot, e.g. `"\\bturnstile\\b"`.
    /// Compiled once at start. Default empty.
    pub mention_patterns: Vec<String>,
    /// In groups, drop messages that mention someone and do not address the bot (reason
    /// `other_mention`). Default false.
    pub ignore_other_mentions: bool,
    /// How long a message id is remembered for dedupe, in ms (in memory and on disk).
    /// Default 1,200,000 (20 min).
    pub dedupe_ttl_ms: u64,
    /// Most message ids remembered in memory (the oldest are forgotten first; older ones are
    /// still found on disk if they were accepted). Default 5,000.
    pub dedupe_max_keys: usize,
    /// Unaddressed group messages kept per chat as pending history (0 keeps none). Default 50.
    pub history_limit: usize,
    /// Chats with pending history kept at once; the least recently used is forgotten first.
    /// Default 1,000.
    pub history_max_chats: usize,
    /// System events queued per session until its next turn (0 keeps none). Default 20.
    pub max_system_events: usize,
    /// `[preflight.channels.<channel>]`: per-channel overrides of `require_mention`,
    /// `allow_bots`, `dm_policy`, `group_policy`, `allow_from`, `group_allow_from`,
    /// `group_member_allow_from`, `mention_patterns`, `ignore_other_mentions`. Default none.
    pub channels: BTreeMap<String, PreflightOverride>,
}

impl Default for PreflightConfig {
    fn default() -> Self {
        Self {
            bot_user_ids: Vec::new(),
            require_mention: true,
            allow_bots: AllowBots::No,
            dm_policy: AccessPolicy::Open,
            group_policy: AccessPolicy::Open,
            allow_from: Vec::new(),
            group_allow_from: Vec::new(),
            group_member_allow_from: Vec::new(),
            mention_patterns: Vec::new(),
            ignore_other_mentions: false,
            dedupe_ttl_ms: 20 * 60 * 1_000,
            dedupe_max_keys: 5_000,
            history_limit: 50,
            history_max_chats: 1_000,
            max_system_events: 20,
            channels: BTreeMap::new(),
        }
    }
}

/// `[preflight.channels.<channel>]`: each key set here replaces the `[preflight]` value for
/// messages of that channel; unset keys inherit it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreflightOverride {
    /// Overrides `require_mention`.
    pub require_mention: Option<bool>,
    /// Overrides `allow_bots`.
    pub allow_bots: Option<AllowBots>,
    /// Overrides `dm_policy`.
    pub dm_policy: Option<AccessPolicy>,
    /// Overrides `group_policy`.
    pub group_policy: Option<AccessPolicy>,
    /// Overrides `allow_from`.
    pub allow_from: Option<Vec<String>>,
    /// Overrides `group_allow_from`.
    pub group_allow_from: Option<Vec<String>>,
    /// Overrides `group_member_allow_from`.
    pub group_member_allow_from: Option<Vec<String>>,
    /// Overrides `mention_patterns`.
    pub mention_patterns: Option<Vec<String>>,
    /// Overrides `ignore_other_mentions`.
    pub ignore_other_mentions: Option<bool>,
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks values a type cannot: ranges and combinations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError::Invalid(format!("{key}: {why}")));
        if self.lanes.queue_cap == 0 {
            return bad("lanes.queue_cap", "must be at least 1");
        }
        if self.queue.cap == 0 || self.queue.by_channel.values().any(|o| o.cap == Some(0)) {
            return bad("queue.cap", "must be at least 1");
        }
        if self.lanes.max_live_lanes == 0 {
            return bad("lanes.max_live_lanes", "must be at least 1");
        }
        if self.lanes.max_concurrent_turns == 0 {
            return bad("lanes.max_concurrent_turns", "must be at least 1");
        }
        if self.storage.max_queued_messages == 0 {
            return bad("storage.max_queued_messages", "must be at least 1");
        }
        if !(self.storage.high_water > 0.0 && self.storage.high_water <= 1.0) {
            return bad("storage.high_water", "must be in (0, 1]");
        }
        if self.storage.max_disk_bytes < MIN_DISK_BYTES {
            return bad("storage.max_disk_bytes", "must be at least 4 MiB");
        }
        if !(0.0..=0.6).contains(&self.storage.cold_max_fraction) {
            return bad("storage.cold_max_fraction", "must be in [0, 0.6]");
        }
        if self.storage.janitor_interval_ms == 0 {
            return bad("storage.janitor_interval_ms", "must be at least 1");
        }
        if self.server.events_buffer == 0 {
            return bad("server.events_buffer", "must be at least 1");
        }
        if self.context.max_tokens == 0 {
            return bad("context.max_tokens", "must be at least 1");
        }
        if let Err(e) = crate::context::sources::time_zone(&self.context.time_zone) {
            return bad("context.time_zone", &e);
        }
        if self.model.context_window <= self.context.reserve_output_tokens {
            return bad(
                "model.context_window",
                "must be larger than context.reserve_output_tokens",
            );
        }
        if self.preflight.dedupe_max_keys == 0 {
            return bad("preflight.dedupe_max_keys", "must be at least 1");
        }
        if self.preflight.history_max_chats == 0 {
            return bad("preflight.history_max_chats", "must be at least 1");
        }
        crate::inbound::SessionKeys::new(&self.session)?;
        crate::inbound::Preflight::new(self)?;
        for kind in [
            crate::inbound::ChatKind::Direct,
            crate::inbound::ChatKind::Group,
            crate::inbound::ChatKind::Channel,
        ] {
            crate::context::policy_for(kind, &self.context.chat_kinds, &self.context.presets)
                .map_err(|why| ConfigError::Invalid(format!("context.chat_kinds: {why}")))?;
        }
        for name in self.context.presets.keys() {
            crate::context::resolve_preset(name, &self.context.presets)
                .map_err(|why| ConfigError::Invalid(format!("context.presets: {why}")))?;
        }
        if self.tools.max_result_chars < 100 {
            return bad("tools.max_result_chars", "must be at least 100");
        }
        if self.server.rate_limit.requests_per_second > 0 {
            if self.server.rate_limit.burst == 0 {
                return bad("server.rate_limit.burst", "must be at least 1");
            }
            if self.server.rate_limit.max_clients == 0 {
                return bad("server.rate_limit.max_clients", "must be at least 1");
            }
        }
        if let Some(t) = &self.channels.telegram {
            if !(1..=100).contains(&t.poll_limit) {
                return bad("channels.telegram.poll_limit", "must be within 1..=100");
            }
            if t.send_attempts == 0 {
                return bad("channels.telegram.send_attempts", "must be at least 1");
            }
            if !(t.api_base.starts_with("http://") || t.api_base.starts_with("https://")) {
                return bad("channels.telegram.api_base", "must be an http(s) URL");
            }
        }
        if let Some(c) = &self.channels.callback {
            if !(c.url.starts_with("http://") || c.url.starts_with("https://")) {
                return bad("channels.callback.url", "required, an http(s) URL");
            }
            if c.max_attempts == 0 {
                return bad("channels.callback.max_attempts", "must be at least 1");
            }
        }
        match self.model.provider.as_str() {
            "echo" => {}
            "openai" => self.validate_openai()?,
            other => {
                return bad(
                    "model.provider",
                    &format!("unknown provider {other:?} (expected \"echo\" or \"openai\")"),
                )
            }
        }
        self.validate_compaction()
    }

    fn validate_openai(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError::Invalid(format!("{key}: {why}")));
        let m = &self.model;
        if m.base_url.is_empty() {
            return bad("model.base_url", "required for provider \"openai\"");
        }
        match reqwest::Url::parse(&m.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(_) => return bad("model.base_url", "must be an http:// or https:// URL"),
            Err(e) => return bad("model.base_url", &format!("not a URL: {e}")),
        }
        if m.model.trim().is_empty() {
            return bad("model.model", "must not be empty");
        }
        if m.timeout_ms == 0 || m.connect_timeout_ms == 0 {
            return bad("model.timeout_ms", "timeouts must be at least 1 ms");
        }
        if m.max_retries > MAX_MODEL_RETRIES {
            return bad("model.max_retries", &format!("at most {MAX_MODEL_RETRIES}"));
        }
        if m.backoff_base_ms == 0 || m.backoff_base_ms > m.backoff_max_ms {
            return bad(
                "model.backoff_base_ms",
                "must be at least 1 and at most model.backoff_max_ms",
            );
        }
        if m.fallbacks.len() > MAX_FALLBACK_MODELS {
            return bad("model.fallbacks", &format!("at most {MAX_FALLBACK_MODELS}"));
        }
        if m.fallbacks.iter().any(|f| f.trim().is_empty()) {
            return bad("model.fallbacks", "names must not be empty");
        }
        Ok(())
    }

    fn validate_compaction(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError::Invalid(format!("{key}: {why}")));
        let c = &self.compaction;
        if !(64..=32_768).contains(&c.summary_max_tokens) {
            return bad("compaction.summary_max_tokens", "must be in 64..=32768");
        }
        if !(c.keep_recent_ratio > 0.0 && c.keep_recent_ratio < 1.0) {
            return bad("compaction.keep_recent_ratio", "must be in (0, 1)");
        }
        if !(c.soft_threshold > 0.0 && c.soft_threshold <= 1.0) {
            return bad("compaction.soft_threshold", "must be in (0, 1]");
        }
        if c.max_retries > MAX_MODEL_RETRIES {
            return bad(
                "compaction.max_retries",
                &format!("at most {MAX_MODEL_RETRIES}"),
            );
        }
        if c.chunk_tokens < 1_024 {
            return bad("compaction.chunk_tokens", "must be at least 1024");
        }
        if !(1..=64).contains(&c.max_concurrent) {
            return bad("compaction.max_concurrent", "must be in 1..=64");
        }
        if !(1..=1_000_000).contains(&c.max_pending) {
            return bad("compaction.max_pending", "must be in 1..=1000000");
        }
        if c.uses_model() && self.model.provider != "openai" {
            return bad(
                "compaction.model",
                "a summariser model needs model.provider = \"openai\" (its server); \
                 leave it empty for the built-in extractive summariser",
            );
        }
        Ok(())
    }

    /// A config for tests and examples: data in `dir`, everything else default.
    pub fn with_data_dir(dir: impl Into<PathBuf>) -> Self {
        let mut c = Self::default();
        c.storage.data_dir = dir.into();
        c
    }

    /// The lane idle timeout.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.lanes.idle_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
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
        let readme = include_str!("../README.md");
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
        let readme = include_str!("../README.md");
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
}
