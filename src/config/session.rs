//! `[session]`: how messages map to session keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

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

impl SessionConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        crate::inbound::identity_links(&self.identity_links).map(drop)
    }
}
