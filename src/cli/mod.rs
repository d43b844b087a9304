//! The subcommands of the binary and logging set-up; `main.rs` only parses and dispatches.
//! `serve.rs`: the server; `backup.rs`: `backup` and `restore`; `data.rs`: `doctor`, `import openclaw`, `export` on a data dir;
//! `loadtest.rs`: `loadtest`; `chat.rs`: `chat`; `ops.rs`: `stats`, `sessions …`;
//! `cluster.rs`: `cluster status` (feature `cluster` only).
//!
//! Every operator command works against a running server (`--url`, the default) or directly on
//! a data dir (`--data-dir`, only when no server runs on it: sled locks the database).

pub(crate) mod backup;
pub(crate) mod chat;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod data;
pub(crate) mod doctor;
pub(crate) mod loadtest;
pub(crate) mod logging;
pub(crate) mod ops;
mod output;
pub(crate) mod serve;
mod target;

pub(crate) use target::Target;
