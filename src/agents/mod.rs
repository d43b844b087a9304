//! Agents: several agents in one process, each with its own system prompt, model, presets,
//! workspace and tools, and the bindings that route inbound messages to them.
//!
//! # How a message finds its agent
//! 1. A message whose session is named explicitly (`X-Session-Key`, the API's session
//!    routes, a schedule) belongs to the agent its key names (`agent:<id>:…`) when that agent
//!    is configured, else to the default agent.
//! 2. Otherwise `[[bindings]]` are tried, most specific first ([`bindings`]); what none
//!    matches goes to the default agent, `[session] agent_id` (default `main`).
//! 3. The session key is derived for that agent (`agent:<id>:…`, OpenClaw's shape), so the
//!    agent is part of the key: each agent's sessions, transcripts, summaries and inbox are
//!    apart from every other's, and a turn finds its agent again from its key alone.
//!
//! What else keeps agents apart: each answers from its own workspace (two may not share
//! one), and a chat's record (group history, chatter, recall, reply threads) is kept per
//! agent ([`crate::inbound::chat_record_channel`]).
//!
//! `/v1/chat/completions` picks an agent by `model`: `agent:<id>`, or an alias an agent
//! lists; any other model name keeps today's behaviour (the agent the session key names, else
//! the default).

mod bindings;
pub(crate) mod runtime;
mod tool_filter;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub use bindings::{Bindings, Route, Tier};
pub(crate) use runtime::{Agent, AgentSet};
pub use tool_filter::ToolFilter;

use crate::config::{default_agent_id, AgentSection, Config};
use crate::error::ConfigError;
use crate::inbound::{agent_in_key, InboundMessage, RouteHints, SessionKeys};

/// The `model` prefix that names an agent in `/v1/chat/completions`.
pub const AGENT_MODEL_PREFIX: &str = "agent:";

/// One configured agent: its id and what its turns are made with.
#[derive(Debug, Clone)]
pub struct AgentProfile {
    /// The normalised id (in session keys).
    pub id: String,
    /// The whole configuration as this agent's turns see it: `[context] system_prompt`,
    /// `[model] model` and `fallbacks`, `[agent] workspace_dir` and `[context.chat_kinds]`
    /// replaced by the agent's own.
    pub config: Arc<Config>,
    /// Which tools it is offered.
    pub tools: ToolFilter,
    /// The MCP servers whose tools it is offered.
    pub mcp_servers: Vec<String>,
    /// Other `model` names that select it.
    pub aliases: Vec<String>,
    /// Whether it is the default agent.
    pub is_default: bool,
}

/// Every configured agent, the bindings, and the session keys they lead to.
#[derive(Debug, Clone)]
pub struct AgentDirectory {
    default: String,
    profiles: BTreeMap<String, Arc<AgentProfile>>,
    /// Lowercased alias → agent id.
    aliases: HashMap<String, String>,
    bindings: Bindings,
    keys: SessionKeys,
}

impl AgentDirectory {
    /// The agents and bindings of a validated `config`.
    pub fn new(config: &Config) -> Result<Self, ConfigError> {
        let default = default_agent_id(config);
        let mut keys = SessionKeys::new(&config.session)?;
        if let Some(dm_scope) = config.channels.discord.as_ref().and_then(|d| d.dm_scope) {
            keys = keys.with_channel_dm_scope(crate::channels::DISCORD, dm_scope);
        }
        if let Some(dm_scope) = config.channels.slack.as_ref().and_then(|s| s.dm_scope) {
            keys = keys.with_channel_dm_scope(crate::channels::SLACK, dm_scope);
        }
        let mut profiles = BTreeMap::new();
        let mut aliases = HashMap::new();
        let no_section = AgentSection::default();
        let ids = std::iter::once(default.clone()).chain(config.agents.keys().cloned());
        for id in ids {
            if profiles.contains_key(&id) {
                continue;
            }
            let section = config.agents.get(&id).unwrap_or(&no_section);
            let is_default = id == default;
            for alias in &section.aliases {
                aliases.insert(alias.to_lowercase(), id.clone());
            }
            let profile = AgentProfile {
                config: Arc::new(effective_config(config, &id, section, is_default)),
                tools: ToolFilter::new(section.tools_allow.as_deref(), &section.tools_deny),
                mcp_servers: section.mcp_servers.clone(),
                aliases: section.aliases.clone(),
                is_default,
                id: id.clone(),
            };
            profiles.insert(id, Arc::new(profile));
        }
        Ok(Self {
            default,
            profiles,
            aliases,
            bindings: Bindings::new(&config.bindings),
            keys,
        })
    }

    /// The default agent's id.
    pub fn default_id(&self) -> &str {
        &self.default
    }

