//! `[agents.<id>]` and `[[bindings]]`: several agents in one process, and which inbound
//! messages each one answers.
//!
//! Without either section there is one agent, `[session] agent_id` (default `main`), answering
//! with `[context] system_prompt`, `[model]` and `[agent] workspace_dir`, exactly as before.
//! An `[agents.<id>]` section adds an agent (or, under the default agent's id, overrides the
//! default agent); its unset keys take the top-level values, except `workspace_dir`, which
//! only the default agent inherits (from `[agent]`): a workspace holds an agent's memory, and
//! another agent must not read it. `[[bindings]]` route messages to agents (see
//! `crate::agents` for the order they are tried in).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{invalid, Config};
use crate::error::ConfigError;
use crate::inbound::ChatKind;

/// Most `[agents.<id>]` sections.
pub(crate) const MAX_AGENTS: usize = 256;

/// Most `[[bindings]]`.
pub(crate) const MAX_BINDINGS: usize = 10_000;

/// Most entries of one agent's `tools_allow`, `tools_deny`, `mcp_servers` or `aliases`, and
/// of one binding's `roles`.
pub(crate) const MAX_AGENT_LIST: usize = 1_000;

/// Longest agent id, alias, tool pattern or MCP server name.
pub(crate) const MAX_AGENT_NAME_CHARS: usize = 64;

/// `[agents.<id>.presets]`: the context preset of each chat kind for this agent; unset kinds
/// take `[context.chat_kinds]`. Names are built-in presets or `[context.presets.<name>]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentPresets {
    /// Direct messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<String>,
    /// Group chats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Broadcast channels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

/// `[agents.<id>]`: one agent. Every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSection {
    /// The agent's system prompt. Default `[context] system_prompt`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The model it answers with (a name the `[model]` server knows). Default `[model] model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Its fallback models, tried in order. Default `[model] fallbacks`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallbacks: Option<Vec<String>>,
    /// Its workspace (bootstrap files, skills, memory notes). The default agent's defaults to
    /// `[agent] workspace_dir`; any other agent has none unless it names one. Two agents may
    /// not share one (each would read the other's memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_dir: Option<PathBuf>,
    /// The preset of each chat kind. Default `[context.chat_kinds]`.
    pub presets: AgentPresets,
    /// The `[mcp_servers.<name>]` whose tools this agent is offered. Default: every server
    /// for the default agent, none for any other.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<String>,
    /// Tool names (or patterns with `*`) this agent is offered; absent: every tool. Applies
    /// to registered tools and MCP tools alike.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools_allow: Option<Vec<String>>,
    /// Tool names (or patterns with `*`) this agent is never offered, even when allowed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools_deny: Vec<String>,
    /// Other names `/v1/chat/completions` accepts as `model` for this agent, besides
    /// `agent:<id>`. Default none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
}

/// `[[bindings]]`: messages matching every given field go to `agent`. At least one field
/// besides `agent` must be given. An absent field (or `account_id = "*"`) matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingConfig {
    /// The agent the messages go to (an `[agents.<id>]` or the default agent).
    pub agent: String,
    /// The channel (`telegram`, `webhook`, `discord`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The bot account on that channel (`*`: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// `direct`, `group` or `channel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_kind: Option<ChatKind>,
    /// The chat (a group, a channel, a DM's chat id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
    /// A thread or topic of `chat_id` (needs `chat_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The Discord guild or Slack team the message was posted in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<String>,
    /// The sender (a peer id; on phone channels any spelling of the number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_id: Option<String>,
    /// Discord role ids: the sender must hold at least one (needs `guild_id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

impl BindingConfig {
    /// A binding of `agent` with no match field (tests fill in the ones they need).
    pub fn to_agent(agent: &str) -> Self {
        Self {
            agent: agent.to_string(),
            channel: None,
            account_id: None,
            chat_kind: None,
            chat_id: None,
            thread_id: None,
            guild_id: None,
            sender_id: None,
            roles: Vec::new(),
        }
    }

