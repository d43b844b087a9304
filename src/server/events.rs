//! `GET /v1/events`: replies as Server-Sent Events (`event: reply`), and the text deltas of
//! replies while they stream (`event: delta`).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{select_with_strategy, PollNext};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;

use super::query::StrictQuery;
use super::AppState;
use crate::inbound::normalize_session_key;

#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    session_key: Option<String>,
    /// `true`: every turn streams its text while this subscriber is connected (otherwise
    /// only the deltas of turns that stream anyway — for a streaming request — are sent).
    #[serde(default)]
    deltas: bool,
}

pub(super) async fn stream(
    State(state): State<AppState>,
    StrictQuery(q): StrictQuery<EventsQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let filter = q.session_key.as_deref().map(normalize_session_key);
    let mut closing = state.closing.clone();
    let delta_filter = filter.clone();
    let watch = q.deltas.then(|| state.runtime.watch_deltas());
    let deltas = BroadcastStream::new(state.runtime.subscribe_deltas()).filter_map(move |d| {
        let event = match d {
            Ok(delta)
                if delta_filter
                    .as_ref()
                    .is_none_or(|k| *k == delta.session_key) =>
            {
                serde_json::to_string(&*delta)
                    .ok()
                    .map(|data| Event::default().event("delta").data(data))
            }
            // A consumer behind on deltas just misses some: the reply has the whole text.
            Ok(_) | Err(BroadcastStreamRecvError::Lagged(_)) => None,
        };
        std::future::ready(event.map(Ok))
    });
    let replies = BroadcastStream::new(state.runtime.subscribe()).filter_map(move |r| {
        let event = match r {
            Ok(reply) if filter.as_ref().is_none_or(|k| *k == reply.session_key) => {
                serde_json::to_string(&*reply)
                    .ok()
                    .map(|data| Event::default().event("reply").data(data))
            }
            Ok(_) => None,
            Err(BroadcastStreamRecvError::Lagged(n)) => {
                Some(Event::default().event("lagged").data(n.to_string()))
            }
        };
        std::future::ready(event.map(Ok))
    });
    // Deltas first: a reply's deltas are sent before it is published, so polling them first
    // keeps them ahead of their reply.
    let events =
        select_with_strategy(deltas, replies, |_: &mut ()| PollNext::Left).take_until(async move {
            // The watch lasts as long as the stream.
            let _watch = watch;
            let _ = closing.wait_for(|c| *c).await;
        });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
