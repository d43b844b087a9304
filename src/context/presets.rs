//! Pruning policy per chat kind: message-count limit, token limit and TTL decay rules, with the
//! built-in presets `assistant`, `support` and `group` (SPEC §4).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::inbound::ChatKind;

/// How much of an age band a TTL rule keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every message in the band.
    All,
    /// Only the newest `n` messages of the band.
    Count(u32),
    /// None in context; the span is marked for the compactor to summarise.
    Summary,
    /// None.
    None,
}

/// One TTL decay rule: messages younger than `age` (and older than the previous rule's age)
/// are kept per `keep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TtlRuleRepr", into = "TtlRuleRepr")]
pub struct TtlRule {
    /// Upper bound of the band's age in ms; `u64::MAX` is `inf`.
    pub age_ms: u64,
    /// What the band keeps.
    pub keep: Keep,
}

impl TtlRule {
    /// A rule for messages up to `age` old (`None`: any age).
    pub fn new(age: Option<Duration>, keep: Keep) -> Self {
        let age_ms = age.map_or(u64::MAX, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
        });
        Self { age_ms, keep }
    }
}

/// The TOML form of a rule: `{ age = "30m", keep = "all" }`, `keep` being `"all"`, `"none"`,
/// `"summary"` or a count; `age` a duration (`"90s"`, `"30m"`, `"4h"`, `"1d"`) or `"inf"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TtlRuleRepr {
    age: String,
    keep: KeepRepr,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum KeepRepr {
    Count(u32),
    Word(String),
}

/// A `ttl` rule that does not parse.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TtlRuleError {
    /// The age is neither a duration nor infinite.
    #[error("ttl age {text:?}: {source}")]
    Age {
        /// The age as written.
        text: String,
        /// Why it is not a duration.
        source: humantime::DurationError,
    },
    /// The keep word is none of the known ones.
    #[error("ttl keep {0:?}: expected \"all\", \"none\", \"summary\" or a count")]
    Keep(String),
}

/// A preset that cannot be resolved, or resolves to an unusable policy.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PresetError {
    /// The built-in `assistant` preset, the base of configured ones, is missing.
    #[error("missing assistant preset")]
    MissingAssistant,
    /// Neither built in nor configured.
    #[error("unknown preset {0:?}")]
    Unknown(String),
    /// `max_messages = 0`.
    #[error("preset {0:?}: max_messages must be at least 1")]
    NoMessages(String),
    /// `max_tokens = 0`.
    #[error("preset {0:?}: max_tokens must be at least 1")]
    NoTokens(String),
    /// TTL rules out of order.
    #[error("preset {0:?}: ttl rules must have strictly ascending ages")]
    TtlOrder(String),
}

impl TryFrom<TtlRuleRepr> for TtlRule {
    type Error = TtlRuleError;

    fn try_from(r: TtlRuleRepr) -> Result<Self, TtlRuleError> {
        let age_ms = match r.age.trim() {
            "inf" | "infinite" | "∞" => u64::MAX,
            text => {
                let d = humantime::parse_duration(text).map_err(|source| TtlRuleError::Age {
                    text: text.to_string(),
                    source,
                })?;
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            }
        };
        let keep = match r.keep {
            KeepRepr::Count(n) => Keep::Count(n),
            KeepRepr::Word(w) => match w.as_str() {
                "all" => Keep::All,
                "none" => Keep::None,
                "summary" => Keep::Summary,
                other => return Err(TtlRuleError::Keep(other.to_string())),
            },
        };
        Ok(TtlRule { age_ms, keep })
    }
}

impl From<TtlRule> for TtlRuleRepr {
    fn from(r: TtlRule) -> Self {
        let age = if r.age_ms == u64::MAX {
            "inf".to_string()
        } else {
            humantime::format_duration(Duration::from_millis(r.age_ms)).to_string()
        };
        let keep = match r.keep {
            Keep::All => KeepRepr::Word("all".into()),
            Keep::None => KeepRepr::Word("none".into()),
            Keep::Summary => KeepRepr::Word("summary".into()),
            Keep::Count(n) => KeepRepr::Count(n),
        };
        TtlRuleRepr { age, keep }
    }
}

