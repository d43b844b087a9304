//! The built-in sources (SPEC §4), one file each.

mod attachments;
mod bootstrap;
mod chat_recall;
mod current;
mod group_history;
mod history;
mod memory_recall;
mod reply_thread;
mod skills;
mod summary;
mod system_events;
mod system_prompt;
mod thread_starter;
mod time_and_place;
mod workspace;

pub use bootstrap::BOOTSTRAP_FILES;
pub use chat_recall::RECALL_LABEL;
pub use current::QUEUED_HEADER;
#[cfg(test)]
pub(crate) use history::entry_block;
pub use reply_thread::THREAD_LABEL;
pub use skills::SKILLS_HEADER;
pub use summary::SUMMARY_HEADER;
pub use thread_starter::THREAD_STARTER_LABEL;
pub(crate) use time_and_place::time_zone;

use super::registry::Registry;
use super::source::ContextSource;

/// The marker opening pending group history.
pub const HISTORY_MARKER: &str = "[Chat messages since your last reply - for context]";
/// The marker before the current message when group history precedes it.
pub const CURRENT_MARKER: &str = "[Current message - respond to this]";

pub(super) fn register_builtin(r: &mut Registry) {
    fn boxed<S: ContextSource + 'static>(s: S) -> Box<dyn ContextSource> {
        Box::new(s)
    }
    r.register_source("system_prompt", |c| {
        system_prompt::SystemPromptSource::build(c).map(boxed)
    });
    r.register_source("current_message", |c| {
        current::CurrentSource::build(c).map(boxed)
    });
    r.register_source("bootstrap", |c| {
        bootstrap::BootstrapSource::build(c).map(boxed)
    });
    r.register_source("skills", |c| skills::SkillsSource::build(c).map(boxed));
    r.register_source("time_and_place", |c| {
        time_and_place::TimeAndPlaceSource::build(c).map(boxed)
    });
    r.register_source("system_events", |c| {
        system_events::SystemEventsSource::build(c).map(boxed)
    });
    r.register_source("thread_starter", |c| {
        thread_starter::ThreadStarterSource::build(c).map(boxed)
    });
    r.register_source("reply_thread", |c| {
        reply_thread::ReplyThreadSource::build(c).map(boxed)
    });
    r.register_source("group_history", |c| {
        group_history::GroupHistorySource::build(c).map(boxed)
    });
    r.register_source("compaction_summary", |c| {
        summary::SummarySource::build(c).map(boxed)
    });
    r.register_source("memory_recall", |c| {
        memory_recall::MemoryRecallSource::build(c).map(boxed)
    });
    r.register_source("chat_recall", |c| {
        chat_recall::ChatRecallSource::build(c).map(boxed)
    });
    r.register_source("history", |c| history::HistorySource::build(c).map(boxed));
}

/// Keeps the newest `lines` that fit `budget` tokens once framed by `frame` (which gets the
/// kept lines joined by newlines), counting exactly; returns the content and its tokens
/// (per-message overhead included), or `None` if not even one line fits.
pub(crate) fn fit_newest_lines(
    lines: &[String],
    budget: u32,
    tokens: crate::model::TokenCounter,
    frame: impl Fn(&str) -> String,
) -> Option<(String, u32)> {
    let overhead = crate::model::MESSAGE_OVERHEAD_TOKENS;
    let frame_cost = tokens.count(&frame(""));
    // Estimate with per-line counts, then confirm with an exact count, dropping the oldest
    // line while it does not fit.
    let mut start = lines.len();
    let mut sum = frame_cost + overhead;
    while start > 0 {
        let cost = tokens.count(&lines[start - 1]) + 1;
        if sum.saturating_add(cost) > budget {
            break;
        }
        sum += cost;
        start -= 1;
    }
    while start < lines.len() {
        let content = frame(&lines[start..].join("\n"));
        let exact = tokens.count(&content) + overhead;
        if exact <= budget {
            return Some((content, exact));
        }
        start += 1;
    }
    None
}
