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
