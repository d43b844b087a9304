//! The built-in processors (SPEC §4), one file each.

mod dedupe;
mod message_count;
mod sanitize;
mod tool_pairing;
mod tool_result_guard;
mod trim_to_budget;
mod ttl_decay;

pub(crate) use dedupe::Dedupe;
pub(crate) use message_count::MessageCount;
pub(crate) use sanitize::Sanitize;
pub(crate) use tool_pairing::{ToolPairing, MISSING_RESULT_TEXT};
pub(crate) use tool_result_guard::{
    ToolResultGuard, CLEARED_TOOL_RESULT, KEEP_HEAD_CHARS, KEEP_TAIL_CHARS, TRIM_ABOVE_CHARS,
};
pub(crate) use trim_to_budget::TrimToBudget;
pub(crate) use ttl_decay::TtlDecay;

use super::processor::ContextProcessor;
use super::registry::Registry;

pub(super) fn register_builtin(r: &mut Registry) {
    fn boxed<P: ContextProcessor + 'static>(p: P) -> Box<dyn ContextProcessor> {
        Box::new(p)
    }
    r.register_processor("dedupe", |c| Dedupe::build(c).map(boxed));
    r.register_processor("sanitize", |c| Sanitize::build(c).map(boxed));
    r.register_processor("message_count", |c| MessageCount::build(c).map(boxed));
    r.register_processor("ttl_decay", |c| TtlDecay::build(c).map(boxed));
    r.register_processor("tool_result_guard", |c| {
        ToolResultGuard::build(c).map(boxed)
    });
    r.register_processor("trim_to_budget", |c| TrimToBudget::build(c).map(boxed));
    r.register_processor("tool_pairing", |c| ToolPairing::build(c).map(boxed));
}
