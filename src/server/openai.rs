//! `POST /v1/chat/completions`, OpenAI-compatible. The runtime owns the history: only the
//! newest user message of the request is taken; the session comes from `X-Session-Key` or the
//! `user` field. The reply side lives in `openai/response.rs` (whole answers, errors,
//! `/v1/models`) and `openai/stream.rs` (streamed answers).

mod response;
mod stream;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream as futures_stream;

use super::chat_request;
use super::error::{body_bytes, ApiError};
use super::AppState;
use crate::clock::now_ms;
use crate::inbound::{
    user_session_key, ChatKind, DropReason, IdOrigin, InboundMessage, MessageKind, Sender,
    OPENAI_API_CHANNEL,
};
use crate::replies::Reply;
use crate::runtime::{Admitted, Runtime, StoredAnswer};

pub(super) use response::models;
pub(crate) use stream::{STREAM_EVENT_BUFFER, STREAM_KEEPALIVE};

fn completion_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "chatcmpl-{nanos:x}{:06x}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub(super) async fn chat_completions(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body)?;
    let request = chat_request::parse(&bytes)?;
    let session = headers
        .get("x-session-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| {
            request
                .user
                .as_deref()
                .filter(|u| !u.trim().is_empty())
                .map(user_session_key)
        })
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "missing_session",
                "name the session with the `user` field or an X-Session-Key header",
            )
        })?;
    let session = agent_session(&state.runtime, request.model.as_deref(), session)?;
    let (id, id_origin) = message_id(&state, &headers, &session, &bytes)?;
    if let Some(instructions) = &request.instructions {
        // Bounded like a message: they are stored and sent with every turn.
        let max = state.runtime.config().limits.max_inbound_chars;
        if instructions.chars().count() > max {
            return Err(ApiError::invalid_param(
                "messages",
                format!("the system messages are longer than {max} characters"),
            ));
        }
        Box::pin(
            state
                .runtime
                .set_session_instructions(&session, instructions),
        )
        .await?;
    }
    state
        .runtime
        .requests()
        .set_extras(&id, request.extras.clone(), now_ms());
    // Named in the answer until the reply says which model answered (a fallback may): the
    // session's agent's configured model, whatever name the request used.
    let model = state.runtime.agent_model(&session);
    let message = InboundMessage {
        channel: OPENAI_API_CHANNEL.into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Direct,
        chat_id: session.clone(),
        thread_id: None,
        message_id: id.clone(),
        sender: Sender {
            id: request.user.clone().unwrap_or_else(|| session.clone()),
            name: String::new(),
            is_bot: false,
        },
        text: request.input.text(),
        mentions: Vec::new(),
        mentioned_bot: true,
        reply_to: None,
        timestamp_ms: 0,
        attachments: Vec::new(),
        kind: MessageKind::Message,
    };
    let runtime = state.runtime.clone();
    let timeout = Duration::from_millis(runtime.config().server.reply_timeout_ms);
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);

    if !request.stream {
        let mut waiter = runtime.reply_to(&id);
        // Nothing is answered before the reply, so the reply's commit flush makes the inbox
        // write durable too: one flush per turn. A failed flush still ends the wait early.
        // Boxed, like the instructions' write above: the handler then parks on the reply with
        // only what it needs for the answer (see `HANDLER_FUTURE_BOUND`).
        let admitted = Box::pin(admit_or_join(&runtime, message, &session, id_origin)).await?;
        let reply = match admitted {
            Joined::Answered(answer) => Arc::new(stored_reply(&session, &id, answer)),
            Joined::Pending => match tokio::time::timeout(timeout, waiter.recv()).await {
                Ok(reply) => reply.ok_or(crate::Error::ShuttingDown)?,
                Err(_) => answered_after_timeout(&runtime, &session, &id).await?,
            },
            Joined::Admitted(admitted) => {
                let replied = async {
                    tokio::select! {
                        reply = waiter.recv() => Ok(reply),
                        Err(e) = runtime.admitted_durable(&admitted, false) => Err(e),
                    }
                };
                match tokio::time::timeout(timeout, replied).await {
                    Ok(reply) => {
                        let reply = reply?.ok_or(crate::Error::ShuttingDown)?;
                        // Already durable (the reply was published after a later flush): no
                        // flush asked for.
                        runtime.admitted_durable(&admitted, true).await?;
                        reply
                    }
                    Err(_) => answered_after_timeout(&runtime, &session, &id).await?,
                }
            }
        };
        if reply.error {
            return Err(response::failure(&reply));
        }
        return Ok(Json(response::completion(&id, created, &reply, &model)).into_response());
    }

    // Streaming: acknowledge first (errors still get a proper status), then stream the reply
    // as the model produces it.
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(STREAM_EVENT_BUFFER);
    let (accepted_tx, accepted_rx) = tokio::sync::oneshot::channel();
    let head = stream::StreamHead {
        id: id.clone(),
        created,
        model,
        include_usage: request.include_usage,
    };
    tokio::spawn(stream_task(StreamTask {
        runtime,
        message,
        session,
        id_origin,
        head,
        timeout,
        accepted: accepted_tx,
        events: tx,
    }));
    match accepted_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "submission task ended",
            ))
        }
    }
    let events = futures_stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(STREAM_KEEPALIVE))
        .into_response())
}

