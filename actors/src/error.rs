//! The error a domain's work hands back across the actor seam ([`crate::Backend::pending`],
//! [`crate::CompactionWork::compact`]). The actors only log it, count it or pass it on, so
//! it carries a kind to act on and a message for people; the domain maps its own errors
//! into it.

/// What kind of failure the domain reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Storage could not be read or written.
    Storage,
    /// Too much work is waiting; retry later.
    Busy,
    /// The work did not finish: its task panicked or was cancelled, or the runtime stopped.
    Interrupted,
    /// Any other failure of the work itself.
    Failed,
}

/// A failure of domain work, as the actors see it. Displays as its message alone, so logs
/// and answers read as they did when the message was the whole error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    kind: ErrorKind,
    message: String,
}

impl BackendError {
    /// An error of `kind` explained by `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The explanation.
    pub fn message(&self) -> &str {
        &self.message
    }
}
