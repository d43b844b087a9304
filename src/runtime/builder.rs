//! Building a [`Runtime`]: open the store, start the Compactor, the turn engine, the
//! supervisor, the API channel and the janitor, restore the dedupe marks of queued messages.
//! Starting the configured channels and the replay follow in `crate::launch`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use turnstile_actors::{
    ChannelHandle, JanitorHandle, JanitorSettings, LaneSettings, SupervisorHandle,
};

use super::ports::ChannelTasks;
use super::{ApiChannel, Inner, Runtime};
use crate::agents::{Agent, AgentDirectory, AgentSet};
use crate::config::{Config, JanitorMode};
use crate::context::{
    ContextEngine, ContextProcessor, ContextSource, Registry, StageContext, StageError,
};
use crate::error::{ConfigError, Error};
use crate::inbound::Preflight;
use crate::model::{
    CalibrationStore, EchoModel, Encoding, Model, OpenAiModel, OpenAiSettings, TokenCounter,
};
use crate::pipeline::{Admitter, Compaction, RunningTurns, TurnBackend, TurnEngine};
use crate::quotas::Quotas;
use crate::replies::ReplyHub;
use crate::store::{Store, StoreBudget};
use crate::tools::mcp::McpTools;
use crate::tools::{ToolHandler, ToolRegistry};

/// Builds a [`Runtime`]. [`RuntimeBuilder::build`] lives in `crate::launch`, above the runtime
/// and the channels: it opens the runtime here, then starts the configured channels on it.
pub struct RuntimeBuilder {
    config: Config,
    model: Option<Arc<dyn Model>>,
    /// Models given for single agents, by id.
    agent_models: HashMap<String, Arc<dyn Model>>,
    context: Registry,
    tools: ToolRegistry,
    tool_errors: Vec<ConfigError>,
    inspect_only: bool,
    /// The file the config came from, for reloads.
    config_file: Option<crate::config::ConfigFile>,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self {
            config: Config::default(),
            model: None,
            agent_models: HashMap::new(),
            context: Registry::builtin(),
            tools: ToolRegistry::default(),
            tool_errors: Vec::new(),
            inspect_only: false,
            config_file: None,
        }
    }
}

impl RuntimeBuilder {
    /// Uses `config` (replacing any set before).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Remembers that the config came from `file` (read with [`ConfigFile::load`]), so
    /// [`Runtime::reload_from_file`] can read it again.
    ///
    /// [`ConfigFile::load`]: crate::config::ConfigFile::load
    pub fn config_file(mut self, file: crate::config::ConfigFile) -> Self {
        self.config_file = Some(file);
        self
    }

