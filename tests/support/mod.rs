//! What every integration test binary shares (`mod support;`, or `#[path]` from `tests/it`):
//! servers in this process ([`server`]) and the real binary as a child process
//! ([`process`]), a thin client for the HTTP contract of SPEC §9a ([`api`]), an SSE reader
//! ([`sse`]), inbound message builders ([`message`]), small test models ([`models`]), polling instead of fixed sleeps
//! ([`wait`]), and load with its durability checks ([`load`]).
//!
//! Everything here talks real HTTP on loopback to a server with a real sled database in a
//! fresh temporary directory. The helpers' own checks are `tests/it/support_checks.rs`.
// Each test binary uses a different part of this tree.
#![allow(dead_code, unused_imports)]

pub mod api;
pub mod fake_discord;
pub mod fake_pluralkit;
pub mod fake_slack;
pub mod load;
pub mod message;
pub mod models;
pub mod process;
pub mod server;
pub mod sse;
pub mod wait;

pub use api::*;
pub use load::*;
pub use message::*;
pub use models::*;
pub use process::*;
pub use server::*;
pub use sse::*;
pub use wait::*;
