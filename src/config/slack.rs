//! `[channels.slack]`: a Slack app, over Socket Mode (default) or the HTTP Events API, with
//! per-channel settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{invalid, AllowBots, DmScope};
use crate::error::ConfigError;

/// Longest `system_prompt` of a channel, in characters (it rides on every turn).
pub(crate) const MAX_SLACK_SYSTEM_PROMPT_CHARS: usize = 8_000;

/// Most channel tables (each is looked up per message).
pub(crate) const MAX_SLACK_TABLES: usize = 10_000;

/// Most entries of one `users` allowlist.
pub(crate) const MAX_SLACK_ALLOWLIST: usize = 10_000;

/// Most messages `catch_up_max_per_conversation` may allow: one catch-up holds a
/// conversation's messages in memory before handling them oldest first.
pub(crate) const MAX_SLACK_CATCH_UP_PER_CONVERSATION: usize = 10_000;

/// Longest Slack id accepted in the config (`U0123ABCD`, `C0123ABCD`; Slack's are ~11).
const MAX_SLACK_ID_CHARS: usize = 32;

/// How the app receives events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlackMode {
    /// Socket Mode: the app opens a websocket to Slack (`apps.connections.open` with the
    /// app-level token); no public URL needed. Default.
    #[default]
    Socket,
    /// The HTTP Events API: Slack POSTs events to this server's
    /// `/v1/channels/slack/events`, signed with the signing secret.
    Http,
}

/// `[channels.slack]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackConfig {
    /// `socket` (default) or `http`.
    pub mode: SlackMode,
    /// Name of the environment variable holding the app-level token (`xapp-…`, with
    /// `connections:write`); needed in Socket Mode. Default `TURNSTILE_SLACK_APP_TOKEN`.
    pub app_token_env: String,
    /// Name of the environment variable holding the bot token (`xoxb-…`); always needed.
    /// Default `TURNSTILE_SLACK_BOT_TOKEN`.
    pub bot_token_env: String,
    /// Name of the environment variable holding the signing secret; needed in `http` mode.
    /// Default `TURNSTILE_SLACK_SIGNING_SECRET`.
    pub signing_secret_env: String,
    /// Slack's Web API base: methods go to `<api_base>/<method>` (tests and operators behind a
    /// proxy point it elsewhere). Default `https://slack.com/api`.
    pub api_base: String,
    /// The account id this app's messages carry (session keys of direct messages may use it).
    /// Default `default`.
    pub account_id: String,
    /// `false` (default) | `true` | `"mentions"`: whether other bots' messages are answered
    /// (the app's own never are).
    pub allow_bots: AllowBots,
    /// In channels and group conversations, answer only messages that mention the bot
    /// (`<@U…>`, or an `app_mention` event); others are kept as the conversation's pending
    /// history. Default true; channels may override it.
    pub require_mention: bool,
    /// User ids (`U…`/`W…`) who may talk to the bot in channels; empty: everyone.
    pub users: Vec<String>,
    /// How Slack direct messages map to sessions; default: `[session] dm_scope`.
    pub dm_scope: Option<DmScope>,
    /// Reply in a thread under the message answered (channels and groups; in a DM only when
    /// the message was in a thread). Default true.
    pub reply_in_thread: bool,
    /// How often one chunk of a reply is tried before it is given up (it stays readable in
    /// the transcript and on `/v1/events`). Default 5.
    pub send_attempts: u32,
    /// Pause after a failed send, Web API read or connection, doubled per failure up to
    /// `max_retry_backoff_ms`, in ms. Default 1,000.
    pub retry_backoff_ms: u64,
    /// Longest pause between retries, in ms (a 429's `Retry-After` is capped by it). Default
    /// 60,000.
    pub max_retry_backoff_ms: u64,
    /// Show a reply while it streams: one message with the text so far, edited
    /// (`chat.update`) as more arrives and a last time to the final text. Default true.
    pub stream_edits: bool,
    /// Shortest time between two edits of a streaming reply, in ms (250–60,000). Default
    /// 2,000: `chat.update` is a Tier 3 method (about 50 calls a minute).
    pub edit_interval_ms: u64,
    /// Most messages one catch-up (after a reconnect or a restart) reads back per
    /// conversation and per thread, over as many `conversations.history`/`replies` pages as
    /// it takes (1–10,000). Past it, a conversation's *oldest* unread messages are skipped
    /// (the newest are answered, in order) and a thread's *newest* wait for the next
    /// catch-up. Default 1,000.
    pub catch_up_max_per_conversation: usize,
    /// `[channels.slack.channels.<channel id>]`: settings of one conversation (its threads
    /// use them too). Default none.
    pub channels: BTreeMap<String, SlackChatConfig>,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            mode: SlackMode::Socket,
            app_token_env: "TURNSTILE_SLACK_APP_TOKEN".into(),
            bot_token_env: "TURNSTILE_SLACK_BOT_TOKEN".into(),
            signing_secret_env: "TURNSTILE_SLACK_SIGNING_SECRET".into(),
            api_base: "https://slack.com/api".into(),
            account_id: "default".into(),
            allow_bots: AllowBots::No,
            require_mention: true,
            users: Vec::new(),
            dm_scope: None,
            reply_in_thread: true,
            send_attempts: 5,
            retry_backoff_ms: 1_000,
            max_retry_backoff_ms: 60_000,
            stream_edits: true,
            edit_interval_ms: 2_000,
            catch_up_max_per_conversation: 1_000,
            channels: BTreeMap::new(),
        }
    }
}

