//! A turn whose prompt the model finds too long: compact the session and assemble again, up to
//! [`MAX_OVERFLOW_COMPACTIONS`](crate::pipeline::MAX_OVERFLOW_COMPACTIONS) times, then
//! answer with an error notice.

use turnstile_actors::{CompactionReason, TurnError, TurnReport};

use super::{failed, Turn, TurnEngine};
use crate::error::Error;
use crate::replies::ReplyErrorKind;

impl TurnEngine {
    /// Compacts the session after overflow `attempt` (`error`) so the next assembly fits. The
    /// lane waits: retrying before the swap would overflow again.
    pub(super) async fn compact_for_overflow(
        &self,
        turn: &mut Turn<'_>,
        error: &Error,
        attempt: u32,
    ) {
        let session_key = turn.session_key;
        tracing::info!(session_key, error = %error, attempt, "context overflow; compacting before retrying");
        if let Err(e) = self
            .compaction
            .compact_now(session_key, CompactionReason::Overflow)
            .await
        {
            tracing::warn!(session_key, error = %e, "overflow compaction failed");
        }
        turn.agent.context.invalidate(session_key);
        if let Some(fanout) = &mut turn.fanout {
            fanout.next_round();
        }
    }

    /// Answers a turn still too long after `compactions` compactions with an error notice.
    pub(super) async fn too_long(
        &self,
        turn: &Turn<'_>,
        error: &Error,
        compactions: u32,
    ) -> Result<TurnReport, TurnError> {
        let session_key = turn.session_key;
        tracing::warn!(session_key, error = %error, "context still too long after compacting; answering with an error");
        let reason = format!(
            "the conversation is too long for the model even after {compactions} compactions"
        );
        self.abandon_as(session_key, turn.batch, &reason, ReplyErrorKind::Model)
            .await
            .map(|()| TurnReport::default())
            .map_err(failed)
    }
}
