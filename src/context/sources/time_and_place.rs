//! `time_and_place`: one line telling the model when and where it is talking — the current
//! date and time (UTC and `context.time_zone`, to the minute), the channel and the chat kind:
//!
//! `Current time: 2026-12-01 09:45 UTC (Europe/Berlin: 2026-12-01 10:45 CET, Tuesday).
//! Channel: telegram, group chat.`
//!
//! Without it the model cannot answer "what day is it" or place "tomorrow at 9". The block is
//! placed at the end of the system message ([`Placement::SystemEnd`]), after the stable prefix,
//! so the prefix stays byte-identical between turns; its fingerprint changes every minute, so
//! the assembly cache never serves a stale time. The clock is the view's `now_ms`, not the
//! wall clock (assembly stays deterministic).
//!
//! [`Placement::SystemEnd`]: crate::context::Placement::SystemEnd

use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::Deserialize;

use crate::context::{
    BlockKind, ContextBlock, ContextError, ContextSource, SessionView, StageContext, StageError,
    TokenBudget,
};
use crate::inbound::ChatKind;
use crate::model::MESSAGE_OVERHEAD_TOKENS;

/// The resolution of the clock shown, in ms: the text (and so the fingerprint) changes once a
/// minute, not on every assembly.
const MINUTE_MS: u64 = 60_000;

/// Longest channel name shown; channel names are short platform names (`telegram`).
const MAX_CHANNEL_CHARS: usize = 32;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

/// Resolves an IANA time zone name (the system's zoneinfo first, else the copy bundled into
/// the binary, so a machine without `/usr/share/zoneinfo` works too).
pub(crate) fn time_zone(name: &str) -> Result<TimeZone, TimeZoneError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(TimeZoneError::Empty);
    }
    TimeZone::get(name).map_err(|source| TimeZoneError::Unknown {
        name: name.to_string(),
        source,
    })
}

/// A `context.time_zone` that names no time zone.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TimeZoneError {
    /// Blank.
    #[error("must name an IANA time zone, e.g. \"UTC\" or \"Europe/Berlin\"")]
    Empty,
    /// Not in the system's zoneinfo nor the bundled copy.
    #[error("unknown time zone {name:?}: {source}")]
    Unknown {
        /// The name as given, trimmed.
        name: String,
        /// What the time zone database said.
        source: jiff::Error,
    },
}

pub(super) struct TimeAndPlaceSource {
    zone: TimeZone,
    /// The zone's name as shown (the database's spelling when it has one).
    zone_name: String,
    /// The lines of the current minute: every turn of a minute in the same channel and chat
    /// kind gets the same line, and formatting it in two time zones was most of this source's
    /// cost. At most [`MAX_MEMO_LINES`]; cleared when the minute changes.
    memo: std::sync::Mutex<Memo>,
}

/// Most lines remembered for one minute (one per channel and chat kind seen in it).
const MAX_MEMO_LINES: usize = 64;

#[derive(Default)]
struct Memo {
    minute: u64,
    lines: foldhash::HashMap<(Option<String>, ChatKind), String>,
}

impl TimeAndPlaceSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        let configured = &c.config.context.time_zone;
        let zone = time_zone(configured).map_err(|e| format!("context.time_zone: {e}"))?;
        let zone_name = zone.iana_name().unwrap_or(configured.trim()).to_string();
        Ok(Self {
            zone,
            zone_name,
            memo: std::sync::Mutex::new(Memo::default()),
        })
    }

    /// The line for `now_ms` in chat `channel` (if known) of `kind`; `None` for an instant
    /// outside what the calendar can show (never for a real clock).
    fn render(&self, now_ms: u64, channel: Option<&str>, kind: ChatKind) -> Option<String> {
        let minute = now_ms - now_ms % MINUTE_MS;
        let at = Timestamp::from_millisecond(i64::try_from(minute).ok()?).ok()?;
        let format = |zone: TimeZone, pattern: &str| {
            jiff::fmt::strtime::format(pattern, &at.to_zoned_datetime(zone)).ok()
        };
        let utc = format(TimeZone::UTC, "%Y-%m-%d %H:%M UTC")?;
        let local = if self.zone_name.eq_ignore_ascii_case("UTC") {
            format(TimeZone::UTC, "%A")?
        } else {
            let local = format(self.zone.clone(), "%Y-%m-%d %H:%M %Z, %A")?;
            format!("{}: {local}", self.zone_name)
        };
        let kind = match kind {
            ChatKind::Direct => "direct chat",
            ChatKind::Group => "group chat",
            ChatKind::Channel => "broadcast channel",
        };
        let place = match channel {
            Some(channel) => format!("Channel: {channel}, {kind}."),
            None => format!("Chat: {kind}."),
        };
        Some(format!("Current time: {utc} ({local}). {place}"))
    }
}

