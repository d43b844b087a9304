//! Errors of context assembly.

use crate::error::StoreError;

/// Why a context could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// Reading stored history failed.
    #[error("reading history for the context: {0}")]
    Store(#[from] StoreError),
    /// A source failed.
    #[error("context source {stage:?} failed: {message}")]
    Source {
        /// The stage's name.
        stage: String,
        /// What went wrong.
        message: String,
    },
    /// A processor failed.
    #[error("context processor {stage:?} failed: {message}")]
    Processor {
        /// The stage's name.
        stage: String,
        /// What went wrong.
        message: String,
    },
}

/// Why a context stage could not be built from its settings (an invalid `params` table, a
/// value out of range, a file that cannot be read); the config check reports it as an
/// invalid value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StageError(pub String);

impl From<String> for StageError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for StageError {
    fn from(message: &str) -> Self {
        Self(message.to_string())
    }
}
