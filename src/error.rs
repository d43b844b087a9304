//! Error types. Each names what failed and carries enough context to act on it.

use std::path::PathBuf;

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (including unknown keys).
    #[error("invalid config: {0}")]
    Parse(String),
    /// A value is out of range or inconsistent with another.
    #[error("invalid config value: {0}")]
    Invalid(String),
}

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled reported an error.
    #[error("storage error while {context}: {source}")]
    Sled {
        /// What was being done.
        context: &'static str,
        /// sled's error.
        source: sled::Error,
    },
    /// A stored value could not be decoded.
    #[error("undecodable value in {tree}: {reason}")]
    Decode {
        /// The tree holding the value.
        tree: &'static str,
        /// Why decoding failed.
        reason: String,
    },
    /// A value could not be encoded.
    #[error("cannot encode value: {0}")]
    Encode(String),
    /// The data directory could not be prepared.
    #[error("cannot use data dir {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An internal expectation did not hold (a bug, reported instead of panicking).
    #[error("internal error: {0}")]
    Invariant(&'static str),
    /// A flush to disk failed; the write is not durable.
    #[error("flush failed: {0}")]
    Flush(String),
    /// Another process (usually a running `turnstile serve`) holds the database.
    #[error("the database {path} is in use by another process (stop the server using this data dir first)")]
    Locked {
        /// The database directory.
        path: PathBuf,
    },
    /// A file outside the database (archive, export, import source) failed.
    #[error("cannot {action} {path}: {source}")]
    File {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The store cannot take writes now (the disk is full, or a write or flush failed with an
    /// I/O error); reads still answer, and the store recovers by itself when space returns.
    #[error("insufficient storage: {reason}")]
    CannotWrite {
        /// What failed.
        reason: String,
    },
    /// sled panicked on damaged data (contained, see `store/contain.rs`).
    #[error("the database looks damaged ({what}: {reason}); stop the server and run `turnstile doctor --repair`")]
    Corrupt {
        /// What was being done.
        what: &'static str,
        /// sled's panic message.
        reason: String,
    },
    /// `CURRENT` does not name a usable database generation; nothing was deleted.
    #[error("{reason}; generations found: {found}; run `turnstile doctor --repair` to point CURRENT at the newest one that opens and verifies")]
    Generations {
        /// What is wrong.
        reason: String,
        /// The generation directories present.
        found: String,
    },
    /// The store holds less than its ledger says was made durable (see `store/ledger.rs`).
    #[error("data loss detected: {0}; run `turnstile doctor` for details, or start with `turnstile serve --accept-data-loss` to serve what is left")]
    DataLoss(String),
    /// A backup file cannot be written or restored (damaged, truncated, or a restore into a
    /// data dir that is not empty); a refused restore changed nothing.
    #[error("backup {path}: {reason}")]
    Backup {
        /// The backup file, or the data dir it was to be restored into.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The store was written by a newer Turnstile.
    #[error("store schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew {
        /// Version on disk.
        found: u8,
        /// Newest version this build knows.
        supported: u8,
    },
}

impl StoreError {
    /// Maps a failure to open the database, telling a held file lock apart.
    pub(crate) fn from_open(path: &std::path::Path, source: sled::Error) -> StoreError {
        match &source {
            sled::Error::Io(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.to_string().contains("acquire lock") =>
            {
                StoreError::Locked {
                    path: path.to_path_buf(),
                }
            }
            _ => StoreError::Sled {
                context: "opening the database",
                source,
            },
        }
    }

    pub(crate) fn file<'a>(
        action: &'static str,
        path: &'a std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
        move |source| StoreError::File {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// True when the error means "no room / cannot write now" rather than bad data.
    pub fn is_cannot_write(&self) -> bool {
        matches!(self, StoreError::CannotWrite { .. })
    }

    pub(crate) fn sled(context: &'static str) -> impl FnOnce(sled::Error) -> StoreError {
        move |source| StoreError::Sled { context, source }
    }
}

/// An inbound message that fails validation. Nothing is stored for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboundError {
    /// A required field is empty.
    #[error("field `{0}` must not be empty")]
    Empty(&'static str),
    /// A field is longer than allowed.
    #[error("field `{field}` is too long ({len} > {max})")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A field contains a character that is not allowed.
    #[error("field `{0}` contains a control character")]
    ControlChar(&'static str),
    /// The timestamp lies too far in the future.
    #[error("timestamp_ms {0} lies too far in the future")]
    FutureTimestamp(u64),
    /// A field that must be an `http(s)` URL is not one.
    #[error("field `{0}` must be an http:// or https:// URL")]
    NotHttpUrl(&'static str),
}

/// A model call that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    /// The request could not be sent, the connection failed or timed out.
    #[error("model transport error: {0}")]
    Transport(String),
    /// The server answered with an error status not classified more precisely below.
    #[error("model server answered {status}: {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The server is rate-limiting us (HTTP 429 or a rate-limit error). Not an overflow.
    #[error("model rate limit: {message}")]
    RateLimited {
        /// The server's message.
        message: String,
    },
    /// The account has no quota or credit left. Not an overflow, and retrying does not help.
    #[error("model quota or billing error: {message}")]
    Billing {
        /// The server's message.
        message: String,
    },
    /// The prompt did not fit the model's context window. Compaction, not a retry, helps.
    #[error("context too long for the model: {message}")]
    ContextOverflow {
        /// The server's message.
        message: String,
        /// The model's real context window, when the error states it (server tokens).
        limit: Option<u32>,
        /// The prompt's size as the server counted it, when the error states it.
        prompt_tokens: Option<u32>,
    },
    /// The server reported an error inside its answer (in the middle of a stream, or in the
    /// body of a 200) without a status to classify it by.
    #[error("model server reported an error: {0}")]
    Server(String),
    /// The answer could not be understood.
    #[error("unexpected model response: {0}")]
    Protocol(String),
    /// The call was cancelled.
    #[error("model call cancelled")]
    Cancelled,
}

impl ModelError {
    /// Whether the prompt was too long for the model (compact, then retry).
    pub fn is_overflow(&self) -> bool {
        matches!(self, ModelError::ContextOverflow { .. })
    }

    /// Whether the same request may succeed if sent again after a pause: connection errors,
    /// 408, 409, 429 and 5xx answers, and errors reported inside an answer.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Transport(_) | ModelError::RateLimited { .. } | ModelError::Server(_) => {
                true
            }
            ModelError::Status { status, .. } => matches!(status, 408 | 409) || *status >= 500,
            ModelError::Billing { .. }
            | ModelError::ContextOverflow { .. }
            | ModelError::Protocol(_)
            | ModelError::Cancelled => false,
        }
    }

    /// A short, stable name of the failure, used as a metrics label.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::Transport(_) => "transport",
            ModelError::Status { .. } => "status",
            ModelError::ContextOverflow { .. } => "context_overflow",
            ModelError::RateLimited { .. } => "rate_limited",
            ModelError::Billing { .. } => "billing",
            ModelError::Server(_) => "server",
            ModelError::Protocol(_) => "protocol",
            ModelError::Cancelled => "cancelled",
        }
    }
}

