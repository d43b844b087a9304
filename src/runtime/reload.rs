//! Applying a config reload (`SIGHUP`, `POST /v1/admin/reload`) to the running runtime. What
//! may change is decided in `config/reload.rs`; here the holders of those settings are
//! swapped: the quota rules, the preflight policy, the config's scheduled jobs. A reload never
//! interrupts a turn in progress: admission is where these are read (only a turn's model
//! tokens are added to its subject's usage when it ends, under the rules in force then).

use std::sync::Arc;

use serde::Serialize;

use super::Runtime;
use crate::config::reload::{merge, plan};
use crate::config::{Config, ConfigFile, ReloadPlan};
use crate::error::{ConfigError, StoreError};

/// What a reload did: the answer of `POST /v1/admin/reload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReloadOutcome {
    /// Changed settings applied, in name order.
    pub applied: Vec<String>,
    /// Changed settings left as they run until a restart, in name order.
    pub restart_required: Vec<String>,
    /// Whether the file says what is in force (nothing applied, nothing pending).
    pub unchanged: bool,
}

impl ReloadOutcome {
    fn of(plan: ReloadPlan) -> Self {
        Self {
            unchanged: plan.unchanged(),
            applied: plan.applied,
            restart_required: plan.restart_required,
        }
    }

    /// One line for logs and the audit log.
    pub fn summary(&self) -> String {
        ReloadPlan {
            applied: self.applied.clone(),
            restart_required: self.restart_required.clone(),
        }
        .summary()
    }
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The server was started without `--config`: there is no file to read again.
    #[error("the server was started without --config: there is no config file to reload")]
    NoConfigFile,
    /// The file cannot be read, is not valid TOML, or fails the start-up validation; or its
    /// reloadable settings do not fit the settings that need a restart.
    #[error("the config was not reloaded: {0}")]
    Invalid(#[from] ConfigError),
    /// The config's scheduled jobs could not be stored (the other settings were applied).
    #[error("the config's [[schedules]] could not be stored: {0}")]
    Store(#[from] StoreError),
}

/// The settings in force and where they came from; behind the runtime's reload lock, so
/// reloads run one at a time.
pub(crate) struct ReloadState {
    /// The file `serve --config` read, if any.
    file: Option<ConfigFile>,
    /// The settings in force: the start's, with each reload's applied settings.
    in_force: Arc<Config>,
}

impl ReloadState {
    pub(crate) fn new(file: Option<ConfigFile>, started_with: Arc<Config>) -> Self {
        Self {
            file,
            in_force: started_with,
        }
    }
}

impl Runtime {
    /// Reads the config file again and applies what may change at run time
    /// (see [`Runtime::reload`]).
    pub async fn reload_from_file(&self) -> Result<ReloadOutcome, ReloadError> {
        let file = self.inner.reload.lock().await.file.clone();
        let file = file.ok_or(ReloadError::NoConfigFile)?;
        // Reading the file is blocking I/O: off the async workers.
        let loaded = tokio::task::spawn_blocking(move || file.load())
            .await
            .map_err(|_| ConfigError::Invalid("reading the config file did not finish".into()))??;
        self.reload(loaded).await
    }

    /// Applies `new` (validated as at start): the settings of `config::reload::RELOADABLE`
    /// that changed take effect for the next message; the other changed ones are reported as
    /// needing a restart and keep their running values. A config whose reloadable settings do
    /// not fit the running ones (a schedule naming an agent only a restart would add) changes
    /// nothing.
    pub async fn reload(&self, new: Config) -> Result<ReloadOutcome, ReloadError> {
        let mut state = self.inner.reload.lock().await;
        new.validate()?;
        let plan = plan(&state.in_force, &new)?;
        let merged = merge(&state.in_force, &new, &plan);
        merged.validate().map_err(|e| {
            ConfigError::Invalid(format!(
                "{e} (with the settings that need a restart kept as they run)"
            ))
        })?;
        let preflight_changed = plan.applied.iter().any(|n| n.starts_with("preflight."));
        if preflight_changed {
            self.inner.preflight.set_policy(&merged.preflight)?;
        }
        if plan.applied.iter().any(|n| n == "quotas") {
            self.inner.quotas.set_rules(&merged.quotas);
        }
        let schedules_changed = plan.applied.iter().any(|n| n == "schedules");
        state.in_force = Arc::new(merged);
        if schedules_changed {
            self.inner
                .schedules
                .reload(&state.in_force.schedules)
                .await?;
        }
        Ok(ReloadOutcome::of(plan))
    }

    /// The settings in force: the start's config with every reload's applied settings.
    pub async fn config_in_force(&self) -> Arc<Config> {
        Arc::clone(&self.inner.reload.lock().await.in_force)
    }
}