    /// Stores data under `dir`.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.storage.data_dir = dir.into();
        self
    }

    /// Answers turns with `model` instead of the one the config names (every agent's, except
    /// those given their own with [`Self::agent_model`]).
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.model = Some(model);
        self
    }

    /// Answers agent `agent_id`'s turns with `model` instead of the one the config names.
    pub fn agent_model(mut self, agent_id: &str, model: Arc<dyn Model>) -> Self {
        self.agent_models
            .insert(crate::inbound::normalize_agent_id(agent_id), model);
        self
    }

    /// Registers a context source under `name`, for `[[context.sources]]` to use (the
    /// built-in sources are always registered; a name may replace one).
    pub fn context_source(
        mut self,
        name: &str,
        factory: impl Fn(&StageContext<'_>) -> Result<Box<dyn ContextSource>, StageError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.context.register_source(name, factory);
        self
    }

    /// Registers a context processor under `name`, for `[[context.processors]]` to use.
    pub fn context_processor(
        mut self,
        name: &str,
        factory: impl Fn(&StageContext<'_>) -> Result<Box<dyn ContextProcessor>, StageError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.context.register_processor(name, factory);
        self
    }

    /// Registers a tool the model may call: its name, what it does, the JSON schema of its
    /// arguments, and the handler that runs it. An invalid or repeated name fails `build`.
    pub fn tool(
        mut self,
        name: &str,
        description: &str,
        parameters: serde_json::Value,
        handler: impl ToolHandler,
    ) -> Self {
        if let Err(e) = self.tools.register(name, description, parameters, handler) {
            self.tool_errors.push(e);
        }
        self
    }

    /// Opens the runtime for inspection and maintenance (the operator CLI on a data dir): the
    /// inbox is not replayed and configured channels are not started.
    pub fn inspect_only(mut self) -> Self {
        self.inspect_only = true;
        self
    }

    /// Whether [`Self::inspect_only`] was asked for.
    pub(crate) fn is_inspect_only(&self) -> bool {
        self.inspect_only
    }

    /// Opens the store, starts the pipeline's actors and restores the dedupe marks of queued
    /// messages. Channels are not started and nothing is replayed yet ([`Runtime::replay`]).
    pub(crate) async fn open(mut self) -> Result<Runtime, Error> {
        if let Some(e) = std::mem::take(&mut self.tool_errors).into_iter().next() {
            return Err(e.into());
        }
        let config = Arc::new(std::mem::take(&mut self.config));
        config.validate()?;
        if config.cluster.is_some() && !cfg!(feature = "cluster") {
            // A node must not run alone on a cluster's config, believing it shares its
            // sessions.
            return Err(ConfigError::Invalid(
                "cluster: this build has no cluster support (the `cluster` feature); remove \
                 the [cluster] section to run a single node"
                    .into(),
            )
            .into());
        }
        let directory = Arc::new(AgentDirectory::new(&config)?);
        let agents = Arc::new(self.agents(&directory)?);
        let store = if self.inspect_only {
            Store::open(&config.storage)?
        } else {
            Store::open_for_serving(&config.storage)?
        };
        let replies = Arc::new(ReplyHub::new(config.server.events_buffer));
        // The Compactor first: the engine holds its handle, it holds nothing of the engine.
        let compaction = Compaction::start(&config, &store, &agents).await?;
        let quotas = Arc::new(Quotas::new(&config.quotas, store.clone()));
        // MCP servers connect in the background; an inspection opens none.
        let mcp = if self.inspect_only {
            McpTools::default()
        } else {
            McpTools::start(&config.mcp_servers)
        };
        let engine = Arc::new(
            TurnEngine::new(
                Arc::clone(&config),
                store.clone(),
                agents,
                Arc::clone(&replies),
                compaction,
                Arc::clone(&quotas),
            )
            .with_mcp(mcp.clone()),
        );
        let preflight = Arc::new(Preflight::new(&config)?);
        let running = Arc::new(RunningTurns::default());
        let admitter = Admitter::new(
            store.clone(),
            Arc::clone(&config),
            Arc::clone(&directory),
            Arc::clone(&preflight),
            Arc::clone(&quotas),
        );
        let settings = LaneSettings {
            idle_timeout: config.idle_timeout(),
            queue_cap: config.lanes.queue_cap,
            turn_retries: config.lanes.turn_retries,
            rpc_timeout: Duration::from_secs(10),
            max_live_lanes: config.lanes.max_live_lanes,
        };
        let backend = Arc::new(TurnBackend::new(
            admitter,
            Arc::clone(&engine),
            store.clone(),
            settings,
            Arc::clone(&preflight),
            Arc::clone(&running),
        ));
        let (supervisor, _) = SupervisorHandle::start(backend).await?;
        let api = ChannelHandle::start(Arc::new(ApiChannel), &supervisor).await?;
        let janitor = start_janitor(&store, &config, &running).await?;
        let schedules = Arc::new(crate::schedules::Schedules::new(
            store.clone(),
            Arc::clone(&config),
        ));
        let reload = super::reload::ReloadState::new(self.config_file.take(), Arc::clone(&config));
        let runtime = Runtime {
            inner: Arc::new(Inner {
                config,
                engine,
                store: store.clone(),
                replies,
                preflight,
                quotas,
                supervisor,
                api,
                janitor,
                closing: AtomicBool::new(false),
                drain_requested: tokio::sync::Notify::new(),
                running,
                channel_tasks: ChannelTasks::new(),
                schedules,
                directory,
                ingress: std::sync::OnceLock::new(),
                deletes: std::sync::OnceLock::new(),
                reads: std::sync::OnceLock::new(),
                slack_events: std::sync::OnceLock::new(),
                reload: tokio::sync::Mutex::new(reload),
            }),
        };
        if self.inspect_only {
            return Ok(runtime);
        }
        // Tools listed at start are offered from the first turn on (bounded by the servers'
        // connect and list timeouts; a server still starting joins when it is listed).
        mcp.started().await;
        if runtime.is_clustered() {
            // A cluster node's inbox only mirrors what it took from the replicated inboxes,
            // which keep every unanswered message for the partition's next owner; answering
            // the mirror too would answer twice.
            match store.clear_inbox() {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    n,
                    "cluster node: left the local inbox to the partitions' owners"
                ),
                Err(e) => {
                    let _ = runtime.shutdown().await;
                    return Err(e.into());
                }
            }
            // Its jobs fire once the node owns their sessions' partitions (`owns` is false
            // until the cluster layer is installed and a tenure begins).
            runtime.start_scheduler();
            store.settle_after_start();
            return Ok(runtime);
        }
        // Before any channel can deliver a redelivery of a queued message.
        let restored = runtime.inner.preflight.restore_durable_marks(&store);
        match restored {
            Ok(0) => {}
            Ok(restored) => tracing::info!(restored, "dedupe keys of queued messages restored"),
            Err(e) => {
                let _ = runtime.shutdown().await;
                return Err(e.into());
            }
        }
        // After the dedupe marks: a run resumed at start must find its first attempt's.
        runtime.start_scheduler();
        store.settle_after_start();
        Ok(runtime)
    }
}

