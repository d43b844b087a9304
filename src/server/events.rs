//! `GET /v1/events`: replies as Server-Sent Events.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;

use super::AppState;
use crate::inbound::normalize_session_key;

#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    session_key: Option<String>,
}

pub(super) async fn stream(
    State(state): State<AppState>,
    Query(q): Query<EventsQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let filter = q.session_key.as_deref().map(normalize_session_key);
    let mut closing = state.closing.clone();
    let replies = BroadcastStream::new(state.runtime.subscribe())
        .filter_map(move |r| {
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
        })
        .take_until(async move {
            let _ = closing.wait_for(|c| *c).await;
        });
    Sse::new(replies).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
