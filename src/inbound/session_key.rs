//! Session keys: which conversation a message belongs to (OpenClaw-compatible, SPEC §2.2), so
//! OpenClaw users keep their sessions when they migrate.
//!
//! The rules, all applied by [`SessionKeys::key`]:
//! - `[session] scope = "global"` sends everything to the one session `global`.
//! - Direct messages follow `dm_scope`: `main` → `agent:<agent>:main`; `per-peer` →
//!   `agent:<agent>:direct:<peer>`; `per-channel-peer` → `agent:<agent>:<channel>:direct:<peer>`;
//!   `per-account-channel-peer` → `agent:<agent>:<channel>:<account>:direct:<peer>`. The peer
//!   is the sender's id; `identity_links` replace it by a canonical name (not under `main`).
//! - Groups and channels: `agent:<agent>:<channel>:<group|channel>:<chat_id>` (no account).
//! - A message with a `thread_id` gets `:thread:<thread_id>` appended — except a Telegram group
//!   or channel message, whose `thread_id` is its forum topic: the chat id becomes
//!   `<chat_id>:topic:<thread_id>` (OpenClaw's Telegram peer id), with no thread suffix. Telegram
//!   reply chains in ordinary groups carry no `thread_id`, so they stay in the chat's session.
//! - Phone-number peers on phone channels (`whatsapp`, `signal`, `sms`) are E.164:
//!   `whatsapp:+1 (555) 123-4567` → `+15551234567` (see [`peer_id`]).
//! - The agent id is normalised with [`normalize_id`], the account id too (empty → `default`);
//!   channel, chat, thread and peer ids are trimmed; the whole key is lowercased, so ids are
//!   told apart without regard to case (as the platforms' own ids are).
//! - Keys are injective: in a channel, chat, thread or peer id, the key's separator `:` is
//!   written `%3a` and `%` itself `%25` ([`key_part`]), so a chat id such as `room:thread:t1`
//!   cannot name the thread `t1` of the chat `room`. The ids real platforms use (numbers,
//!   Slack's `C0123ABC`, WhatsApp's `…@g.us`, phone numbers) contain neither and keep their
//!   OpenClaw keys.

use std::collections::{BTreeMap, HashMap};

use super::message::{ChatKind, InboundMessage};
use crate::config::{DmScope, SessionConfig, SessionScope};
use crate::error::ConfigError;

/// Longest normalised id.
pub(crate) const MAX_NORMALIZED_ID_CHARS: usize = 64;

/// Channels whose peers are phone numbers when they look like one (see [`peer_id`]).
pub(crate) const PHONE_CHANNELS: [&str; 3] = ["whatsapp", "signal", "sms"];

/// Fewest and most digits of a phone number (E.164 allows at most 15).
const PHONE_DIGITS: std::ops::RangeInclusive<usize> = 7..=15;

/// The session key of everything under `scope = "global"`.
pub(crate) const GLOBAL_SESSION_KEY: &str = "global";

/// Normalises an agent or account id: trimmed, lowercased, runs of characters outside
/// `[a-z0-9_-]` become `-`, leading and trailing `-` stripped, cut to 64 chars; empty gives
/// `fallback`.
pub(crate) fn normalize_id(raw: &str, fallback: &str) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_NORMALIZED_ID_CHARS));
    let mut in_run = false;
    for c in raw.trim().chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let trimmed: String = out
        .trim_matches('-')
        .chars()
        .take(MAX_NORMALIZED_ID_CHARS)
        .collect();
    let trimmed = trimmed.trim_end_matches('-');
    if trimmed.is_empty() {
        fallback.to_string()
    } else {
        trimmed.to_string()
    }
}

/// Normalises an agent id ([`normalize_id`], `main` when empty).
pub(crate) fn normalize_agent_id(raw: &str) -> String {
    normalize_id(raw, "main")
}

/// The agent id a session key names (`agent:<id>:…`), if it names one.
pub(crate) fn agent_in_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("agent:")?;
    let (id, _) = rest.split_once(':')?;
    (!id.is_empty()).then_some(id)
}

/// The separator between a channel name and an agent id in the chat record's channel of a
/// non-default agent (see [`chat_record_channel`]); validated channel names never hold it.
const CHAT_SCOPE_SEPARATOR: char = '\u{1f}';

