//! Sources and processors by name. The built-ins are registered here; embedding applications
//! add their own (`RuntimeBuilder::context_source`/`context_processor`) and name them in the
//! TOML pipeline.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::config::StageSpec;
use super::error::StageError;
use super::processor::ContextProcessor;
use super::source::ContextSource;
use super::{processors, sources};
use crate::config::Config;
use crate::error::ConfigError;

/// What a factory gets to build one stage.
pub struct StageContext<'a> {
    /// The stage's registered name.
    pub name: &'a str,
    /// Its `params` table from the config.
    pub params: &'a toml::Table,
    /// The whole configuration.
    pub config: &'a Config,
}

impl StageContext<'_> {
    /// The stage's parameters as `T` (unknown keys are an error).
    pub fn params<T: serde::de::DeserializeOwned>(&self) -> Result<T, StageError> {
        super::config::parse_params(self.name, self.params)
    }
}

/// Builds a source from its stage settings.
pub(crate) type SourceFactory =
    Arc<dyn Fn(&StageContext<'_>) -> Result<Box<dyn ContextSource>, StageError> + Send + Sync>;
/// Builds a processor from its stage settings.
pub(crate) type ProcessorFactory =
    Arc<dyn Fn(&StageContext<'_>) -> Result<Box<dyn ContextProcessor>, StageError> + Send + Sync>;

/// Sources and processors by name.
#[derive(Clone, Default)]
pub struct Registry {
    sources: BTreeMap<String, SourceFactory>,
    processors: BTreeMap<String, ProcessorFactory>,
}

impl Registry {
    /// A registry with every built-in source and processor.
    pub fn builtin() -> Self {
        let mut r = Self::default();
        sources::register_builtin(&mut r);
        processors::register_builtin(&mut r);
        r
    }

    /// Registers (or replaces) the source `name`.
    pub fn register_source(
        &mut self,
        name: &str,
        factory: impl Fn(&StageContext<'_>) -> Result<Box<dyn ContextSource>, StageError>
            + Send
            + Sync
            + 'static,
    ) {
        self.sources.insert(name.to_string(), Arc::new(factory));
    }

    /// Registers (or replaces) the processor `name`.
    pub fn register_processor(
        &mut self,
        name: &str,
        factory: impl Fn(&StageContext<'_>) -> Result<Box<dyn ContextProcessor>, StageError>
            + Send
            + Sync
            + 'static,
    ) {
        self.processors.insert(name.to_string(), Arc::new(factory));
    }

    /// Registered source names.
    pub fn source_names(&self) -> impl Iterator<Item = &str> {
        self.sources.keys().map(String::as_str)
    }

    /// Registered processor names.
    pub fn processor_names(&self) -> impl Iterator<Item = &str> {
        self.processors.keys().map(String::as_str)
    }

    pub(crate) fn build_source(
        &self,
        spec: &StageSpec,
        config: &Config,
    ) -> Result<Box<dyn ContextSource>, ConfigError> {
        let factory = self.sources.get(&spec.name).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "context.sources: no source named {:?} (known: {})",
                spec.name,
                self.source_names().collect::<Vec<_>>().join(", ")
            ))
        })?;
        factory(&StageContext {
            name: &spec.name,
            params: &spec.params,
            config,
        })
        .map_err(|e| ConfigError::Invalid(e.0))
    }

    pub(crate) fn build_processor(
        &self,
        spec: &StageSpec,
        config: &Config,
    ) -> Result<Box<dyn ContextProcessor>, ConfigError> {
        let factory = self.processors.get(&spec.name).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "context.processors: no processor named {:?} (known: {})",
                spec.name,
                self.processor_names().collect::<Vec<_>>().join(", ")
            ))
        })?;
        if spec.priority.is_some() || spec.weight.is_some() {
            return Err(ConfigError::Invalid(format!(
                "context.processors: {:?}: priority and weight apply to sources only",
                spec.name
            )));
        }
        factory(&StageContext {
            name: &spec.name,
            params: &spec.params,
            config,
        })
        .map_err(|e| ConfigError::Invalid(e.0))
    }
}
