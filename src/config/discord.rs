//! `[channels.discord]`: a Discord bot, with per-guild and per-channel settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{invalid, AllowBots, DmScope};
use crate::error::ConfigError;

/// Longest `system_prompt` of a guild or channel, in characters (it rides on every turn).
pub(crate) const MAX_DISCORD_SYSTEM_PROMPT_CHARS: usize = 8_000;

/// Most guild tables, and most channel tables per guild (each is looked up per message).
pub(crate) const MAX_DISCORD_TABLES: usize = 10_000;

/// Most entries of one `users` or `roles` allowlist.
pub(crate) const MAX_DISCORD_ALLOWLIST: usize = 10_000;

/// Longest `pluralkit_wait_ms`: a message held longer than this would feel lost.
pub(crate) const MAX_PLURALKIT_WAIT_MS: u64 = 10_000;

/// `[channels.discord]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordConfig {
    /// Name of the environment variable holding the bot token. Default
    /// `TURNSTILE_DISCORD_TOKEN`.
    pub token_env: String,
    /// Discord's REST base: scheme, host and port only; requests go to
    /// `<api_base>/api/v10/…` (tests and operators behind a proxy point it elsewhere). Default
    /// `https://discord.com`.
    pub api_base: String,
    /// The gateway websocket URL (`ws://` or `wss://`). Default empty: what `GET /gateway/bot`
    /// answers, with the shard count it recommends.
    pub gateway_url: String,
    /// The account id this bot's messages carry (session keys of direct messages may use it).
    /// Default `default`.
    pub account_id: String,
    /// `false` (default) | `true` | `"mentions"`: whether other bots' messages are answered
    /// (the bot's own are never). Per guild and channel this cannot be changed.
    pub allow_bots: AllowBots,
    /// In guild channels, answer only messages that address the bot (a mention of it or of
    /// one of its roles, or a reply to it); others are kept as the channel's pending history.
    /// Default true; guilds and channels may override it.
    pub require_mention: bool,
    /// How Discord direct messages map to sessions; default: `[session] dm_scope`.
    pub dm_scope: Option<DmScope>,
    /// Show "typing…" while a turn for a channel runs (refreshed every 8 s). Default true.
    pub typing: bool,
    /// How often one chunk of a reply is tried before it is given up (it stays readable in
    /// the transcript and on `/v1/events`). Default 5.
    pub send_attempts: u32,
    /// Pause after a failed send or REST read, doubled per failure up to
    /// `max_retry_backoff_ms`, in ms. Default 1,000.
    pub retry_backoff_ms: u64,
    /// Longest pause between retries, in ms (a 429's `retry_after` is capped by it). Default
    /// 60,000.
    pub max_retry_backoff_ms: u64,
    /// Show a reply while it streams: one message with the text so far, edited as more
    /// arrives (only while the edit route's rate-limit bucket has room) and a last time to
    /// the final text. Default true.
    pub stream_edits: bool,
    /// Shortest time between two edits of a streaming reply, in ms (250–60,000). Default
    /// 1,000.
    pub edit_interval_ms: u64,
    /// Attribute messages PluralKit proxies (webhook messages) to their member, asking
    /// PluralKit's API who sent them, instead of taking them for another bot's; and wait for
    /// the proxy of a message from an account with a PluralKit system, so the original that
    /// PluralKit deletes is not a turn of its own. Default false (as OpenClaw).
    pub pluralkit: bool,
    /// PluralKit's API base (`GET <base>/messages/{id}`, `GET <base>/systems/{account}`);
    /// tests and proxies point it elsewhere. Default `https://api.pluralkit.me/v2`.
    pub pluralkit_api_base: String,
    /// How long a guild message from an account with a PluralKit system waits for its proxy
    /// before it is taken as it is, in ms (0–10,000; 0: nothing waits, the original is
    /// answered as the account's and its repost skipped, OpenClaw's outcome). Default 3,000.
    pub pluralkit_wait_ms: u64,
    /// `[channels.discord.guilds.<guild id>]`: settings of one guild. Default none.
    pub guilds: BTreeMap<String, DiscordGuildConfig>,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            token_env: "TURNSTILE_DISCORD_TOKEN".into(),
            api_base: "https://discord.com".into(),
            gateway_url: String::new(),
            account_id: "default".into(),
            allow_bots: AllowBots::No,
            require_mention: true,
            dm_scope: None,
            typing: true,
            send_attempts: 5,
            retry_backoff_ms: 1_000,
            max_retry_backoff_ms: 60_000,
            stream_edits: true,
            edit_interval_ms: 1_000,
            pluralkit: false,
            pluralkit_api_base: "https://api.pluralkit.me/v2".into(),
            pluralkit_wait_ms: 3_000,
            guilds: BTreeMap::new(),
        }
    }
}

