//! Quotas (`[[quotas]]`): messages per minute and model tokens per day, per sender, chat,
//! channel account or agent. A message's most specific matching rule applies (sender before
//! chat before account before agent; an exact id before `"*"`), counted per subject (that
//! rule's kind and the message's id of that kind).
//!
//! Admission asks [`Quotas::check`] before it queues a message and [`Quotas::take`] once it
//! is queued; a message over its quota is never queued (the runtime answers it with the rule's
//! notice at most once per window, or drops it). The delivery stage adds each turn's model
//! tokens with [`Quotas::charge_tokens`]; a subject over its tokens for the day is refused at
//! admission, so no model call is made for it. Usage lives in the store (`store/quotas.rs`),
//! so it survives a restart; a bounded LRU cache keeps recent subjects in memory.
//!
//! Each node counts what it admits: in a cluster a subject's messages count on the node that
//! owns their session's partition.

mod usage;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use lru::LruCache;
use serde::Serialize;

use crate::config::{OverQuota, QuotaKind, QuotaRule};
use crate::error::StoreError;
use crate::inbound::session_key::{channel_name, peer_id};
use crate::inbound::InboundMessage;
use crate::store::Store;
pub(crate) use usage::QuotaUsage;
use usage::{Limits, Over};

/// Subjects whose usage is kept in memory (the rest are read from the store when they come
/// back).
pub(crate) const MAX_CACHED_SUBJECTS: usize = 65_536;
/// Subjects listed as top offenders in `/v1/stats` and `/metrics` (bounds the metric's
/// cardinality).
pub(crate) const MAX_TOP_OFFENDERS: usize = 10;

/// A rule ready to match.
#[derive(Debug)]
struct Compiled {
    kind: QuotaKind,
    /// `None` for `"*"`.
    id: Option<String>,
    /// The channel of a `channel:id` entry.
    channel: Option<String>,
    limits: Limits,
    over: OverQuota,
    notice: Arc<str>,
}

impl Compiled {
    fn new(rule: &QuotaRule) -> Option<Self> {
        let (kind, raw) = rule.matches.only().ok()?;
        let raw = raw.trim();
        let (channel, id) = match (raw, kind) {
            ("*", _) => (None, None),
            (_, QuotaKind::Agent) => (None, Some(raw.to_lowercase())),
            _ => match raw.split_once(':') {
                Some((c, id)) => {
                    let c = channel_name(c);
                    let id = normalize(kind, &c, id);
                    (Some(c), Some(id))
                }
                None => (None, Some(normalize(kind, "", raw))),
            },
        };
        Some(Self {
            kind,
            id,
            channel,
            limits: Limits {
                per_minute: rule.messages_per_minute,
                burst: rule.burst.or(rule.messages_per_minute).unwrap_or(0),
                tokens_per_day: rule.tokens_per_day,
            },
            over: rule.over,
            notice: Arc::from(rule.notice.as_str()),
        })
    }

    /// Whether it applies to `value` of `channel`.
    fn matches(&self, channel: &str, value: &str) -> bool {
        match (&self.id, &self.channel) {
            (None, _) => true,
            (Some(id), Some(c)) => c == channel && id == value,
            (Some(id), None) => id == value,
        }
    }
}

/// An id of `kind` as subjects and rules compare it.
fn normalize(kind: QuotaKind, channel: &str, raw: &str) -> String {
    match kind {
        QuotaKind::Sender => peer_id(channel, raw),
        _ => raw.trim().to_lowercase(),
    }
}

/// The agent id of a session key (`agent:<id>:…`); `main` for a key of another shape.
pub(crate) fn agent_of(session_key: &str) -> &str {
    session_key
        .strip_prefix("agent:")
        .and_then(|rest| rest.split(':').next())
        .filter(|id| !id.is_empty())
        .unwrap_or("main")
}

/// Which rule applies to a message, and the subject it counts under.
struct Applies<'a> {
    rule: &'a Compiled,
    subject: String,
}

/// A message refused over its quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OverQuotaRefusal {
    /// The subject counted (`sender:<channel>:<id>`, …).
    pub(crate) subject: String,
    /// `messages` or `tokens`.
    pub(crate) limit: &'static str,
    /// The notice to send, when this refusal is the first of its window and the rule sends
    /// one.
    pub(crate) notice: Option<Arc<str>>,
}