    /// Whether more than the default agent is configured.
    pub fn is_multi(&self) -> bool {
        self.profiles.len() > 1
    }

    /// Every agent, the default first, then by id.
    pub fn profiles(&self) -> impl Iterator<Item = &Arc<AgentProfile>> {
        let default = self.profiles.get(&self.default);
        default.into_iter().chain(
            self.profiles
                .iter()
                .filter(|(id, _)| **id != self.default)
                .map(|(_, p)| p),
        )
    }

    /// The agent `id`, if configured.
    pub fn profile(&self, id: &str) -> Option<&Arc<AgentProfile>> {
        self.profiles.get(id)
    }

    /// The agent a session belongs to: the one its key names when configured, else the
    /// default agent.
    pub fn agent_of_key<'a>(&'a self, session_key: &'a str) -> &'a str {
        match agent_in_key(session_key) {
            Some(id) if self.profiles.contains_key(id) => id,
            _ => &self.default,
        }
    }

    /// Where `msg` goes: the first binding that matches, else the default agent.
    pub fn route(&self, msg: &InboundMessage, hints: &RouteHints) -> Route {
        self.bindings.route(msg, hints).unwrap_or_else(|| Route {
            agent: self.default.clone(),
            matched_by: None,
            binding: None,
        })
    }

    /// The session key of `msg` (with `hints`) and the agent it belongs to.
    pub fn session_key(&self, msg: &InboundMessage, hints: &RouteHints) -> (String, Route) {
        let route = self.route(msg, hints);
        (self.keys.key_for(&route.agent, msg), route)
    }

    /// The session keys the directory derives.
    pub fn keys(&self) -> &SessionKeys {
        &self.keys
    }

    /// The agent `model` selects in `/v1/chat/completions`: `agent:<id>` of a configured
    /// agent, or an alias; `None` for any other name (`Err` for `agent:<id>` of an agent that
    /// is not configured: the client asked for an agent by name).
    pub fn agent_for_model(&self, model: &str) -> Result<Option<&str>, String> {
        let model = model.trim();
        if let Some(id) = model.strip_prefix(AGENT_MODEL_PREFIX) {
            let id = crate::inbound::normalize_agent_id(id);
            return match self.profiles.get_key_value(&id) {
                Some((id, _)) => Ok(Some(id.as_str())),
                None => Err(format!(
                    "no agent {id:?} (the agents are: {})",
                    self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                )),
            };
        }
        Ok(self.aliases.get(&model.to_lowercase()).map(String::as_str))
    }

    /// The session key an OpenAI-compatible request of agent `agent` uses for the session it
    /// names (`session`): the default agent's are as named (as before agents existed); another
    /// agent's are prefixed `agent:<id>:` unless they already are. `Err` when the named key
    /// belongs to another configured agent.
    pub fn session_for_agent(&self, agent: &str, session: &str) -> Result<String, String> {
        let owner = self.agent_of_key(session);
        if owner == agent {
            return Ok(session.to_string());
        }
        if agent_in_key(session).is_some_and(|id| self.profiles.contains_key(id)) {
            return Err(format!(
                "session {session:?} belongs to agent {owner:?}, not {agent:?}"
            ));
        }
        if agent == self.default {
            return Ok(session.to_string());
        }
        Ok(format!("agent:{agent}:{session}"))
    }

    /// The chat-record scope of agent `agent` (see [`crate::inbound::chat_record_channel`]):
    /// `None` for the default agent.
    pub fn chat_scope<'a>(&self, agent: &'a str) -> Option<&'a str> {
        (agent != self.default).then_some(agent)
    }
}

/// `config` as agent `id` sees it (see [`AgentProfile::config`]).
fn effective_config(config: &Config, id: &str, section: &AgentSection, is_default: bool) -> Config {
    let mut c = config.clone();
    c.agents.clear();
    c.bindings.clear();
    c.session.agent_id = id.to_string();
    if !is_default {
        c.agent.workspace_dir = None;
    }
    if let Some(p) = &section.system_prompt {
        c.context.system_prompt = p.clone();
    }
    if let Some(m) = &section.model {
        c.model.model = m.clone();
    }
    if let Some(f) = &section.fallbacks {
        c.model.fallbacks = f.clone();
    }
    if let Some(w) = &section.workspace_dir {
        c.agent.workspace_dir = Some(w.clone());
    }
    let p = &section.presets;
    if let Some(d) = &p.direct {
        c.context.chat_kinds.direct = d.clone();
    }
    if let Some(g) = &p.group {
        c.context.chat_kinds.group = g.clone();
    }
    if let Some(ch) = &p.channel {
        c.context.chat_kinds.channel = ch.clone();
    }
    c
}

#[cfg(test)]
mod tests;