/// The channel under which a chat's record (its messages, addressed or not: group history,
/// chatter, recall, reply threads) is kept for `scope`: the channel itself for the default
/// agent (`None`), so existing records stay where they are, and `<channel>\x1f<agent>` for
/// any other agent, so one agent never reads what was said to another in a shared chat.
pub(crate) fn chat_record_channel<'a>(
    channel: &'a str,
    scope: Option<&str>,
) -> std::borrow::Cow<'a, str> {
    match scope {
        None => std::borrow::Cow::Borrowed(channel),
        Some(agent) => std::borrow::Cow::Owned(format!("{channel}{CHAT_SCOPE_SEPARATOR}{agent}")),
    }
}

/// The channel name as used in keys: trimmed and lowercased, `unknown` when empty.
pub(crate) fn channel_name(raw: &str) -> String {
    let c = raw.trim().to_lowercase();
    if c.is_empty() {
        "unknown".into()
    } else {
        c
    }
}

/// A peer (sender) id as used in keys, allow lists and identity links: trimmed and lowercased;
/// on a phone channel ([`PHONE_CHANNELS`]) an id that looks like a phone number becomes E.164.
///
/// "Looks like a phone number": after an optional `<channel>:` or `tel:` prefix (and, on
/// WhatsApp, an `@s.whatsapp.net` / `@c.us` suffix), only digits, an optional leading `+` and
/// the separators ` -.()`, with 7 to 15 digits. The result is `+` and the digits, so numbers
/// are expected in international form (a leading `+` is added, no country code is guessed).
/// Anything else (Signal UUIDs, group JIDs, user names) is kept as it is.
pub(crate) fn peer_id(channel: &str, raw: &str) -> String {
    let raw = raw.trim();
    let channel = channel.trim();
    if PHONE_CHANNELS
        .iter()
        .any(|c| c.eq_ignore_ascii_case(channel))
    {
        if let Some(phone) = e164(channel, raw) {
            return phone;
        }
    }
    raw.to_lowercase()
}

/// `raw` as E.164 if it looks like a phone number of `channel`.
fn e164(channel: &str, raw: &str) -> Option<String> {
    let mut s = raw;
    for prefix in [channel, "tel"] {
        s = strip_prefix_ignore_case(s, prefix, ':').unwrap_or(s);
    }
    if channel.eq_ignore_ascii_case("whatsapp") {
        for suffix in ["@s.whatsapp.net", "@c.us"] {
            let bytes = s.as_bytes();
            if bytes.len() > suffix.len()
                && bytes[bytes.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
            {
                // The suffix starts with an ASCII byte, so the cut is on a char boundary.
                s = &s[..s.len() - suffix.len()];
            }
        }
    }
    let s = s.trim();
    let body = s.strip_prefix('+').unwrap_or(s);
    let mut digits = String::with_capacity(16);
    for c in body.chars() {
        match c {
            '0'..='9' => digits.push(c),
            ' ' | '-' | '.' | '(' | ')' => {}
            _ => return None,
        }
        if digits.len() > *PHONE_DIGITS.end() {
            return None;
        }
    }
    PHONE_DIGITS
        .contains(&digits.len())
        .then(|| format!("+{digits}"))
}

/// `s` without a leading `prefix` (ASCII, any case) followed by `sep`, if it has one.
fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str, sep: char) -> Option<&'a str> {
    let bytes = s.as_bytes();
    let n = prefix.len();
    if bytes.len() > n
        && bytes[..n].eq_ignore_ascii_case(prefix.as_bytes())
        && s[n..].starts_with(sep)
    {
        return Some(&s[n + sep.len_utf8()..]);
    }
    None
}

/// Normalises an entry of an allow list or identity link: `peer` or `channel:peer`. The peer
/// part goes through [`peer_id`] for its channel; a bare entry starting with `+` is read as a
/// phone number.
pub(crate) fn normalize_peer_entry(entry: &str) -> String {
    let entry = entry.trim();
    if let Some((channel, peer)) = entry.split_once(':') {
        let channel = channel_name(channel);
        return format!("{channel}:{}", peer_id(&channel, peer));
    }
    if entry.starts_with('+') {
        return peer_id(PHONE_CHANNELS[0], entry);
    }
    entry.to_lowercase()
}