/// What the stream task of one streaming request starts from.
pub(super) struct StreamTask {
    runtime: Runtime,
    message: InboundMessage,
    session: String,
    id_origin: IdOrigin,
    head: stream::StreamHead,
    timeout: Duration,
    /// Told whether the message was admitted (and durable), before any event is sent.
    accepted: tokio::sync::oneshot::Sender<Result<(), ApiError>>,
    /// The SSE body's events.
    events: tokio::sync::mpsc::Sender<Event>,
}

/// The task behind a streaming answer: registers the waiter, submits, tells the handler how
/// the submission went, then forwards the reply's deltas and end to the SSE body.
pub(super) async fn stream_task(task: StreamTask) {
    let StreamTask {
        runtime,
        message,
        session,
        id_origin,
        head,
        timeout,
        accepted,
        events,
    } = task;
    let waiter = runtime.reply_stream_to(&head.id);
    // Boxed: the submission's state lives only until the message is admitted, while the
    // task then holds the stream for the whole answer (see `STREAM_TASK_BOUND`).
    let submitted = Box::pin(submit_or_join(&runtime, message, &session, id_origin));
    let joined = match submitted.await {
        Ok(joined) => {
            let _ = accepted.send(Ok(()));
            joined
        }
        Err(e) => {
            let _ = accepted.send(Err(e));
            return;
        }
    };
    let joined = joined.map(|answer| stored_reply(&session, &head.id, answer));
    stream::forward(head, waiter, joined, timeout, events).await;
}

/// The session a request names (`session`, from `X-Session-Key` or `user`), for the agent its
/// `model` selects (`agent:<id>` or an alias): the default agent's sessions are as named,
/// another agent's carry its id (`agent:<id>:<session>`). Any other model name leaves the
/// session as named (its key says whose it is). A model naming an agent that does not exist
/// is a `404 model_not_found`, a session of another agent a `400`.
fn agent_session(
    runtime: &Runtime,
    model: Option<&str>,
    session: String,
) -> Result<String, ApiError> {
    let Some(model) = model else {
        return Ok(session);
    };
    let agents = runtime.agents();
    match agents.agent_for_model(model) {
        Ok(None) => Ok(session),
        Ok(Some(agent)) => {
            let session = crate::inbound::normalize_session_key(&session);
            agents
                .session_for_agent(agent, &session)
                .map_err(|why| ApiError::invalid_param("model", why))
        }
        Err(why) => {
            Err(ApiError::new(StatusCode::NOT_FOUND, "model_not_found", why).with_param("model"))
        }
    }
}

