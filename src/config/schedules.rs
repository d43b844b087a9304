//! `[[schedules]]`: turns run on a cron expression or an interval (see `src/schedules/`). The
//! same shape is what `POST /v1/schedules` takes.

use serde::{Deserialize, Serialize};

use super::{invalid, Config, MAX_DURATION_MS};
use crate::error::ConfigError;

/// Most schedules, from the config and the API together: each is kept in memory and its next
/// due time looked at on every tick of the scheduler.
pub const MAX_SCHEDULES: usize = 1_000;
/// Longest schedule id, in characters.
pub(crate) const MAX_SCHEDULE_ID_CHARS: usize = 64;
/// Longest `message`, in characters.
pub(crate) const MAX_SCHEDULE_MESSAGE_CHARS: usize = 8_000;
/// Shortest `every_ms`: a schedule is for standing work, not a busy loop.
pub(crate) const MIN_EVERY_MS: u64 = 1_000;

/// What a run that was due while the server was down does at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Runs once, however many times it was due (the default).
    #[default]
    RunOnce,
    /// Is recorded as skipped; the job waits for its next due time.
    Skip,
}

/// One scheduled job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// Its id: 1-64 characters of a-z, 0-9, `_` and `-` (in message ids and URLs).
    pub id: String,
    /// A five-field cron expression (`30 9 * * mon-fri`) or a macro (`@daily`); or `every_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// An interval in ms (at least 1,000), counted from when the job was first stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// The IANA time zone of `cron`. Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The agent whose turn it is. Default the default agent (`[session] agent_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The session the turn runs in (its reply goes where that session's replies go).
    /// Default an isolated session of its own, `agent:<agent>:schedule:<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// What the turn is asked. Required, except for a heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `run_once` (default) or `skip`.
    #[serde(default)]
    pub missed: Missed,
    /// A heartbeat: the agent workspace's `HEARTBEAT.md` is its standing instructions, and
    /// an answer of `HEARTBEAT_OK` (nothing to report) is not delivered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub heartbeat: bool,
}

impl ScheduleConfig {
    /// Checks the job against `config` (its agent must exist); the error names the key.
    pub fn check(&self, config: &Config) -> Result<(), ConfigError> {
        let key = format!("schedules.{}", self.id);
        if self.id.is_empty()
            || self.id.chars().count() > MAX_SCHEDULE_ID_CHARS
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        {
            return Err(invalid(
                "schedules.id",
                format!(
                    "{:?}: an id is 1-{MAX_SCHEDULE_ID_CHARS} characters of a-z, 0-9, _ and -",
                    self.id
                ),
            ));
        }
        match (&self.cron, self.every_ms) {
            (Some(cron), None) => {
                crate::schedules::Cron::parse(cron)
                    .map_err(|e| invalid(&format!("{key}.cron"), e))?;
            }
            (None, Some(ms)) => {
                if !(MIN_EVERY_MS..=MAX_DURATION_MS).contains(&ms) {
                    return Err(invalid(
                        &format!("{key}.every_ms"),
                        format!("{ms} is outside {MIN_EVERY_MS}..={MAX_DURATION_MS}"),
                    ));
                }
            }
            _ => {
                return Err(invalid(
                    &key,
                    "give exactly one of cron (an expression) and every_ms (an interval)",
                ))
            }
        }
        if let Some(zone) = &self.time_zone {
            crate::context::sources::time_zone(zone)
                .map_err(|e| invalid(&format!("{key}.time_zone"), e))?;
        }
        if let Some(agent) = &self.agent {
            let id = crate::inbound::normalize_agent_id(agent);
            if id != super::agents::default_agent_id(config) && !config.agents.contains_key(&id) {
                return Err(invalid(
                    &format!("{key}.agent"),
                    format!("no agent {agent:?} (configure it under [agents.{id}])"),
                ));
            }
        }
        if let Some(session) = &self.session_key {
            crate::inbound::check_session_key(session)
                .map_err(|e| invalid(&format!("{key}.session_key"), e))?;
        }
        match &self.message {
            Some(m) if m.chars().count() > MAX_SCHEDULE_MESSAGE_CHARS => Err(invalid(
                &format!("{key}.message"),
                format!("at most {MAX_SCHEDULE_MESSAGE_CHARS} characters"),
            )),
            Some(m) if m.trim().is_empty() => Err(invalid(&format!("{key}.message"), "empty")),
            None if !self.heartbeat => Err(invalid(
                &format!("{key}.message"),
                "what the turn is asked (only a heartbeat may leave it out)",
            )),
            _ => Ok(()),
        }
    }
}

/// Checks every `[[schedules]]` entry, and that ids are unique.
pub(super) fn validate(config: &Config) -> Result<(), ConfigError> {
    if config.schedules.len() > MAX_SCHEDULES {
        return Err(invalid(
            "schedules",
            format!("at most {MAX_SCHEDULES} schedules"),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in &config.schedules {
        s.check(config)?;
        if !seen.insert(s.id.as_str()) {
            return Err(invalid(
                "schedules.id",
                format!("{:?} is given twice", s.id),
            ));
        }
    }
    Ok(())
}
