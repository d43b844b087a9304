//! `[agent]`: the agent's workspace.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[agent]`
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// The agent workspace: bootstrap files (`AGENTS.md`, `SOUL.md`, `TOOLS.md`, `IDENTITY.md`,
    /// `USER.md`, `MEMORY.md`), `skills/**/SKILL.md` and `memory/YYYY-MM-DD.md`. Default none:
    /// those sources add nothing.
    pub workspace_dir: Option<PathBuf>,
}