/// What `/v1/stats` shows of quotas.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct QuotaStats {
    /// Rules configured.
    pub(crate) rules: usize,
    /// Messages refused over a message quota since start.
    pub(crate) refused_messages: u64,
    /// Messages refused over a token quota since start.
    pub(crate) refused_tokens: u64,
    /// The subjects refused most since start, most first (at most [`MAX_TOP_OFFENDERS`]).
    pub(crate) top: Vec<Offender>,
}

/// A subject and its refusals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Offender {
    /// The subject.
    pub(crate) subject: String,
    /// Its messages refused (stored count, since its last reset).
    pub(crate) refused: u64,
}

/// Counters since start.
#[derive(Debug, Default)]
struct Counters {
    refused_messages: u64,
    refused_tokens: u64,
    /// At most [`MAX_TOP_OFFENDERS`] subjects.
    top: HashMap<String, u64>,
}

impl Counters {
    fn note(&mut self, subject: &str, refused: u64) {
        if let Some(n) = self.top.get_mut(subject) {
            *n = refused;
            return;
        }
        if self.top.len() < MAX_TOP_OFFENDERS {
            self.top.insert(subject.to_string(), refused);
            return;
        }
        let least = self
            .top
            .iter()
            .min_by_key(|(_, n)| **n)
            .map(|(s, n)| (s.clone(), *n));
        if let Some((least, n)) = least {
            if refused > n {
                self.top.remove(&least);
                self.top.insert(subject.to_string(), refused);
            }
        }
    }
}

/// `rules` ready to match (validated with the config; one that is not is skipped).
fn compile(rules: &[QuotaRule]) -> Vec<Compiled> {
    rules.iter().filter_map(Compiled::new).collect()
}

/// The node's quotas: the rules and the usage they count.
pub(crate) struct Quotas {
    /// The rules in force, swapped whole by a config reload ([`Quotas::set_rules`]); a
    /// message is matched against one snapshot.
    rules: RwLock<Arc<Vec<Compiled>>>,
    store: Store,
    cache: Mutex<LruCache<String, QuotaUsage>>,
    counters: Mutex<Counters>,
}

impl std::fmt::Debug for Quotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quotas")
            .field("rules", &self.rules().len())
            .finish()
    }
}