/// The runtime's general error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Configuration problem.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Storage problem.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Invalid inbound message.
    #[error(transparent)]
    Inbound(#[from] InboundError),
    /// Model problem.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Context assembly problem.
    #[error(transparent)]
    Context(#[from] crate::context::ContextError),
    /// The actor system is unavailable (stopped or overloaded).
    #[error(transparent)]
    Actors(#[from] turnstile_actors::ActorsError),
    /// Too much queued work; try again later.
    #[error("over capacity: {0}")]
    Overloaded(String),
    /// The runtime is shutting down.
    #[error("the runtime is shutting down")]
    ShuttingDown,
    /// Waiting for a reply took too long.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The operation exists in the API but not in this build (e.g. compaction before the
    /// compactor is wired in).
    #[error("not available in this build: {0}")]
    NotAvailable(&'static str),
    /// The disk (or the disk budget) has no room for the write; retry later.
    #[error("insufficient storage: {reason}")]
    InsufficientStorage {
        /// Why.
        reason: String,
    },
    /// The operation conflicts with work in progress (e.g. deleting a session mid-turn).
    #[error("conflict: {0}")]
    Conflict(String),
    /// In a cluster: the replicated inbox or changelog did not take a write; retry later.
    #[error("cluster unavailable: {0}")]
    Replication(String),
}

impl Error {
    /// A short stable name for the kind of error, for counters and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::Store(_) => "store",
            Error::Inbound(_) => "invalid_message",
            Error::Model(_) => "model",
            Error::Actors(_) => "unavailable",
            Error::Overloaded(_) => "overloaded",
            Error::ShuttingDown => "shutting_down",
            Error::Timeout(_) => "timeout",
            Error::Context(_) => "context",
            Error::NotAvailable(_) => "not_available",
            Error::Conflict(_) => "conflict",
            Error::Replication(_) => "replication",
            Error::InsufficientStorage { .. } => "insufficient_storage",
        }
    }
}