/// `[channels.slack.channels.<channel id>]`: each key set here replaces the top-level one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackChatConfig {
    /// Overrides `require_mention` in this conversation.
    pub require_mention: Option<bool>,
    /// Replaces the top-level `users`.
    pub users: Option<Vec<String>>,
    /// Extra system instructions for this conversation's sessions (the seed's
    /// `GroupSystemPrompt`).
    pub system_prompt: Option<String>,
}

/// Checks that `id` looks like a Slack id of one of the `prefixes` (`U`, `C`…): upper-case
/// letters and digits.
fn slack_id(key: &str, id: &str, prefixes: &str, what: &str) -> Result<(), ConfigError> {
    let ok = id.len() >= 2
        && id.len() <= MAX_SLACK_ID_CHARS
        && id.starts_with(|c: char| prefixes.contains(c))
        && id
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!("{id:?} is not a Slack {what} id (e.g. {prefixes:.1}0123ABCD)"),
        ))
    }
}

fn users(key: &str, list: &[String]) -> Result<(), ConfigError> {
    if list.len() > MAX_SLACK_ALLOWLIST {
        return Err(invalid(
            key,
            format!("at most {MAX_SLACK_ALLOWLIST} entries"),
        ));
    }
    list.iter()
        .try_for_each(|id| slack_id(key, id.trim(), "UW", "user"))
}

fn env_name(key: &str, name: &str) -> Result<(), ConfigError> {
    if name.trim().is_empty() {
        return Err(invalid(key, "must name an environment variable"));
    }
    Ok(())
}

