//! The context engine (SPEC §4): what a turn sends to the model, assembled inside a token
//! budget, and a report (the dump) of what was kept, what was dropped and why.
//!
//! # How an assembly runs
//! 1. **Sources** ([`ContextSource`]) collect [`ContextBlock`]s in the configured order, each
//!    within the budget the earlier ones left ([`TokenBudget`]). Built in: `system_prompt`,
//!    `current_message`, `bootstrap`, `skills`, `time_and_place`, `system_events`,
//!    `thread_starter`, `reply_thread`, `group_history`, `compaction_summary`,
//!    `memory_recall`, `history`, `chat_recall`.
//! 2. Blocks are ordered by precedence: priority desc, weight desc, collection index.
//! 3. **Processors** ([`ContextProcessor`]) rewrite or drop blocks, recording why: `dedupe`,
//!    `sanitize`, `message_count`, `ttl_decay`, `tool_result_guard`, `trim_to_budget`; then,
//!    always, `tool_pairing` and a final budget check. Immutable blocks (the system prompt) are
//!    never dropped.
//! 4. **Rendering** lays the kept blocks out as chat messages: the stable prefix (system
//!    prompt, bootstrap, skills) first and the clock line last in the system message, the
//!    conversation in transcript order, the current message last ([`Assembly`]).
//!
//! Stored history carries token counts computed when it was written; assembly never
//! re-tokenises it, and reads only as much of it as the policy and budget can use
//! ([`SessionView::transcript`]). Sources and processors are registered by name
//! ([`Registry`]) and configured in TOML (`[[context.sources]]`, `[[context.processors]]`,
//! [`StageSpec`]); pruning limits come from per-chat-kind presets ([`ChatPolicy`]).
//!
//! # Layout
//! - `block.rs`, `budget.rs`: blocks and the budget.
//! - `session.rs`: what stages see of a session; [`ContextStore`], the storage they read.
//! - `source.rs` + `sources/`, `processor.rs` + `processors/`: the stages.
//! - `registry.rs`, `config.rs`, `presets.rs`: stages by name, their TOML, pruning presets.
//! - `pipeline.rs`, `render.rs`, `dump.rs`: running the stages, messages, the report.
//! - `cache.rs`, `engine.rs`: the assembly cache and the engine the turn uses.
//! - `memory_store.rs`, `text.rs`, `error.rs`: an in-memory store, text helpers, errors.
//! - `order.rs`: sorting blocks by a key computed once, moving only those out of place.

pub(crate) mod analysis;
mod block;
mod block_text;
mod budget;
mod cache;
mod config;
mod dump;
mod engine;
mod error;
mod memory_store;
mod order;
mod pipeline;
mod presets;
mod processor;
pub(crate) mod processors;
mod registry;
mod render;
pub(crate) mod retrieval;
mod session;
mod source;
pub mod sources;
pub(crate) mod text;

#[cfg(test)]
mod tests;

pub use block::{BlockKind, BlockMeta, ContextBlock, DroppedBlock, Placement};
pub(crate) use block_text::{BlockText, MessageId};
pub(crate) use budget::TokenBudget;
pub use cache::CacheStats;
pub(crate) use config::{default_processors, default_sources, StageSpec};
pub use dump::Assembly;
pub use engine::{AssemblyRequest, ContextEngine};
pub use error::{ContextError, StageError};
pub use memory_store::MemoryStore;
pub use presets::PresetConfig;
pub(crate) use presets::{policy_for, resolve_preset, ChatKindPresets, Keep};
pub use processor::{Blocks, ContextProcessor, SummarySpan};
pub use registry::{Registry, StageContext};
pub(crate) use session::{chat_kind_of_key, chatter_before, chatter_of, QueueInfo, StoredSession};
pub use session::{CurrentMessage, SessionView};
pub use source::ContextSource;
pub(crate) use source::ROOM_AFTER_SOURCE;
#[cfg(test)]
pub(crate) use {
    presets::{builtin_preset, ChatPolicy},
    session::ContextStore,
};
