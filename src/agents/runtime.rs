//! The agents of a running runtime: for each, the model, the context engine (system prompt,
//! presets, workspace sources, assembly cache) and the tools its turns use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{AgentDirectory, AgentProfile};
use crate::context::ContextEngine;
use crate::model::{Model, TokenCounter};
use crate::tools::ToolRegistry;

/// One agent, ready to answer turns.
pub(crate) struct Agent {
    /// Its id and configuration.
    pub(crate) profile: Arc<AgentProfile>,
    /// The model it answers with.
    pub(crate) model: Arc<dyn Model>,
    /// Its context engine.
    pub(crate) context: Arc<ContextEngine>,
    /// The tools it is offered (the registered ones its filter lets through).
    pub(crate) tools: ToolRegistry,
    /// Counts tokens for its model.
    pub(crate) tokens: TokenCounter,
    /// Turns it answered in this process.
    turns: AtomicU64,
}

impl Agent {
    /// An agent of `profile`.
    pub(crate) fn new(
        profile: Arc<AgentProfile>,
        model: Arc<dyn Model>,
        context: Arc<ContextEngine>,
        tools: ToolRegistry,
    ) -> Self {
        Self {
            tokens: context.tokens(),
            profile,
            model,
            context,
            tools,
            turns: AtomicU64::new(0),
        }
    }

    /// Its id.
    pub(crate) fn id(&self) -> &str {
        &self.profile.id
    }

    /// Which `[mcp_servers]` it is offered: those it names; naming none, the default agent
    /// is offered every server (a config without `[agents]` keeps all its MCP tools) and any
    /// other agent none (a new agent gets no server's tools until it names them).
    pub(crate) fn mcp_scope(&self) -> Option<&[String]> {
        match (self.profile.mcp_servers.is_empty(), self.profile.is_default) {
            (false, _) => Some(&self.profile.mcp_servers),
            (true, true) => None,
            (true, false) => Some(&[]),
        }
    }

    /// Counts one answered turn.
    pub(crate) fn turn_done(&self) {
        self.turns.fetch_add(1, Ordering::Relaxed);
    }

    /// Turns answered in this process.
    pub(crate) fn turns(&self) -> u64 {
        self.turns.load(Ordering::Relaxed)
    }
}

/// Every agent of a runtime, found by id or by session key.
pub(crate) struct AgentSet {
    directory: Arc<AgentDirectory>,
    agents: HashMap<String, Arc<Agent>>,
    default: Arc<Agent>,
}

impl AgentSet {
    /// The set of `agents` (one per profile of `directory`, the default agent among them).
    pub(crate) fn new(directory: Arc<AgentDirectory>, agents: Vec<Agent>) -> Option<Self> {
        let agents: HashMap<String, Arc<Agent>> = agents
            .into_iter()
            .map(|a| (a.id().to_string(), Arc::new(a)))
            .collect();
        let default = Arc::clone(agents.get(directory.default_id())?);
        Some(Self {
            directory,
            agents,
            default,
        })
    }

    /// The agent session `session_key` belongs to.
    pub(crate) fn for_key(&self, session_key: &str) -> &Arc<Agent> {
        let id = self.directory.agent_of_key(session_key);
        self.agents.get(id).unwrap_or(&self.default)
    }

    /// Every agent, the default first, then by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Agent>> {
        self.directory
            .profiles()
            .filter_map(|p| self.agents.get(&p.id))
    }
}