impl Quotas {
    /// Quotas of `rules` (validated with the config), counted in `store`.
    pub(crate) fn new(rules: &[QuotaRule], store: Store) -> Self {
        Self {
            rules: RwLock::new(Arc::new(compile(rules))),
            store,
            cache: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_CACHED_SUBJECTS).unwrap_or(NonZeroUsize::MIN),
            )),
            counters: Mutex::new(Counters::default()),
        }
    }

    /// Replaces the rules (a config reload). Usage is kept: it is counted per subject, so a
    /// subject's bucket and tokens carry over to its new rule.
    pub(crate) fn set_rules(&self, rules: &[QuotaRule]) {
        let compiled = Arc::new(compile(rules));
        *self.rules.write().unwrap_or_else(PoisonError::into_inner) = compiled;
    }

    /// The rules in force.
    fn rules(&self) -> Arc<Vec<Compiled>> {
        Arc::clone(&self.rules.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether any rule is configured (none: every call is a no-op).
    pub(crate) fn is_empty(&self) -> bool {
        self.rules().is_empty()
    }

    /// The most specific of `rules` for `msg` in session `session_key`.
    fn applies<'a>(
        rules: &'a [Compiled],
        msg: &InboundMessage,
        session_key: &str,
    ) -> Option<Applies<'a>> {
        let channel = channel_name(&msg.channel);
        rules
            .iter()
            .filter_map(|rule| {
                let (scope, value) = match rule.kind {
                    QuotaKind::Sender => (channel.as_str(), peer_id(&channel, &msg.sender.id)),
                    QuotaKind::Chat => (channel.as_str(), normalize(rule.kind, "", &msg.chat_id)),
                    QuotaKind::Account => {
                        (channel.as_str(), normalize(rule.kind, "", &msg.account_id))
                    }
                    QuotaKind::Agent => ("", agent_of(session_key).to_lowercase()),
                };
                rule.matches(scope, &value).then(|| {
                    let subject = match rule.kind {
                        QuotaKind::Agent => format!("agent:{value}"),
                        kind => format!("{}:{scope}:{value}", kind.as_str()),
                    };
                    Applies { rule, subject }
                })
            })
            .min_by_key(|a| (a.rule.kind, a.rule.id.is_none()))
    }

    fn load(&self, subject: &str) -> Result<QuotaUsage, StoreError> {
        if let Some(u) = self.lock_cache().get(subject) {
            return Ok(u.clone());
        }
        Ok(self.store.quota_usage(subject)?.unwrap_or_default())
    }

    fn save(&self, subject: &str, usage: QuotaUsage) -> Result<(), StoreError> {
        self.store.put_quota_usage(subject, &usage)?;
        self.lock_cache().put(subject.to_string(), usage);
        Ok(())
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, LruCache<String, QuotaUsage>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks `msg` (for session `session_key`) against its rule at `now_ms`. Over: the
    /// refusal is counted and stored, and says whether to send the notice. Nothing is taken
    /// from the bucket: [`Quotas::take`] does, once the message is queued.
    pub(crate) fn check(
        &self,
        msg: &InboundMessage,
        session_key: &str,
        now_ms: u64,
    ) -> Result<Result<(), OverQuotaRefusal>, StoreError> {
        let rules = self.rules();
        let Some(a) = Self::applies(&rules, msg, session_key) else {
            return Ok(Ok(()));
        };
        let mut usage = self.load(&a.subject)?;
        let Some(over) = usage.over(&a.rule.limits, now_ms) else {
            return Ok(Ok(()));
        };
        let due = usage.refuse(over, now_ms);
        let refused = usage.messages_over;
        self.save(&a.subject, usage)?;
        {
            let mut c = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
            match over {
                Over::Messages => c.refused_messages += 1,
                Over::Tokens => c.refused_tokens += 1,
            }
            c.note(&a.subject, refused);
        }
        crate::metrics::quota_refused(over.as_str());
        Ok(Err(OverQuotaRefusal {
            subject: a.subject,
            limit: over.as_str(),
            notice: (due && a.rule.over == OverQuota::Notice).then(|| Arc::clone(&a.rule.notice)),
        }))
    }

    /// Takes one message of `msg`'s quota (it was queued).
    pub(crate) fn take(
        &self,
        msg: &InboundMessage,
        session_key: &str,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let rules = self.rules();
        let Some(a) = Self::applies(&rules, msg, session_key) else {
            return Ok(());
        };
        if a.rule.limits.per_minute.is_none() {
            return Ok(());
        }
        let mut usage = self.load(&a.subject)?;
        usage.take_message(&a.rule.limits, now_ms);
        self.save(&a.subject, usage)
    }

    /// Adds the model tokens of a turn that answered `msg` (in session `session_key`).
    pub(crate) fn charge_tokens(
        &self,
        msg: &InboundMessage,
        session_key: &str,
        tokens: u64,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let rules = self.rules();
        let Some(a) = Self::applies(&rules, msg, session_key) else {
            return Ok(());
        };
        if a.rule.limits.tokens_per_day.is_none() || tokens == 0 {
            return Ok(());
        }
        let mut usage = self.load(&a.subject)?;
        usage.add_tokens(tokens, now_ms);
        self.save(&a.subject, usage)
    }

    /// The stored usage of `subject`.
    pub(crate) fn usage(&self, subject: &str) -> Result<Option<QuotaUsage>, StoreError> {
        if let Some(u) = self.lock_cache().get(subject) {
            return Ok(Some(u.clone()));
        }
        self.store.quota_usage(subject)
    }

    /// Forgets `subject`'s usage (its quotas start afresh); true when it had any.
    pub(crate) fn reset(&self, subject: &str) -> Result<bool, StoreError> {
        self.lock_cache().pop(subject);
        self.counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .top
            .remove(subject);
        self.store.remove_quota_usage(subject)
    }

    /// What `/v1/stats` shows.
    pub(crate) fn stats(&self) -> QuotaStats {
        let c = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        let mut top: Vec<Offender> = c
            .top
            .iter()
            .map(|(subject, refused)| Offender {
                subject: subject.clone(),
                refused: *refused,
            })
            .collect();
        top.sort_by(|a, b| b.refused.cmp(&a.refused).then(a.subject.cmp(&b.subject)));
        QuotaStats {
            rules: self.rules().len(),
            refused_messages: c.refused_messages,
            refused_tokens: c.refused_tokens,
            top,
        }
    }
}

#[cfg(test)]
mod tests;
