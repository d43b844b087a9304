//! Compaction's plain-Rust parts: summarising an old transcript span so it can replace that
//! span. The Compactor actor (triggers, cut point, atomic swap, cache) drives these.
//!
//! # Layout
//! - `identifiers`: every id, number with a unit, date, URL, path, @mention, e-mail, code span,
//!   person's name and decision clause of a text.
//! - `extractive`: the built-in summariser — fact-bearing lines kept (chatter dropped), about
//!   30% of the span, no network.
//! - `retention`: the fact-retention check and the `summary_max_tokens` cap.
//! - `prompt`: the structured summariser prompt and chunking of large spans.
//! - `compact`: [`SessionCompactor`] — cut point, rolling summary, cache, atomic swap.
//! - `summarizer`: [`Summarizer`] — model first (retried), extractive as the fallback,
//!   retention always.

mod compact;
mod extractive;
mod identifiers;
pub(crate) mod prompt;
pub mod retention;
mod summarizer;

pub(crate) use compact::{Cut, SessionCompactor};
pub use extractive::ExtractiveSummarizer;
pub(crate) use summarizer::{SummarizeError, Summarizer};