    /// Whether it names anything to match besides the agent.
    fn matches_something(&self) -> bool {
        self.channel.is_some()
            || self.account_id.is_some()
            || self.chat_kind.is_some()
            || self.chat_id.is_some()
            || self.thread_id.is_some()
            || self.guild_id.is_some()
            || self.sender_id.is_some()
            || !self.roles.is_empty()
    }
}

/// The normalised id of the default agent (`[session] agent_id`).
pub(crate) fn default_agent_id(config: &Config) -> String {
    crate::inbound::normalize_agent_id(&config.session.agent_id)
}

/// Checks `[agents]` and `[[bindings]]` against each other and the rest of the config.
pub(super) fn validate(config: &Config) -> Result<(), ConfigError> {
    if config.agents.len() > MAX_AGENTS {
        return Err(invalid(
            "agents",
            format!("at most {MAX_AGENTS} agents, {} given", config.agents.len()),
        ));
    }
    if config.bindings.len() > MAX_BINDINGS {
        return Err(invalid(
            "bindings",
            format!(
                "at most {MAX_BINDINGS} bindings, {} given",
                config.bindings.len()
            ),
        ));
    }
    let default = default_agent_id(config);
    let mut known: BTreeSet<String> = BTreeSet::from([default.clone()]);
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut workspaces: BTreeMap<PathBuf, String> = BTreeMap::new();
    if let Some(dir) = &config.agent.workspace_dir {
        if config
            .agents
            .get(&default)
            .is_none_or(|a| a.workspace_dir.is_none())
        {
            workspaces.insert(lexical(dir), default.clone());
        }
    }
    for (id, agent) in &config.agents {
        let key = format!("agents.{id}");
        let normal = crate::inbound::normalize_agent_id(id);
        if *id != normal || id.is_empty() {
            return Err(invalid(
                &key,
                format!(
                    "an agent id is 1-{MAX_AGENT_NAME_CHARS} characters of a-z, 0-9, _ and - \
                     (as it appears in session keys); write [agents.{normal}]"
                ),
            ));
        }
        known.insert(id.clone());
        agent.validate(&key, config)?;
        if let Some(dir) = &agent.workspace_dir {
            if let Some(other) = workspaces.insert(lexical(dir), id.clone()) {
                return Err(invalid(
                    &format!("{key}.workspace_dir"),
                    format!(
                        "{} is also agent {other:?}'s workspace; agents may not share one \
                         (each would read the other's memory)",
                        dir.display()
                    ),
                ));
            }
        }
        for alias in &agent.aliases {
            let alias_key = format!("{key}.aliases");
            check_name(&alias_key, alias, |c| !c.is_control() && !c.is_whitespace())?;
            if alias.starts_with("agent:") {
                return Err(invalid(
                    &alias_key,
                    format!("{alias:?}: `agent:<id>` names are built in; pick another alias"),
                ));
            }
            if let Some(other) = names.insert(alias.to_lowercase(), id.clone()) {
                return Err(invalid(
                    &alias_key,
                    format!("{alias:?} is also an alias of agent {other:?}"),
                ));
            }
        }
    }
    let list = || known.iter().cloned().collect::<Vec<_>>().join(", ");
    for (i, b) in config.bindings.iter().enumerate() {
        let key = format!("bindings[{i}]");
        let agent = crate::inbound::normalize_agent_id(&b.agent);
        if b.agent.trim().is_empty() || !known.contains(&agent) {
            return Err(invalid(
                &format!("{key}.agent"),
                format!(
                    "unknown agent {:?} (the agents are: {}); add an [agents.{agent}] section \
                     or fix the name",
                    b.agent,
                    list()
                ),
            ));
        }
        if !b.matches_something() {
            return Err(invalid(
                &key,
                "a binding needs at least one of channel, account_id, chat_kind, chat_id, \
                 thread_id, guild_id, sender_id, roles (the default agent, [session] \
                 agent_id, takes what no binding matches)",
            ));
        }
        for (field, value) in [
            ("channel", &b.channel),
            ("account_id", &b.account_id),
            ("chat_id", &b.chat_id),
            ("thread_id", &b.thread_id),
            ("guild_id", &b.guild_id),
            ("sender_id", &b.sender_id),
        ] {
            if let Some(v) = value {
                check_name(&format!("{key}.{field}"), v, |c| !c.is_control()).map_err(|_| {
                    invalid(
                        &format!("{key}.{field}"),
                        "empty, too long (256) or with control characters",
                    )
                })?;
            }
        }
        if b.thread_id.is_some() && b.chat_id.is_none() {
            return Err(invalid(
                &format!("{key}.thread_id"),
                "a thread is matched within its chat: give chat_id too",
            ));
        }
        if !b.roles.is_empty() && b.guild_id.is_none() {
            return Err(invalid(
                &format!("{key}.roles"),
                "roles are a guild's: give guild_id too",
            ));
        }
        if b.roles.len() > MAX_AGENT_LIST {
            return Err(invalid(
                &format!("{key}.roles"),
                format!("at most {MAX_AGENT_LIST} roles"),
            ));
        }
        if b.roles.iter().any(|r| r.trim().is_empty()) {
            return Err(invalid(&format!("{key}.roles"), "a role is empty"));
        }
    }
    Ok(())
}