/// `[channels.discord.guilds.<guild id>]`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordGuildConfig {
    /// Overrides `require_mention` in this guild.
    pub require_mention: Option<bool>,
    /// User ids who may talk to the bot here; empty: everyone (unless `roles` is set).
    pub users: Vec<String>,
    /// Role ids whose members may talk to the bot here; a sender in `users` or with one of
    /// these roles passes. Empty with empty `users`: everyone.
    pub roles: Vec<String>,
    /// Extra system instructions for this guild's sessions (the seed's `GroupSystemPrompt`).
    pub system_prompt: Option<String>,
    /// `[channels.discord.guilds.<guild id>.channels.<channel id>]`: one channel's settings
    /// (a thread uses its parent channel's unless it has its own).
    pub channels: BTreeMap<String, DiscordChatConfig>,
}

/// `[channels.discord.guilds.<guild id>.channels.<channel id>]`: each key set here replaces
/// the guild's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordChatConfig {
    /// Overrides `require_mention` in this channel.
    pub require_mention: Option<bool>,
    /// Replaces the guild's `users`.
    pub users: Option<Vec<String>>,
    /// Replaces the guild's `roles`.
    pub roles: Option<Vec<String>>,
    /// Replaces the guild's `system_prompt`.
    pub system_prompt: Option<String>,
}

/// Checks that `id` is a Discord snowflake (a positive decimal number).
fn snowflake(key: &str, id: &str) -> Result<(), ConfigError> {
    match id.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err(invalid(
            key,
            format!("{id:?} is not a Discord id (a number)"),
        )),
    }
}

fn ids(key: &str, list: &[String]) -> Result<(), ConfigError> {
    if list.len() > MAX_DISCORD_ALLOWLIST {
        return Err(invalid(
            key,
            format!("at most {MAX_DISCORD_ALLOWLIST} entries"),
        ));
    }
    list.iter().try_for_each(|id| snowflake(key, id))
}

fn prompt(key: &str, text: Option<&String>) -> Result<(), ConfigError> {
    match text {
        Some(t) if t.chars().count() > MAX_DISCORD_SYSTEM_PROMPT_CHARS => Err(invalid(
            key,
            format!("at most {MAX_DISCORD_SYSTEM_PROMPT_CHARS} characters"),
        )),
        _ => Ok(()),
    }
}

/// Checks `api_base`: `http(s)://host[:port]`, nothing after it (twilight appends `/api/v10`).
fn api_base(key: &str, base: &str) -> Result<(), ConfigError> {
    let rest = base
        .strip_prefix("https://")
        .or_else(|| base.strip_prefix("http://"));
    match rest.map(|r| r.trim_end_matches('/')) {
        Some(host) if !host.is_empty() && !host.contains(['/', '?', '#', '@', ' ']) => Ok(()),
        _ => Err(invalid(
            key,
            "must be an http(s) URL of a host (and port), without a path",
        )),
    }
}

impl DiscordConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("channels.discord.{k}");
        if self.token_env.trim().is_empty() {
            return Err(invalid(
                &key("token_env"),
                "must name an environment variable",
            ));
        }
        api_base(&key("api_base"), &self.api_base)?;
        let g = &self.gateway_url;
        if !(g.is_empty() || g.starts_with("ws://") || g.starts_with("wss://")) {
            return Err(invalid(
                &key("gateway_url"),
                "must be empty (ask Discord) or a ws(s):// URL",
            ));
        }
        super::channels::check_attempts(&key("send_attempts"), self.send_attempts)?;
        super::channels::check_backoff(&key, self.retry_backoff_ms, self.max_retry_backoff_ms)?;
        super::channels::check_edit_interval(&key("edit_interval_ms"), self.edit_interval_ms)?;
        let pk = &self.pluralkit_api_base;
        let pk_rest = pk
            .strip_prefix("https://")
            .or_else(|| pk.strip_prefix("http://"));
        if !pk_rest.is_some_and(|r| !r.is_empty() && !r.contains(['?', '#', '@', ' '])) {
            return Err(invalid(
                &key("pluralkit_api_base"),
                "must be an http(s) URL (for example https://api.pluralkit.me/v2)",
            ));
        }
        super::in_range(
            &key("pluralkit_wait_ms"),
            self.pluralkit_wait_ms,
            0..=MAX_PLURALKIT_WAIT_MS,
        )?;
        if self.guilds.len() > MAX_DISCORD_TABLES {
            return Err(invalid(
                &key("guilds"),
                format!("at most {MAX_DISCORD_TABLES}"),
            ));
        }
        for (id, guild) in &self.guilds {
            let gkey = |k: &str| key(&format!("guilds.{id}.{k}"));
            snowflake(&key(&format!("guilds.{id}")), id)?;
            ids(&gkey("users"), &guild.users)?;
            ids(&gkey("roles"), &guild.roles)?;
            prompt(&gkey("system_prompt"), guild.system_prompt.as_ref())?;
            if guild.channels.len() > MAX_DISCORD_TABLES {
                return Err(invalid(
                    &gkey("channels"),
                    format!("at most {MAX_DISCORD_TABLES}"),
                ));
            }
            for (cid, chat) in &guild.channels {
                let ckey = |k: &str| gkey(&format!("channels.{cid}.{k}"));
                snowflake(&gkey(&format!("channels.{cid}")), cid)?;
                ids(&ckey("users"), chat.users.as_deref().unwrap_or_default())?;
                ids(&ckey("roles"), chat.roles.as_deref().unwrap_or_default())?;
                prompt(&ckey("system_prompt"), chat.system_prompt.as_ref())?;
            }
        }
        Ok(())
    }

    /// The settings that apply in channel `channel` (or, for a thread, `parent`) of guild
    /// `guild`: the channel's table, else the parent's, over the guild's, over the defaults.
    pub fn resolve(&self, guild: u64, channel: u64, parent: Option<u64>) -> DiscordChatSettings {
        let guild = self.guilds.get(&guild.to_string());
        let chat = guild.and_then(|g| {
            g.channels
                .get(&channel.to_string())
                .or_else(|| parent.and_then(|p| g.channels.get(&p.to_string())))
        });
        let parse = |list: &[String]| -> Vec<u64> {
            list.iter().filter_map(|s| s.trim().parse().ok()).collect()
        };
        DiscordChatSettings {
            require_mention: chat
                .and_then(|c| c.require_mention)
                .or_else(|| guild.and_then(|g| g.require_mention))
                .unwrap_or(self.require_mention),
            users: chat
                .and_then(|c| c.users.as_deref())
                .or_else(|| guild.map(|g| g.users.as_slice()))
                .map(parse)
                .unwrap_or_default(),
            roles: chat
                .and_then(|c| c.roles.as_deref())
                .or_else(|| guild.map(|g| g.roles.as_slice()))
                .map(parse)
                .unwrap_or_default(),
            system_prompt: chat
                .and_then(|c| c.system_prompt.clone())
                .or_else(|| guild.and_then(|g| g.system_prompt.clone()))
                .filter(|p| !p.trim().is_empty()),
        }
    }
}

