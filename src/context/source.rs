//! [`ContextSource`]: something that contributes blocks to a turn's context.

use super::block::ContextBlock;
use super::budget::TokenBudget;
use super::error::ContextError;
use super::session::SessionView;

/// Contributes blocks to a turn's context. Sources run in the configured order; each sees the
/// budget left by those before it.
///
/// The pipeline stamps every block with the stage's name, priority, weight and collection
/// index, and drops (recording why) any block that does not fit the remaining budget, so
/// `collect` must respect `budget.remaining()`: a source may return one block past it only to
/// let the dump say why the rest was left out (history does).
pub trait ContextSource: Send + Sync {
    /// The name it is registered under.
    fn name(&self) -> &str;

    /// The priority of its blocks when the config sets none (0–100).
    fn default_priority(&self) -> u8 {
        50
    }

    /// Orders its blocks against other sources' blocks of equal priority (higher first).
    fn weight(&self, _session: &SessionView<'_>) -> i32 {
        0
    }

    /// A cheap value that changes whenever inputs outside the session change (files it reads,
    /// say); the assembly cache compares it. Sources that read only the session return 0.
    fn fingerprint(&self, _session: &SessionView<'_>) -> u64 {
        0
    }

    /// The blocks for this turn, within `budget.remaining()` tokens.
    fn collect(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError>;

    /// Appends what [`ContextSource::collect`] returns to `out`, the blocks collected so far;
    /// what the pipeline calls. A source of many blocks (the history) writes them straight
    /// into `out`, reserving [`ROOM_AFTER_SOURCE`] more, so that they are not moved again.
    fn collect_into(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
        out: &mut Vec<ContextBlock>,
    ) -> Result<(), ContextError> {
        let produced = self.collect(session, budget)?;
        out.reserve(produced.len() + ROOM_AFTER_SOURCE);
        out.extend(produced);
        Ok(())
    }
}

/// Room left in the collected blocks past each source's output, for the few blocks the
/// sources after it add. Context blocks are large and the history is most of them: the list
/// grows once past the history (while it holds only the blocks before it) instead of being
/// copied whole again for the current message.
pub(crate) const ROOM_AFTER_SOURCE: usize = 16;
