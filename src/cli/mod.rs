//! The operator subcommands of the binary (`stats`, `sessions …`) and logging set-up.
//! `main.rs` only parses and dispatches.
//!
//! Every operator command works against a running server (`--url`, the default) or directly on
//! a data dir (`--data-dir`, only when no server runs on it: sled locks the database).

pub(crate) mod doctor;
pub(crate) mod logging;
pub(crate) mod ops;
mod output;
mod target;

pub(crate) use target::Target;