impl RuntimeBuilder {
    /// Builds every agent of `directory`: its model (the one given for it, else the one given
    /// for all, else the configured one, shared by agents that name the same model and
    /// fallbacks), its context engine and its tools.
    fn agents(&self, directory: &Arc<AgentDirectory>) -> Result<AgentSet, Error> {
        // One calibration store: the clients learn from usage and overflow errors, the
        // context engines size budgets with what they learned (per model name).
        let calibration = CalibrationStore::new();
        let mut configured: HashMap<(String, Vec<String>), Arc<dyn Model>> = HashMap::new();
        let mut agents = Vec::new();
        for profile in directory.profiles() {
            let config = &profile.config;
            let model = match (self.agent_models.get(&profile.id), &self.model) {
                (Some(m), _) | (None, Some(m)) => Arc::clone(m),
                (None, None) => {
                    let key = (config.model.model.clone(), config.model.fallbacks.clone());
                    match configured.get(&key) {
                        Some(m) => Arc::clone(m),
                        None => {
                            let m = model_from_config(config, &calibration)?;
                            configured.insert(key, Arc::clone(&m));
                            m
                        }
                    }
                }
            };
            let tokens = TokenCounter::new(Encoding::for_model(&config.model.model));
            // Loading a vocabulary takes a fraction of a second: do it off the start-up path.
            tokio::task::spawn_blocking(move || tokens.warm_up());
            let context = ContextEngine::new(config, &self.context, tokens)
                .map_err(|e| agent_error(&profile.id, directory, e))?
                .with_calibration(calibration.clone(), model.name())
                .with_chat_scope(directory.chat_scope(&profile.id));
            let tools = self.tools.filtered(|name| profile.tools.allows(name));
            agents.push(Agent::new(
                Arc::clone(profile),
                model,
                Arc::new(context),
                tools,
            ));
        }
        AgentSet::new(Arc::clone(directory), agents).ok_or_else(|| {
            ConfigError::Invalid("agents: the default agent is missing".into()).into()
        })
    }
}

/// A config error of agent `id`'s context, named after its section when there is more than
/// one agent.
fn agent_error(id: &str, directory: &AgentDirectory, e: ConfigError) -> ConfigError {
    if !directory.is_multi() {
        return e;
    }
    ConfigError::Invalid(format!("agents.{id}: {e}"))
}

impl Runtime {
    /// Runs the store's deferred checks in the background and replays what was acknowledged
    /// but not answered. Called once the channels are started, so replies to replayed messages
    /// find their channel.
    pub(crate) fn replay(&self) -> Result<(), Error> {
        let store = &self.inner.store;
        let checked = store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = checked.run_deferred_checks() {
                tracing::error!(error = %e, "the store checks after start-up failed");
            }
        });
        let pending = store.sessions_with_pending()?;
        if !pending.is_empty() {
            tracing::info!(sessions = pending.len(), "replaying unanswered messages");
            self.inner
                .supervisor
                .recover(pending.into_iter().map(Into::into).collect())?;
        }
        Ok(())
    }
}

/// Starts the janitor over the store; sessions with a running turn (or unconsumed inbox
/// entries) are never evicted, and the store wakes the janitor when writes cross its live-byte
/// trigger.
async fn start_janitor(
    store: &Store,
    config: &Config,
    running: &Arc<RunningTurns>,
) -> Result<JanitorHandle, Error> {
    // A session is protected while a turn runs for it (the budget also protects sessions with
    // unconsumed inbox entries). An idle lane holds no session data, so its session may go:
    // the lane's next turn starts the session afresh.
    let running = Arc::clone(running);
    let budget = StoreBudget::new(
        store.clone(),
        &config.storage,
        Arc::new(move |key: &str| running.is_running(key)),
    );
    let janitor = JanitorHandle::start(
        Arc::new(budget),
        JanitorSettings {
            interval: Duration::from_millis(config.storage.janitor_interval_ms),
            enforce: config.storage.janitor_mode == JanitorMode::Enforce,
        },
    )
    .await?;
    let signal = janitor.clone();
    store.set_janitor_hook(move || signal.high_water());
    Ok(janitor)
}

fn model_from_config(
    config: &Config,
    calibration: &CalibrationStore,
) -> Result<Arc<dyn Model>, Error> {
    match config.model.provider.as_str() {
        "echo" => Ok(Arc::new(EchoModel)),
        "openai" => {
            let settings = OpenAiSettings::from_config(&config.model);
            if settings.api_key.is_none() {
                tracing::info!(
                    api_key_env = %config.model.api_key_env,
                    "no API key in the environment; requests go without Authorization"
                );
            }
            Ok(Arc::new(
                OpenAiModel::new(settings)?.with_calibration(calibration.clone()),
            ))
        }
        other => Err(crate::error::ConfigError::Invalid(format!(
            "model.provider: {other:?} is not available in this build"
        ))
        .into()),
    }
}