/// The message id of this request: derived from its `Idempotency-Key` when it has one; else,
/// for a retry of the official clients (`x-stainless-retry-count` > 0) with the body of a
/// recent request of the session, that request's id; else a fresh one, remembered for its
/// retries only when the request marks its attempts (an unmarked retry could not be told
/// from a new request anyway). With where the id came from ([`IdOrigin`]).
fn message_id(
    state: &AppState,
    headers: &HeaderMap,
    session: &str,
    body: &[u8],
) -> Result<(String, IdOrigin), ApiError> {
    if let Some(value) = headers.get("idempotency-key") {
        let key = chat_request::idempotency_key(value.as_bytes())?;
        return Ok((
            chat_request::idempotent_message_id(session, &key),
            IdOrigin::Given,
        ));
    }
    let Some(attempt) = headers
        .get("x-stainless-retry-count")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
    else {
        return Ok((completion_id(), IdOrigin::Unique));
    };
    let requests = state.runtime.requests();
    let now = now_ms();
    let fingerprint = chat_request::fingerprint(session, body);
    if attempt > 0 {
        if let Some(id) = requests.earlier_attempt(&fingerprint, now) {
            return Ok((id, IdOrigin::Minted));
        }
    }
    let id = completion_id();
    requests.remember_attempt(&fingerprint, &id, now);
    Ok((id, IdOrigin::Minted))
}

/// What [`admit_or_join`] did with a message.
enum Joined {
    /// Admitted, not yet durable: the reply's commit flush covers it.
    Admitted(Admitted),
    /// A retry of a message answered already: its stored answer.
    Answered(StoredAnswer),
    /// A retry of a message whose reply is still to come.
    Pending,
}

/// [`submit_or_join`] for a caller that answers only with the reply: admits without waiting
/// for the flush (see [`Runtime::submit_for_reply`]).
async fn admit_or_join(
    runtime: &Runtime,
    message: InboundMessage,
    session: &str,
    id_origin: IdOrigin,
) -> Result<Joined, ApiError> {
    let id = message.message_id.clone();
    match runtime
        .submit_for_reply(message, Some(session.to_string()), id_origin)
        .await
    {
        Ok(admitted) => Ok(Joined::Admitted(admitted)),
        Err(e) if e.dropped() == Some(DropReason::Duplicate) => {
            Ok(match runtime.stored_answer(session, &id)? {
                Some(answer) => Joined::Answered(answer),
                None => Joined::Pending,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Submits `message` and waits until it is durable; a retry of an accepted one (a duplicate)
/// joins it instead: `Some` with its stored answer when it was answered, `None` when its reply
/// is still to come (wait on a waiter registered before this call).
async fn submit_or_join(
    runtime: &Runtime,
    message: InboundMessage,
    session: &str,
    id_origin: IdOrigin,
) -> Result<Option<StoredAnswer>, ApiError> {
    let id = message.message_id.clone();
    match runtime
        .submit_for_reply(message, Some(session.to_string()), id_origin)
        .await
    {
        Ok(admitted) => {
            runtime.admitted_durable(&admitted, true).await?;
            Ok(None)
        }
        Err(e) if e.dropped() == Some(DropReason::Duplicate) => {
            Ok(runtime.stored_answer(session, &id)?)
        }
        Err(e) => Err(e.into()),
    }
}

/// The reply of a wait that timed out: the stored answer if the message was answered after
/// all — in a cluster, a node without the session's partition hears a reply made elsewhere
/// through a lossy publish, and asks a node keeping the session here — else the timeout.
async fn answered_after_timeout(
    runtime: &Runtime,
    session: &str,
    id: &str,
) -> Result<Arc<Reply>, ApiError> {
    match runtime.stored_answer_anywhere(session, id).await {
        Ok(Some(answer)) => Ok(Arc::new(stored_reply(session, id, answer))),
        Ok(None) => Err(crate::Error::Timeout("the model's reply").into()),
        Err(e) => {
            tracing::debug!(error = %e, "no stored answer after a timed-out wait");
            Err(crate::Error::Timeout("the model's reply").into())
        }
    }
}

/// The reply a retry gets when its message was answered before it came: the stored answer
/// (no usage: the transcript does not keep it).
fn stored_reply(session: &str, message_id: &str, answer: StoredAnswer) -> Reply {
    Reply {
        session_key: session.to_string(),
        text: answer.text,
        in_reply_to: vec![message_id.to_string()],
        seq: 0,
        error: false,
        route: None,
        tool_calls: answer.tool_calls,
        usage: None,
        finish_reason: None,
        model: None,
        error_kind: None,
    }
}