/// The settings in force in one guild channel, resolved by [`DiscordConfig::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscordChatSettings {
    /// Only messages that address the bot become turns.
    pub require_mention: bool,
    /// Allowed user ids (with `roles`; both empty: everyone).
    pub users: Vec<u64>,
    /// Allowed role ids.
    pub roles: Vec<u64>,
    /// Extra system instructions.
    pub system_prompt: Option<String>,
}

impl DiscordChatSettings {
    /// Whether a sender with id `user` and roles `roles` may talk to the bot here.
    pub fn allows(&self, user: u64, roles: &[u64]) -> bool {
        (self.users.is_empty() && self.roles.is_empty())
            || self.users.contains(&user)
            || roles.iter().any(|r| self.roles.contains(r))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn the_discord_section_parses_resolves_and_refuses_bad_values() {
        let c = Config::parse(
            r#"
[channels.discord]
api_base = "http://127.0.0.1:9"
allow_bots = "mentions"
dm_scope = "per-channel-peer"
[channels.discord.guilds.10]
require_mention = false
roles = ["7"]
system_prompt = "Be brief."
[channels.discord.guilds.10.channels.20]
require_mention = true
users = ["5"]
"#,
        )
        .unwrap();
        let d = c.channels.discord.unwrap();
        assert_eq!(d.token_env, "TURNSTILE_DISCORD_TOKEN");
        assert_eq!(d.allow_bots, crate::config::AllowBots::Mentions);
        let guild = d.resolve(10, 30, None);
        assert!(!guild.require_mention);
        assert_eq!(guild.roles, vec![7]);
        assert_eq!(guild.system_prompt.as_deref(), Some("Be brief."));
        assert!(guild.allows(1, &[7]) && !guild.allows(1, &[8]));
        // A thread of channel 20 falls back to the channel's table.
        let thread = d.resolve(10, 99, Some(20));
        assert!(thread.require_mention);
        assert_eq!(thread.users, vec![5]);
        assert_eq!(thread.roles, vec![7], "the guild's roles still apply");
        assert!(thread.allows(5, &[]));
        let elsewhere = d.resolve(11, 1, None);
        assert!(elsewhere.require_mention && elsewhere.allows(1, &[]));

        for bad in [
            "[channels.discord]\ntoken = \"x\"\n",
            "[channels.discord]\napi_base = \"ftp://x\"\n",
            "[channels.discord]\napi_base = \"https://discord.com/api\"\n",
            "[channels.discord]\ngateway_url = \"http://x\"\n",
            "[channels.discord]\nallow_bots = \"sometimes\"\n",
            "[channels.discord.guilds.abc]\n",
            "[channels.discord.guilds.1]\nusers = [\"me\"]\n",
            "[channels.discord.guilds.1]\nbogus = 1\n",
            "[channels.discord.guilds.1.channels.2]\nroles = [\"x\"]\n",
            "[channels.discord.guilds.1.channels.2]\nbogus = 1\n",
            "[channels.discord]\nsend_attempts = 0\n",
            "[channels.discord]\npluralkit_api_base = \"api.pluralkit.me\"\n",
            "[channels.discord]\npluralkit = \"yes\"\n",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }
}