/// The pruning policy of one chat kind, resolved from a preset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatPolicy {
    /// The preset's name.
    pub preset: String,
    /// Most conversation messages in context.
    pub max_messages: usize,
    /// Most tokens the context may use (further capped by `context.max_tokens` and the model's
    /// window).
    pub max_tokens: u32,
    /// TTL decay rules, ages ascending.
    #[serde(skip)]
    pub ttl: Vec<TtlRule>,
}

impl ChatPolicy {
    /// Age beyond which every conversation message is dropped (all later bands keep nothing),
    /// if there is such an age. History is not read past it.
    pub fn ttl_horizon_ms(&self) -> Option<u64> {
        let last = self.ttl.last()?;
        if last.age_ms != u64::MAX || last.keep != Keep::None {
            return None;
        }
        let keeping = self.ttl.iter().rposition(|r| r.keep != Keep::None);
        Some(keeping.map_or(0, |i| self.ttl[i].age_ms))
    }
}

fn minutes(n: u64) -> Option<Duration> {
    Some(Duration::from_secs(n * 60))
}

/// A built-in preset by name: `assistant` (100 messages, 32,000 tokens, 30m all / 4h 30 /
/// 24h summary / older none), `support` (30, 8,000, 10m all / 1h 10 / none) and `group` (15,
/// 4,000, 5m all / 30m 5 / none).
pub(crate) fn builtin_preset(name: &str) -> Option<ChatPolicy> {
    let (max_messages, max_tokens, ttl) = match name {
        "assistant" => (
            100,
            32_000,
            vec![
                TtlRule::new(minutes(30), Keep::All),
                TtlRule::new(minutes(240), Keep::Count(30)),
                TtlRule::new(minutes(24 * 60), Keep::Summary),
                TtlRule::new(None, Keep::None),
            ],
        ),
        "support" => (
            30,
            8_000,
            vec![
                TtlRule::new(minutes(10), Keep::All),
                TtlRule::new(minutes(60), Keep::Count(10)),
                TtlRule::new(None, Keep::None),
            ],
        ),
        "group" => (
            15,
            4_000,
            vec![
                TtlRule::new(minutes(5), Keep::All),
                TtlRule::new(minutes(30), Keep::Count(5)),
                TtlRule::new(None, Keep::None),
            ],
        ),
        _ => return None,
    };
    Some(ChatPolicy {
        preset: name.to_string(),
        max_messages,
        max_tokens,
        ttl,
    })
}

/// `[context.presets.<name>]`: a preset defined or overridden in the config. Unset keys take
/// the built-in preset of the same name, or `assistant`'s for a new name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PresetConfig {
    /// Most conversation messages in context.
    pub max_messages: Option<usize>,
    /// Most tokens the context may use.
    pub max_tokens: Option<u32>,
    /// TTL decay rules, ages ascending, e.g.
    /// `[{ age = "5m", keep = "all" }, { age = "30m", keep = 5 }, { age = "inf", keep = "none" }]`.
    pub ttl: Option<Vec<TtlRule>>,
}

/// `[context.chat_kinds]`: the preset each chat kind uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChatKindPresets {
    /// Direct messages. Default `assistant`.
    pub direct: String,
    /// Group chats. Default `group`.
    pub group: String,
    /// Broadcast channels. Default `group`.
    pub channel: String,
}

impl Default for ChatKindPresets {
    fn default() -> Self {
        Self {
            direct: "assistant".into(),
            group: "group".into(),
            channel: "group".into(),
        }
    }
}

/// Resolves preset `name` against the configured overrides.
pub(crate) fn resolve_preset(
    name: &str,
    configured: &BTreeMap<String, PresetConfig>,
) -> Result<ChatPolicy, PresetError> {
    let over = configured.get(name);
    let base = match (builtin_preset(name), over) {
        (Some(b), _) => b,
        (None, Some(_)) => builtin_preset("assistant").ok_or(PresetError::MissingAssistant)?,
        (None, None) => return Err(PresetError::Unknown(name.to_string())),
    };
    let mut policy = ChatPolicy {
        preset: name.to_string(),
        ..base
    };
    if let Some(o) = over {
        if let Some(m) = o.max_messages {
            policy.max_messages = m;
        }
        if let Some(t) = o.max_tokens {
            policy.max_tokens = t;
        }
        if let Some(ttl) = &o.ttl {
            policy.ttl = ttl.clone();
        }
    }
    if policy.max_messages == 0 {
        return Err(PresetError::NoMessages(name.to_string()));
    }
    if policy.max_tokens == 0 {
        return Err(PresetError::NoTokens(name.to_string()));
    }
    if policy.ttl.windows(2).any(|w| w[0].age_ms >= w[1].age_ms) {
        return Err(PresetError::TtlOrder(name.to_string()));
    }
    Ok(policy)
}