impl AgentSection {
    fn validate(&self, key: &str, config: &Config) -> Result<(), ConfigError> {
        if let Some(model) = &self.model {
            if model.trim().is_empty() {
                return Err(invalid(&format!("{key}.model"), "empty model name"));
            }
        }
        if let Some(fallbacks) = &self.fallbacks {
            let max = super::model::MAX_FALLBACK_MODELS;
            if fallbacks.len() > max {
                return Err(invalid(
                    &format!("{key}.fallbacks"),
                    format!("at most {max} fallback models"),
                ));
            }
            if fallbacks.iter().any(|f| f.trim().is_empty()) {
                return Err(invalid(&format!("{key}.fallbacks"), "empty model name"));
            }
        }
        for (kind, name) in [
            ("direct", &self.presets.direct),
            ("group", &self.presets.group),
            ("channel", &self.presets.channel),
        ] {
            if let Some(name) = name {
                crate::context::resolve_preset(name, &config.context.presets)
                    .map_err(|why| invalid(&format!("{key}.presets.{kind}"), why))?;
            }
        }
        for (field, list) in [
            ("mcp_servers", &self.mcp_servers),
            ("tools_deny", &self.tools_deny),
            ("aliases", &self.aliases),
        ] {
            if list.len() > MAX_AGENT_LIST {
                return Err(invalid(
                    &format!("{key}.{field}"),
                    format!("at most {MAX_AGENT_LIST} entries"),
                ));
            }
        }
        for name in &self.mcp_servers {
            check_name(&format!("{key}.mcp_servers"), name, tool_char)?;
        }
        if let Some(allow) = &self.tools_allow {
            if allow.len() > MAX_AGENT_LIST {
                return Err(invalid(
                    &format!("{key}.tools_allow"),
                    format!("at most {MAX_AGENT_LIST} entries"),
                ));
            }
            for p in allow {
                check_name(&format!("{key}.tools_allow"), p, pattern_char)?;
            }
        }
        for p in &self.tools_deny {
            check_name(&format!("{key}.tools_deny"), p, pattern_char)?;
        }
        Ok(())
    }
}

/// A character of a tool or MCP server name (OpenAI's tool-name alphabet).
fn tool_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A character of a tool-name pattern: a tool name's, or `*`.
fn pattern_char(c: char) -> bool {
    tool_char(c) || c == '*'
}

/// Checks a name: not empty, at most [`MAX_AGENT_NAME_CHARS`] (256 for match values), every
/// character `ok`.
fn check_name(key: &str, name: &str, ok: impl Fn(char) -> bool) -> Result<(), ConfigError> {
    let max = if key.starts_with("bindings") {
        crate::inbound::MAX_ID_CHARS
    } else {
        MAX_AGENT_NAME_CHARS
    };
    if name.trim().is_empty() || name.chars().count() > max || !name.chars().all(ok) {
        return Err(invalid(
            key,
            format!("{name:?}: expected 1-{max} characters of the allowed set"),
        ));
    }
    Ok(())
}

/// `path` without `.` components and with `..` applied where it can be, so that two
/// spellings of one directory compare equal (symlinks are not followed: the directory may not
/// exist yet).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}