/// A channel name fit for the system message: lowercase ASCII letters, digits, `_`, `-` and
/// `.` only (channel names come from API clients too), at most [`MAX_CHANNEL_CHARS`]; `None`
/// when nothing is left.
fn clean_channel(raw: &str) -> Option<String> {
    let clean: String = raw
        .trim()
        .chars()
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(MAX_CHANNEL_CHARS)
        .collect();
    (!clean.is_empty()).then_some(clean)
}

/// The channel a session key names: `agent:<agent>:<channel>:<group|channel>:<id>…` and the
/// per-channel direct scopes (`agent:<agent>:<channel>[:<account>]:direct:<peer>`); `None` for
/// keys without one (`agent:<agent>:main`, `agent:<agent>:direct:<peer>`, `global`).
fn channel_of_key(key: &str) -> Option<&str> {
    let mut parts = key.split(':');
    if parts.next() != Some("agent") {
        return None;
    }
    let channel = parts.nth(1)?;
    let is_kind = |s: &str| matches!(s, "direct" | "group" | "channel");
    if is_kind(channel) || channel == "main" {
        return None;
    }
    let mut after = parts.take(2);
    after.any(is_kind).then_some(channel)
}

impl ContextSource for TimeAndPlaceSource {
    fn name(&self) -> &str {
        "time_and_place"
    }

    /// Below the stable prefix's sources, above everything else: a few tokens the model needs
    /// to read any date or time right.
    fn default_priority(&self) -> u8 {
        88
    }