/// Checks `[session.identity_links]` and maps each normalised `peer` or `channel:peer` to its
/// canonical name: an empty canonical name or peer, or a peer linked to two names, is an error.
/// A plain function so that config validation can call it without building [`SessionKeys`].
pub(crate) fn identity_links(
    config: &BTreeMap<String, Vec<String>>,
) -> Result<HashMap<String, String>, ConfigError> {
    let mut links = HashMap::new();
    for (name, peers) in config {
        let canonical = name.trim().to_lowercase();
        if canonical.is_empty() {
            return Err(ConfigError::Invalid(
                "session.identity_links: a canonical name is empty".into(),
            ));
        }
        for peer in peers {
            let entry = normalize_peer_entry(peer);
            if entry.is_empty() || entry.ends_with(':') {
                return Err(ConfigError::Invalid(format!(
                    "session.identity_links.{name}: empty peer {peer:?}"
                )));
            }
            if let Some(other) = links.insert(entry, canonical.clone()) {
                if other != canonical {
                    return Err(ConfigError::Invalid(format!(
                        "session.identity_links: {peer:?} is linked to both {other:?} and {canonical:?}"
                    )));
                }
            }
        }
    }
    Ok(links)
}

/// Derives session keys from messages under one `[session]` configuration. Built once; cheap
/// to use per message.
#[derive(Debug, Clone)]
pub struct SessionKeys {
    agent: String,
    dm_scope: DmScope,
    scope: SessionScope,
    /// Normalised `peer` or `channel:peer` → canonical name.
    links: HashMap<String, String>,
    /// Channels whose direct messages follow their own `dm_scope` (e.g. `[channels.discord]
    /// dm_scope`), by normalised channel name.
    channel_dm_scopes: HashMap<String, DmScope>,
}

impl SessionKeys {
    /// Checks and compiles `config` (see [`identity_links`]).
    pub fn new(config: &SessionConfig) -> Result<Self, ConfigError> {
        let links = identity_links(&config.identity_links)?;
        Ok(Self {
            agent: normalize_id(&config.agent_id, "main"),
            dm_scope: config.dm_scope,
            scope: config.scope,
            links,
            channel_dm_scopes: HashMap::new(),
        })
    }

    /// These keys with `channel`'s direct messages under `dm_scope` instead of `[session]`'s.
    pub fn with_channel_dm_scope(mut self, channel: &str, dm_scope: DmScope) -> Self {
        self.channel_dm_scopes
            .insert(channel_name(channel), dm_scope);
        self
    }

    /// Keys for `agent_id` with every other setting at its default.
    pub fn for_agent(agent_id: &str) -> Self {
        Self {
            agent: normalize_id(agent_id, "main"),
            dm_scope: DmScope::Main,
            scope: SessionScope::PerSender,
            links: HashMap::new(),
            channel_dm_scopes: HashMap::new(),
        }
    }

    /// The normalised agent id.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The session key of `msg` for the default agent.
    pub fn key(&self, msg: &InboundMessage) -> String {
        self.key_for(&self.agent, msg)
    }

    /// The session key of `msg` for agent `agent` (normalised). Under `scope = "global"` the
    /// default agent's key is `global`, any other agent's `agent:<id>:global`.
    pub fn key_for(&self, agent: &str, msg: &InboundMessage) -> String {
        if self.scope == SessionScope::Global {
            if agent == self.agent {
                return GLOBAL_SESSION_KEY.into();
            }
            return format!("agent:{agent}:{GLOBAL_SESSION_KEY}");
        }
        let channel = channel_name(&msg.channel);
        let channel = key_part(&channel);
        let thread = msg
            .thread_id
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(key_part);
        let (mut key, thread) = match msg.chat_kind {
            ChatKind::Direct => (self.direct_key(agent, &channel, msg), thread),
            kind => {
                let chat = msg.chat_id.trim();
                let chat = if chat.is_empty() { "unknown" } else { chat };
                // The Telegram channel writes a forum topic into the chat id
                // (`<chat>:topic:<n>`, so replies find their topic): the same session as
                // that chat id and topic given apart.
                let (chat, thread) = match (channel == "telegram", thread) {
                    (true, None) => match chat.split_once(":topic:") {
                        Some((chat, topic)) => (chat, Some(key_part(topic))),
                        None => (chat, None),
                    },
                    (_, thread) => (chat, thread),
                };
                let chat = key_part(chat);
                match thread {
                    Some(topic) if channel == "telegram" => (
                        format!(
                            "agent:{agent}:{channel}:{}:{chat}:topic:{topic}",
                            kind.as_str()
                        ),
                        None,
                    ),
                    _ => (
                        format!("agent:{agent}:{channel}:{}:{chat}", kind.as_str()),
                        thread,
                    ),
                }
            }
        };
        if let Some(thread) = thread {
            key.push_str(":thread:");
            key.push_str(&thread);
        }
        key.to_lowercase()
    }

