//! PluralKit (`[channels.discord] pluralkit = true`): a plural system's members speak
//! through PluralKit, which reposts an account's message through a webhook under the member's
//! name and deletes the original. Without this, the repost is a webhook's (a bot's) message,
//! dropped under `allow_bots = false`, and the original is answered as the account's.
//!
//! As OpenClaw's `preflightDiscordMessage` does, a webhook message is looked up in PluralKit's
//! API (`GET <pluralkit_api_base>/messages/{id}`; only webhook messages can be proxies, so
//! nobody else's message waits on PluralKit); when PluralKit knows it, the message is the
//! member's: sender id the system's id, name the member's display name (or name), not a bot;
//! the guild's `users` allowlist is checked against the account that wrote it (PluralKit's
//! `sender`). Unknown to PluralKit (404): a plain webhook message, as before. The lookup
//! failing: taken as a plain webhook message too (logged) — the original then stands (see
//! `held.rs`).
//!
//! Unlike OpenClaw, which answers whichever of the pair comes first, the original does not
//! become a turn when its proxy follows: `held.rs` holds a message of an account that has a
//! PluralKit system (`GET <base>/systems/{account}`, cached [`ACCOUNT_TTL`]; a failure pauses
//! these lookups for [`ACCOUNT_BACKOFF`], nothing held meanwhile) until its proxy names it as
//! `original` or `pluralkit_wait_ms` passes.
//!
//! Bounded: [`MAX_KNOWN_MESSAGES`] lookups and [`MAX_KNOWN_ACCOUNTS`] accounts remembered
//! (least recently used forgotten first), each request at most [`PLURALKIT_TIMEOUT`].

use std::num::NonZeroUsize;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use lru::LruCache;
use serde::Deserialize;
use twilight_model::channel::message::Message;
use twilight_model::id::Id;

use crate::inbound::InboundMessage;

/// Longest wait for one PluralKit API request.
pub(crate) const PLURALKIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Proxied messages whose lookup is remembered (a resumed or caught-up repeat is not asked
/// again).
pub(crate) const MAX_KNOWN_MESSAGES: usize = 1_000;

/// Accounts whose having a PluralKit system is remembered.
pub(crate) const MAX_KNOWN_ACCOUNTS: usize = 10_000;

/// How long an account's having a system (or not) is trusted before PluralKit is asked again.
pub(crate) const ACCOUNT_TTL: Duration = Duration::from_secs(600);

/// After a failed account lookup, how long no account is asked about (their messages are not
/// held meanwhile): while PluralKit is down, a person's message does not wait out a timeout.
pub(crate) const ACCOUNT_BACKOFF: Duration = Duration::from_secs(30);

/// A proxied message as PluralKit describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proxied {
    /// The account's message PluralKit deleted.
    pub original: Option<u64>,
    /// The account that wrote it.
    pub account: Option<u64>,
    /// The system's id (PluralKit's short id).
    pub system_id: String,
    /// The member's display name, else name.
    pub member_name: String,
}

/// `GET /messages/{id}` as read (the fields used).
#[derive(Debug, Deserialize)]
struct MessageBody {
    original: Option<String>,
    sender: Option<String>,
    system: Option<SystemBody>,
    member: Option<MemberBody>,
}

#[derive(Debug, Deserialize)]
struct SystemBody {
    id: String,
}

#[derive(Debug, Deserialize)]
struct MemberBody {
    name: Option<String>,
    display_name: Option<String>,
}

impl MessageBody {
    /// The proxy, when PluralKit names a system and a member with a name.
    fn proxied(self) -> Option<Proxied> {
        let system_id = self.system?.id.trim().to_string();
        let member = self.member?;
        let member_name = member
            .display_name
            .filter(|n| !n.trim().is_empty())
            .or(member.name)?
            .trim()
            .to_string();
        if system_id.is_empty() || member_name.is_empty() {
            return None;
        }
        Some(Proxied {
            original: self.original.and_then(|o| o.parse().ok()),
            account: self.sender.and_then(|s| s.parse().ok()),
            system_id,
            member_name,
        })
    }
}

/// PluralKit's API, with its caches.
#[derive(Debug)]
pub(crate) struct PluralKit {
    http: reqwest::Client,
    base: String,
    messages: Mutex<LruCache<u64, Option<Proxied>>>,
    accounts: Mutex<LruCache<u64, (bool, Instant)>>,
    /// No account lookups before this (after a failure).
    accounts_paused_until: Mutex<Option<Instant>>,
}

fn lru<V>(n: usize) -> Mutex<LruCache<u64, V>> {
    Mutex::new(LruCache::new(
        NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN),
    ))
}