    /// The minute shown: a cached assembly from an earlier minute is stale.
    fn fingerprint(&self, session: &SessionView<'_>) -> u64 {
        session.now_ms / MINUTE_MS
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        _budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let channel = match session.current.first() {
            Some(c) => clean_channel(&c.record.message.channel),
            None => channel_of_key(session.key).and_then(clean_channel),
        };
        let minute = session.now_ms / MINUTE_MS;
        let key = (channel, session.chat_kind);
        // A poisoned memo holds only complete lines: keep using it.
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if memo.minute != minute || memo.lines.len() >= MAX_MEMO_LINES {
            memo.minute = minute;
            memo.lines.clear();
        }
        let text = match memo.lines.get(&key) {
            Some(text) => text.clone(),
            None => {
                let Some(text) = self.render(session.now_ms, key.0.as_deref(), session.chat_kind)
                else {
                    tracing::debug!(now_ms = session.now_ms, "no calendar time for this instant");
                    return Ok(Vec::new());
                };
                memo.lines.insert(key, text.clone());
                text
            }
        };
        drop(memo);
        // The same line for every turn of a minute (per channel and chat kind): memoised.
        let tokens = session.tokens.count_recurring(&text) + MESSAGE_OVERHEAD_TOKENS;
        Ok(vec![ContextBlock::new(
            BlockKind::TimeAndPlace,
            text,
            tokens,
        )])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(zone: &str) -> TimeAndPlaceSource {
        let tz = time_zone(zone).unwrap();
        TimeAndPlaceSource {
            zone_name: tz.iana_name().unwrap_or(zone).to_string(),
            zone: tz,
            memo: std::sync::Mutex::new(Memo::default()),
        }
    }

    /// ms since the epoch of a UTC wall-clock time.
    fn at(utc: &str) -> u64 {
        let ts: Timestamp = format!("{utc}:00Z").parse().unwrap();
        u64::try_from(ts.as_millisecond()).unwrap()
    }

    #[test]
    fn berlin_in_winter_and_summer() {
        let berlin = source("Europe/Berlin");
        let group = |ms| {
            berlin
                .render(ms, Some("telegram"), ChatKind::Group)
                .unwrap()
        };
        assert_eq!(
            group(at("2026-12-01T09:45")),
            "Current time: 2026-12-01 09:45 UTC (Europe/Berlin: 2026-12-01 10:45 CET, \
             Tuesday). Channel: telegram, group chat."
        );
        assert_eq!(
            group(at("2026-07-01T09:45")),
            "Current time: 2026-07-01 09:45 UTC (Europe/Berlin: 2026-07-01 11:45 CEST, \
             Wednesday). Channel: telegram, group chat."
        );
        // Around the spring-forward transition (01:00 UTC on 2026-03-29): 01:59 CET, then
        // 03:00 CEST.
        assert!(group(at("2026-03-29T00:59")).contains("2026-03-29 01:59 CET, Sunday"));
        assert!(group(at("2026-03-29T01:00")).contains("2026-03-29 03:00 CEST, Sunday"));
        // Minute resolution: seconds never show, and the local date can differ from UTC's.
        assert_eq!(
            group(at("2026-12-01T09:45") + 59_999),
            group(at("2026-12-01T09:45"))
        );
        let tokyo = source("Asia/Tokyo");
        let line = tokyo
            .render(at("2026-12-01T20:00"), None, ChatKind::Direct)
            .unwrap();
        assert_eq!(
            line,
            "Current time: 2026-12-01 20:00 UTC (Asia/Tokyo: 2026-12-02 05:00 JST, \
             Wednesday). Chat: direct chat."
        );
    }

    #[test]
    fn utc_is_shown_once() {
        let line = source("UTC")
            .render(at("2026-12-01T09:45"), Some("api"), ChatKind::Channel)
            .unwrap();
        assert_eq!(
            line,
            "Current time: 2026-12-01 09:45 UTC (Tuesday). Channel: api, broadcast channel."
        );
        // An instant no calendar shows is no block, not a panic.
        assert!(source("UTC")
            .render(u64::MAX, None, ChatKind::Direct)
            .is_none());
    }

    #[test]
    fn time_zones_are_resolved_or_refused() {
        assert!(time_zone("Europe/Berlin").is_ok());
        assert!(time_zone(" UTC ").is_ok());
        assert!(time_zone("Mars/Olympus_Mons").is_err());
        assert!(time_zone("").is_err());
        assert!(time_zone("../../../etc/passwd").is_err());
        // Names are matched without regard to case, and shown as the database spells them.
        assert!(source("utc")
            .render(at("2026-12-01T09:45"), None, ChatKind::Direct)
            .unwrap()
            .starts_with("Current time: 2026-12-01 09:45 UTC (Tuesday)."));
        assert_eq!(source("europe/berlin").zone_name, "Europe/Berlin");
        // The bundled copy is compiled in: machines without a zoneinfo directory work too.
        assert!(jiff::tz::TimeZoneDatabase::bundled()
            .get("Europe/Berlin")
            .is_ok());
    }

    #[test]
    fn channels_from_messages_and_keys() {
        assert_eq!(
            clean_channel(" Tele]gram\n; ignore"),
            Some("telegramignore".into())
        );
        assert_eq!(clean_channel("::"), None);
        assert_eq!(
            channel_of_key("agent:main:telegram:group:-100123"),
            Some("telegram")
        );
        assert_eq!(
            channel_of_key("agent:main:slack:channel:c1:thread:9"),
            Some("slack")
        );
        assert_eq!(
            channel_of_key("agent:main:discord:acct:direct:42"),
            Some("discord")
        );
        assert_eq!(
            channel_of_key("agent:main:telegram:direct:42"),
            Some("telegram")
        );
        assert_eq!(channel_of_key("agent:main:main"), None);
        assert_eq!(channel_of_key("agent:main:direct:42"), None);
        assert_eq!(channel_of_key("global"), None);
    }
}
