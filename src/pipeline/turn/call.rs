//! One model call of a turn: under the global concurrency cap, cancelled with the turn, its
//! text streamed to whoever watches.

use tokio::sync::mpsc;
use turnstile_actors::TurnControl;

use super::{TurnEngine, MODEL_DELTA_BUFFER};
use crate::error::{Error, ModelError};
use crate::metrics;
use crate::model::{Model, ModelReply, ModelRequest};
use crate::replies::DeltaFanout;
use crate::store::InboxItem;

/// Why a turn's model and tool rounds stopped without an answer.
pub(super) enum Stop {
    Cancelled,
    /// The model rejected the prompt as too long: compact, then retry.
    Overflow(Error),
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

impl TurnEngine {
    /// One model call under the global concurrency cap; the lane's cancellation aborts the
    /// wait and the call (dropping the request future aborts the HTTP request).
    pub(super) async fn complete(
        &self,
        model: &dyn Model,
        request: &ModelRequest,
        control: &mut TurnControl<InboxItem>,
        fanout: &mut Option<DeltaFanout<'_>>,
    ) -> Result<ModelReply, Stop> {
        let _permit = tokio::select! {
            permit = self.model_permits.acquire() => {
                permit.map_err(|_| Stop::Failed(ModelError::Cancelled.into()))?
            }
            _ = control.cancelled() => return Err(Stop::Cancelled),
        };
        tokio::select! {
            reply = Self::call_model(model, request, fanout) => reply.map_err(|e| {
                metrics::model_error(e.kind());
                if e.is_overflow() {
                    Stop::Overflow(e.into())
                } else {
                    Stop::Failed(e.into())
                }
            }),
            _ = control.cancelled() => Err(Stop::Cancelled),
        }
    }

    /// Calls the model, streaming its text to `fanout` when someone watches. Dropping the
    /// future (cancellation) ends the stream with the call.
    async fn call_model(
        model: &dyn Model,
        request: &ModelRequest,
        fanout: &mut Option<DeltaFanout<'_>>,
    ) -> Result<ModelReply, ModelError> {
        let Some(fanout) = fanout else {
            return model.complete(request).await;
        };
        let (tx, mut rx) = mpsc::channel(MODEL_DELTA_BUFFER);
        let call = model.complete_streaming(request, tx);
        tokio::pin!(call);
        let result = loop {
            tokio::select! {
                biased;
                Some(text) = rx.recv() => fanout.send(text),
                result = &mut call => break result,
            }
        };
        while let Ok(text) = rx.try_recv() {
            fanout.send(text);
        }
        fanout.next_round();
        result
    }
}