impl SlackConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("channels.slack.{k}");
        env_name(&key("bot_token_env"), &self.bot_token_env)?;
        env_name(&key("app_token_env"), &self.app_token_env)?;
        env_name(&key("signing_secret_env"), &self.signing_secret_env)?;
        let rest = self
            .api_base
            .strip_prefix("https://")
            .or_else(|| self.api_base.strip_prefix("http://"));
        if !rest.is_some_and(|r| !r.is_empty() && !r.contains(['?', '#', ' '])) {
            return Err(invalid(
                &key("api_base"),
                "must be an http(s) URL (e.g. https://slack.com/api)",
            ));
        }
        super::channels::check_attempts(&key("send_attempts"), self.send_attempts)?;
        super::channels::check_backoff(&key, self.retry_backoff_ms, self.max_retry_backoff_ms)?;
        super::channels::check_edit_interval(&key("edit_interval_ms"), self.edit_interval_ms)?;
        super::in_range(
            &key("catch_up_max_per_conversation"),
            self.catch_up_max_per_conversation,
            1..=MAX_SLACK_CATCH_UP_PER_CONVERSATION,
        )?;
        users(&key("users"), &self.users)?;
        if self.channels.len() > MAX_SLACK_TABLES {
            return Err(invalid(
                &key("channels"),
                format!("at most {MAX_SLACK_TABLES}"),
            ));
        }
        for (id, chat) in &self.channels {
            let ckey = |k: &str| key(&format!("channels.{id}.{k}"));
            slack_id(&key(&format!("channels.{id}")), id, "CGD", "conversation")?;
            users(&ckey("users"), chat.users.as_deref().unwrap_or_default())?;
            if let Some(p) = &chat.system_prompt {
                if p.chars().count() > MAX_SLACK_SYSTEM_PROMPT_CHARS {
                    return Err(invalid(
                        &ckey("system_prompt"),
                        format!("at most {MAX_SLACK_SYSTEM_PROMPT_CHARS} characters"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The settings in force in conversation `channel` (and its threads): its table over the
    /// top-level settings.
    pub fn resolve(&self, channel: &str) -> SlackChatSettings {
        let chat = self.channels.get(channel);
        SlackChatSettings {
            require_mention: chat
                .and_then(|c| c.require_mention)
                .unwrap_or(self.require_mention),
            users: chat
                .and_then(|c| c.users.clone())
                .unwrap_or_else(|| self.users.clone())
                .into_iter()
                .map(|u| u.trim().to_string())
                .collect(),
            system_prompt: chat
                .and_then(|c| c.system_prompt.clone())
                .filter(|p| !p.trim().is_empty()),
        }
    }
}

/// The settings in force in one conversation, resolved by [`SlackConfig::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackChatSettings {
    /// Only messages that mention the bot become turns.
    pub require_mention: bool,
    /// Allowed user ids (empty: everyone).
    pub users: Vec<String>,
    /// Extra system instructions.
    pub system_prompt: Option<String>,
}

impl SlackChatSettings {
    /// Whether `user` may talk to the bot here.
    pub fn allows(&self, user: &str) -> bool {
        self.users.is_empty() || self.users.iter().any(|u| u == user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_slack_section_parses_resolves_and_refuses_bad_values() {
        let c = Config::parse(
            r#"
[channels.slack]
api_base = "http://127.0.0.1:9/api"
allow_bots = "mentions"
dm_scope = "per-channel-peer"
users = ["U1", "U2"]
[channels.slack.channels.C20]
require_mention = false
system_prompt = "Be brief."
[channels.slack.channels.G30]
users = []
"#,
        )
        .unwrap();
        let s = c.channels.slack.unwrap();
        assert_eq!(s.mode, SlackMode::Socket);
        assert_eq!(s.app_token_env, "TURNSTILE_SLACK_APP_TOKEN");
        assert_eq!(s.bot_token_env, "TURNSTILE_SLACK_BOT_TOKEN");
        assert_eq!(s.signing_secret_env, "TURNSTILE_SLACK_SIGNING_SECRET");
        assert_eq!(s.allow_bots, AllowBots::Mentions);
        let c20 = s.resolve("C20");
        assert!(!c20.require_mention);
        assert_eq!(c20.system_prompt.as_deref(), Some("Be brief."));
        assert!(c20.allows("U1") && !c20.allows("U3"));
        assert!(s.resolve("G30").allows("U3"), "an empty list: everyone");
        assert!(s.resolve("C99").require_mention);
        let http = Config::parse("[channels.slack]\nmode = \"http\"\n").unwrap();
        assert_eq!(http.channels.slack.unwrap().mode, SlackMode::Http);
        assert_eq!(
            SlackConfig::default().api_base,
            "https://slack.com/api",
            "Slack's Web API by default"
        );

        for bad in [
            "[channels.slack]\ntoken = \"x\"\n",
            "[channels.slack]\nmode = \"rtm\"\n",
            "[channels.slack]\nbot_token_env = \" \"\n",
            "[channels.slack]\napp_token_env = \"\"\n",
            "[channels.slack]\napi_base = \"ftp://x\"\n",
            "[channels.slack]\napi_base = \"https://\"\n",
            "[channels.slack]\nallow_bots = \"sometimes\"\n",
            "[channels.slack]\nusers = [\"bob\"]\n",
            "[channels.slack]\nsend_attempts = 0\n",
            "[channels.slack]\nretry_backoff_ms = 5000\nmax_retry_backoff_ms = 100\n",
            "[channels.slack.channels.general]\n",
            "[channels.slack.channels.C1]\nbogus = 1\n",
            "[channels.slack.channels.C1]\nusers = [\"c1\"]\n",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
        let e = Config::parse("[channels.slack]\nmode = \"rtm\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mode") || e.contains("rtm"), "{e}");
        let e = Config::parse("[channels.slack.channels.general]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("channels.slack.channels.general"), "{e}");
    }
}
