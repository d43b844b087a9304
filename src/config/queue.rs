//! `[queue]`: what happens to messages that arrive while a turn runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{in_range, MAX_DURATION_MS};
use crate::error::ConfigError;

/// Largest `queue.cap`.
pub(crate) const MAX_QUEUE_CAP: usize = 100_000;

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
    pub by_channel: BTreeMap<String, QueueOverride>,
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

impl QueueConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range("queue.debounce_ms", self.debounce_ms, 0..=MAX_DURATION_MS)?;
        in_range("queue.cap", self.cap, 1..=MAX_QUEUE_CAP)?;
        for (name, over) in &self.by_channel {
            if let Some(ms) = over.debounce_ms {
                in_range(
                    &format!("queue.by_channel.{name}.debounce_ms"),
                    ms,
                    0..=MAX_DURATION_MS,
                )?;
            }
            if let Some(cap) = over.cap {
                in_range(
                    &format!("queue.by_channel.{name}.cap"),
                    cap,
                    1..=MAX_QUEUE_CAP,
                )?;
            }
        }
        Ok(())
    }
}
