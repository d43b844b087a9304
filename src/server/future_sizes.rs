//! What one in-flight turn holds in its tasks' futures, bounded without timing.
//!
//! A spawned task's allocation is as large as its future's largest await point, for the
//! task's whole life: a streaming turn keeps the turn task (lane → `TurnBackend::run_turn`)
//! and the stream task (`openai::stream_task`) for seconds, a whole answer keeps the
//! `chat_completions` handler (boxed by the router). Short-lived, rarely taken or large
//! sub-futures (admission, the commit, the overflow paths) are `Box::pin`ned so these stay
//! small; before that they were 5.1, 5.6 and 6.0 KiB (issue 45, memory per in-flight turn).
//! A change that inlines a large await again fails here.

use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use turnstile_actors::{Backend, SessionKey, TurnBatch, TurnControl};

use super::AppState;
use crate::pipeline::TurnBackend;
use crate::store::InboxItem;

/// Most bytes of the turn task's future (`TurnBackend::run_turn`), measured 1,976.
const TURN_FUTURE_BOUND: usize = 3 * 1024;

/// Most bytes of a streaming request's task (`openai::stream_task`), measured 2,192.
const STREAM_TASK_BOUND: usize = 3 * 1024;

/// Most bytes of the `chat_completions` handler's future, measured 1,704.
const HANDLER_FUTURE_BOUND: usize = 3 * 1024;

/// The size of the future `f` returns, without calling it.
fn output_size<A, F: Future>(_f: impl FnOnce(A) -> F) -> usize {
    std::mem::size_of::<F>()
}

type TurnArgs = (
    Arc<TurnBackend>,
    SessionKey,
    TurnBatch<InboxItem>,
    TurnControl<InboxItem>,
);

#[test]
fn an_in_flight_turns_futures_stay_small() {
    // What the lane spawns, less its few bytes of panic catching and reporting.
    let turn = output_size(|(backend, key, batch, control): TurnArgs| async move {
        backend.run_turn(key, batch, control).await
    });
    let stream = output_size(super::openai::stream_task);
    let handler = output_size(
        |(state, headers, body): (State<AppState>, HeaderMap, Result<Bytes, BytesRejection>)| {
            super::openai::chat_completions(state, headers, body)
        },
    );
    eprintln!("turn task {turn} B, stream task {stream} B, chat_completions {handler} B");
    assert!(
        turn <= TURN_FUTURE_BOUND,
        "the turn task's future is {turn} bytes"
    );
    assert!(
        stream <= STREAM_TASK_BOUND,
        "the stream task's future is {stream} bytes"
    );
    assert!(
        handler <= HANDLER_FUTURE_BOUND,
        "the chat_completions future is {handler} bytes"
    );
}