    fn direct_key(&self, agent: &str, channel: &str, msg: &InboundMessage) -> String {
        let dm_scope = self
            .channel_dm_scopes
            .get(channel)
            .copied()
            .unwrap_or(self.dm_scope);
        if dm_scope == DmScope::Main {
            return format!("agent:{agent}:main");
        }
        let mut peer = peer_id(channel, &msg.sender.id);
        if let Some(canonical) = self.linked(channel, &peer) {
            peer = canonical.to_string();
        }
        let peer = key_part(&peer);
        if peer.is_empty() {
            return format!("agent:{agent}:main");
        }
        match dm_scope {
            DmScope::Main => format!("agent:{agent}:main"),
            DmScope::PerPeer => format!("agent:{agent}:direct:{peer}"),
            DmScope::PerChannelPeer => format!("agent:{agent}:{channel}:direct:{peer}"),
            DmScope::PerAccountChannelPeer => {
                let account = normalize_id(&msg.account_id, "default");
                format!("agent:{agent}:{channel}:{account}:direct:{peer}")
            }
        }
    }

    /// The canonical name `peer` of `channel` is linked to, if any.
    fn linked(&self, channel: &str, peer: &str) -> Option<&str> {
        if self.links.is_empty() || peer.is_empty() {
            return None;
        }
        self.links
            .get(peer)
            .or_else(|| self.links.get(&format!("{channel}:{peer}")))
            .map(String::as_str)
    }
}

/// An id as written inside a session key: `%` as `%25` and the separator `:` as `%3a`, all
/// else unchanged (see the module's rules). Borrowed when there is nothing to escape.
pub(crate) fn key_part(id: &str) -> std::borrow::Cow<'_, str> {
    if !id.contains([':', '%']) {
        return std::borrow::Cow::Borrowed(id);
    }
    let mut out = String::with_capacity(id.len() + 8);
    for c in id.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3a"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The session key of `msg` for `agent_id`, with every other `[session]` setting at its
/// default (`dm_scope = "main"`, `scope = "per-sender"`, no identity links).
#[cfg(test)]
pub(crate) fn session_key(agent_id: &str, msg: &InboundMessage) -> String {
    SessionKeys::for_agent(agent_id).key(msg)
}

/// Normalises a session key given explicitly (by API clients or in URLs): trimmed and
/// lowercased, so lookups match however the client cased it.
pub fn normalize_session_key(raw: &str) -> String {
    raw.trim().to_lowercase()
}

/// The session key of an OpenAI-compatible request's `user` field. A user id is opaque, so
/// the key must tell every two ids apart although session keys are lowercased: each byte of a
/// character that lowercasing, trimming or key checks would change (upper case, white space,
/// control characters) and of `%` itself is written `%xx` (lower-case hex), everything else
/// is kept. `alice-oa` stays `alice-oa`; `CaseUser` becomes `%43ase%55ser`, apart from
/// `caseuser`. Injective, and unchanged by [`normalize_session_key`].
pub(crate) fn user_session_key(user: &str) -> String {
    let mut out = String::with_capacity(user.len());
    for c in user.chars() {
        let keep = c != '%'
            && !c.is_whitespace()
            && !c.is_control()
            && c.to_lowercase().eq(std::iter::once(c));
        if keep {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