impl PluralKit {
    /// A client of the API at `base` (`https://api.pluralkit.me/v2`).
    pub(crate) fn new(base: &str) -> Self {
        let http = reqwest::Client::builder()
            .timeout(PLURALKIT_TIMEOUT)
            .user_agent(concat!("turnstile/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Self {
            http,
            base: base.trim_end_matches('/').to_string(),
            messages: lru(MAX_KNOWN_MESSAGES),
            accounts: lru(MAX_KNOWN_ACCOUNTS),
            accounts_paused_until: Mutex::new(None),
        }
    }

    /// GETs `path`: the body on 200, `None` on 404, an error otherwise.
    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<Option<T>, String> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        match response.status().as_u16() {
            200 => response
                .json::<T>()
                .await
                .map(Some)
                .map_err(|e| e.without_url().to_string()),
            404 => Ok(None),
            status => Err(format!("HTTP {status}")),
        }
    }

    /// Who webhook message `id` was proxied for; `None` when PluralKit does not know it (a
    /// plain webhook message). Errors are not remembered.
    pub(crate) async fn message(&self, id: u64) -> Result<Option<Proxied>, String> {
        let cached = self
            .messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        if let Some(known) = cached {
            return Ok(known);
        }
        let found = self
            .get::<MessageBody>(&format!("/messages/{id}"))
            .await?
            .and_then(MessageBody::proxied);
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(id, found.clone());
        Ok(found)
    }

    /// Whether `account` has a PluralKit system (its messages may be proxied). A failed
    /// lookup counts as no (logged), and pauses account lookups for [`ACCOUNT_BACKOFF`]:
    /// messages are not held then, nothing waits on PluralKit.
    pub(crate) async fn has_system(&self, account: u64) -> bool {
        let now = Instant::now();
        let paused = self
            .accounts_paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| now < until);
        if paused {
            return false;
        }
        let cached = self
            .accounts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&account)
            .copied();
        if let Some((known, at)) = cached {
            if now.duration_since(at) < ACCOUNT_TTL {
                return known;
            }
        }
        let known = match self
            .get::<serde::de::IgnoredAny>(&format!("/systems/{account}"))
            .await
        {
            Ok(found) => found.is_some(),
            Err(error) => {
                tracing::warn!(%error, account, "cannot ask PluralKit about an account; no message is held for {} s", ACCOUNT_BACKOFF.as_secs());
                *self
                    .accounts_paused_until
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(now + ACCOUNT_BACKOFF);
                return false;
            }
        };
        self.accounts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(account, (known, now));
        known
    }
}

/// Whether `m` can be a PluralKit proxy: a guild message sent through a webhook.
pub(crate) fn may_be_proxy(m: &Message) -> bool {
    m.guild_id.is_some() && m.webhook_id.is_some()
}

/// `m` as its member wrote it, for conversion: the author is the account that wrote it (the
/// allowlists are checked against it), named as the member, not a bot.
pub(crate) fn as_written(m: &Message, p: &Proxied) -> Message {
    let mut m = m.clone();
    if let Some(account) = p.account.and_then(Id::new_checked) {
        m.author.id = account;
    }
    m.author.bot = false;
    m.author.name = p.member_name.clone();
    m.author.global_name = Some(p.member_name.clone());
    m.webhook_id = None;
    m.member = None;
    m
}

/// Attributes the converted `message` to the member: sender id the system's id.
pub(crate) fn attribute(message: &mut InboundMessage, p: &Proxied) {
    message.sender.id = p.system_id.clone();
    message.sender.name = p.member_name.clone();
    message.sender.is_bot = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_names_the_member_or_is_not_a_proxy() {
        let body: MessageBody = serde_json::from_str(
            r#"{"id":"2","original":"1","sender":"42","channel":"20",
                "system":{"id":"exmpl","name":"The Example"},
                "member":{"id":"abcde","name":"Ada","display_name":"Ada 🌸"}}"#,
        )
        .unwrap();
        assert_eq!(
            body.proxied(),
            Some(Proxied {
                original: Some(1),
                account: Some(42),
                system_id: "exmpl".into(),
                member_name: "Ada 🌸".into(),
            })
        );
        let no_display: MessageBody = serde_json::from_str(
            r#"{"system":{"id":"exmpl"},"member":{"name":"Bo","display_name":" "}}"#,
        )
        .unwrap();
        assert_eq!(no_display.proxied().unwrap().member_name, "Bo");
        let no_member: MessageBody =
            serde_json::from_str(r#"{"system":{"id":"exmpl"},"member":null}"#).unwrap();
        assert_eq!(no_member.proxied(), None);
    }
}