/// The policy for chats of `kind`.
pub(crate) fn policy_for(
    kind: ChatKind,
    chat_kinds: &ChatKindPresets,
    configured: &BTreeMap<String, PresetConfig>,
) -> Result<ChatPolicy, PresetError> {
    let name = match kind {
        ChatKind::Direct => &chat_kinds.direct,
        ChatKind::Group => &chat_kinds.group,
        ChatKind::Channel => &chat_kinds.channel,
    };
    resolve_preset(name, configured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_spec() {
        let a = builtin_preset("assistant").unwrap();
        assert_eq!((a.max_messages, a.max_tokens), (100, 32_000));
        assert_eq!(a.ttl[1], TtlRule::new(minutes(240), Keep::Count(30)));
        assert_eq!(a.ttl[2].keep, Keep::Summary);
        // Past 24h nothing is kept.
        assert_eq!(a.ttl_horizon_ms(), Some(24 * 3_600_000));
        let g = builtin_preset("group").unwrap();
        assert_eq!((g.max_messages, g.max_tokens), (15, 4_000));
        assert_eq!(g.ttl_horizon_ms(), Some(30 * 60_000));
        let s = builtin_preset("support").unwrap();
        assert_eq!((s.max_messages, s.max_tokens), (30, 8_000));
        assert!(builtin_preset("nope").is_none());
    }

    #[test]
    fn ttl_rules_parse_from_toml() {
        #[derive(Serialize, Deserialize)]
        struct T {
            ttl: Vec<TtlRule>,
        }
        let t: T = toml::from_str(
            r#"ttl = [{ age = "5m", keep = "all" }, { age = "30m", keep = 5 },
                      { age = "1d", keep = "summary" }, { age = "inf", keep = "none" }]"#,
        )
        .unwrap();
        assert_eq!(t.ttl[0], TtlRule::new(minutes(5), Keep::All));
        assert_eq!(t.ttl[1].keep, Keep::Count(5));
        assert_eq!(t.ttl[2].age_ms, 86_400_000);
        assert_eq!(t.ttl[3].age_ms, u64::MAX);
        assert!(toml::from_str::<T>(r#"ttl = [{ age = "5m", keep = "some" }]"#).is_err());
        assert!(toml::from_str::<T>(r#"ttl = [{ age = "soon", keep = "all" }]"#).is_err());
        // Round trip through the TOML form.
        let back: T = toml::from_str(&toml::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.ttl, t.ttl);
    }

    #[test]
    fn overrides_and_chat_kinds() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "group".to_string(),
            PresetConfig {
                max_messages: Some(7),
                ..PresetConfig::default()
            },
        );
        configured.insert("tiny".to_string(), PresetConfig::default());
        let kinds = ChatKindPresets::default();
        let g = policy_for(ChatKind::Channel, &kinds, &configured).unwrap();
        assert_eq!(
            (g.preset.as_str(), g.max_messages, g.max_tokens),
            ("group", 7, 4_000)
        );
        let d = policy_for(ChatKind::Direct, &kinds, &configured).unwrap();
        assert_eq!(d.preset, "assistant");
        let tiny = resolve_preset("tiny", &configured).unwrap();
        assert_eq!(tiny.max_messages, 100);
        assert!(resolve_preset("unknown", &configured).is_err());
        configured.insert(
            "bad".to_string(),
            PresetConfig {
                ttl: Some(vec![
                    TtlRule::new(minutes(30), Keep::All),
                    TtlRule::new(minutes(5), Keep::All),
                ]),
                ..PresetConfig::default()
            },
        );
        assert!(resolve_preset("bad", &configured).is_err());
    }
}
