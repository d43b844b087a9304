//! A fake Discord: a **test double** standing in for Discord's gateway and REST API, on
//! loopback, scripted by the test.
//!
//! The gateway (a websocket server): HELLO on connect; IDENTIFY answered with READY (a new
//! session, whose `resume_gateway_url` is this server's `/resume` path) and a GUILD_CREATE per
//! guild; RESUME answered by replaying the session's dispatches after the given sequence and
//! RESUMED — or by op 9 (not resumable) when the session is unknown or the test said so;
//! heartbeats acknowledged. The test can send op 7 (reconnect), op 9, close with a code, or
//! drop the connection. Every dispatch goes into its session's log, also while no connection
//! is open, as Discord buffers them for a resume.
//!
//! The REST side (axum, `/api/v10/...`): records every request; answers with rate-limit
//! headers; can answer the next message sends with 429s (JSON with `retry_after`, or a proxy's
//! HTML page); keeps each channel's message history (what users posted and what the bot sent)
//! for `GET /channels/{id}/messages?after=`; honours `nonce` + `enforce_nonce` as Discord does
//! (a repeated nonce returns the message already created); echoes the bot's own messages on
//! the gateway like Discord. Message edits (`PATCH /channels/{id}/messages/{id}`) change the
//! kept message and answer with the headers of their own bucket, which the test may make
//! tight (an edit past it gets a 429, counted, with `X-RateLimit-Scope` as Discord sends it
//! on 429s only).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_websockets::{CloseCode, Message as WsMessage, ServerBuilder};

/// The fake bot's user id.
pub const BOT_ID: u64 = 999;
/// The application id.
pub const APP_ID: u64 = 998;
/// The guild every scripted guild message is in.
pub const GUILD_ID: u64 = 10;
/// The bot's role in that guild.
pub const BOT_ROLE: u64 = 77;
/// The token the fake accepts.
pub const TOKEN: &str = "fake-discord-token";

/// What the test can make the live connection do.
#[derive(Debug)]
enum Control {
    Send(String),
    Close(u16),
}

/// One REST request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET`, `POST`…
    pub method: String,
    /// The path after `/api/v10`.
    pub path: String,
    /// The JSON body, if any.
    pub body: Value,
}

#[derive(Default)]
struct Session {
    log: Vec<(u64, String)>,
    seq: u64,
}

#[derive(Default)]
struct Shared {
    sessions: HashMap<String, Session>,
    /// The session of the live connection, and its control channel.
    live: Option<(String, mpsc::UnboundedSender<Control>)>,
    /// The newest session that can still be resumed (dispatches go to its log while no
    /// connection is live).
    current: Option<String>,
    identifies: u64,
    resumes: u64,
    refuse_resumes: bool,
    /// Paths the gateway was connected on (`/` or `/resume`).
    connections: Vec<String>,
    history: BTreeMap<u64, Vec<Value>>,
    /// Channel → parent, for threads.
    threads: HashMap<u64, u64>,
    requests: Vec<Recorded>,
    nonces: HashMap<String, Value>,
    json_429s: u32,
    html_429s: u32,
    close_on_identify: Option<u16>,
    edits: EditBucket,
    /// Reads of one message (`GET /channels/{id}/messages/{id}`) still to answer with a 500.
    failing_reads: u32,
    /// Reads of a channel (`GET /channels/{id}`) still to answer with a 500.
    failing_channel_reads: u32,
}

/// The edit route's rate-limit bucket: `limit` edits per window of `window`.
struct EditBucket {
    limit: u32,
    window: std::time::Duration,
    started: Option<std::time::Instant>,
    used: u32,
    /// Edits answered 429 (past the bucket).
    refused: u32,
}

impl Default for EditBucket {
    fn default() -> Self {
        Self {
            limit: 50,
            window: std::time::Duration::from_millis(50),
            started: None,
            used: 0,
            refused: 0,
        }
    }
}

/// The fake Discord.
#[derive(Clone)]
pub struct FakeDiscord {
    shared: Arc<Mutex<Shared>>,
    next_id: Arc<AtomicU64>,
    /// `http://127.0.0.1:<port>`: the REST base (`api_base`).
    pub api_base: String,
    /// `ws://127.0.0.1:<port>`: the gateway.
    pub gateway_url: String,
}

fn user(id: u64, bot: bool) -> Value {
    json!({"id": id.to_string(), "username": format!("user{id}"), "discriminator": "0",
           "avatar": null, "bot": bot, "global_name": format!("User {id}"),
           "public_flags": 0, "mfa_enabled": false})
}

/// A message as Discord sends it (all the fields twilight's model requires).
pub fn message_json(
    id: u64,
    channel: u64,
    guild: Option<u64>,
    author: u64,
    bot: bool,
    content: &str,
) -> Value {
    let mut m = json!({
        "id": id.to_string(), "channel_id": channel.to_string(),
        "author": user(author, bot),
        "content": content, "timestamp": "2026-12-06T23:00:00.000000+00:00",
        "edited_timestamp": null, "tts": false, "mention_everyone": false,
        "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
        "pinned": false, "type": 0
    });
    if let Some(g) = guild {
        m["guild_id"] = json!(g.to_string());
        m["member"] = json!({"roles": [], "deaf": false, "mute": false, "flags": 0,
            "joined_at": "2026-01-01T00:00:00.000000+00:00", "nick": null});
    }
    m
}

/// A message PluralKit reposts through its webhook `webhook` under `member`'s name (the
/// author is the webhook, a bot), as Discord delivers it.
pub fn webhook_json(id: u64, channel: u64, webhook: u64, member: &str, content: &str) -> Value {
    let mut m = message_json(id, channel, Some(GUILD_ID), webhook, true, content);
    m["webhook_id"] = json!(webhook.to_string());
    m["author"]["username"] = json!(member);
    m["author"]["global_name"] = Value::Null;
    m.as_object_mut().unwrap().remove("member");
    m
}

/// Mentions the bot in `m` (as `<@999>` in the text and in `mentions`).
pub fn mentioning_bot(mut m: Value) -> Value {
    m["mentions"] = json!([user(BOT_ID, true)]);
    m
}

impl FakeDiscord {
    /// Starts both sides on loopback.
    pub async fn start() -> Self {
        let gateway = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway_url = format!("ws://{}", gateway.local_addr().unwrap());
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api_base = format!("http://{}", http.local_addr().unwrap());
        let fake = Self {
            shared: Arc::new(Mutex::new(Shared::default())),
            next_id: Arc::new(AtomicU64::new(1_000)),
            api_base,
            gateway_url,
        };
        let app = Router::new()
            .route("/api/v10/users/@me", get(current_user))
            .route("/api/v10/applications/@me", get(application))
            .route("/api/v10/gateway/bot", get(gateway_bot))
            .route("/api/v10/channels/{id}", get(get_channel))
            .route(
                "/api/v10/channels/{id}/messages",
                post(create_message).get(channel_messages),
            )
            .route(
                "/api/v10/channels/{id}/messages/{mid}",
                patch(update_message).get(get_message),
            )
            .route("/api/v10/channels/{id}/typing", post(typing))
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(http, app).await });
        let f = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = gateway.accept().await {
                let f = f.clone();
                tokio::spawn(async move { f.serve_connection(stream).await });
            }
        });
        fake
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap()
    }

    /// A fresh message id, larger than every one before (ids are time-ordered on Discord).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::SeqCst)
    }

    /// Appends a dispatch to the current session (sending it if a connection is live).
    pub fn dispatch(&self, t: &str, d: Value) {
        let mut s = self.shared();
        let Some((session, tx)) = s.live.clone().or_else(|| {
            // No live connection: the current session buffers it, as Discord does.
            s.current.clone().map(|k| (k, mpsc::unbounded_channel().0))
        }) else {
            return;
        };
        let entry = s.sessions.entry(session).or_default();
        entry.seq += 1;
        let text = json!({"op": 0, "s": entry.seq, "t": t, "d": d}).to_string();
        entry.log.push((entry.seq, text.clone()));
        let _ = tx.send(Control::Send(text));
    }

    /// A user posts `m` (built with [`message_json`]): into the channel's history and on the
    /// gateway.
    pub fn post(&self, m: Value) {
        let channel: u64 = m["channel_id"].as_str().unwrap().parse().unwrap();
        self.shared()
            .history
            .entry(channel)
            .or_default()
            .push(m.clone());
        self.dispatch("MESSAGE_CREATE", m);
    }

    /// A user posts `m` while the gateway does not deliver it (a message only the REST
    /// history knows, as after an invalidated session).
    pub fn post_unseen(&self, m: Value) {
        let channel: u64 = m["channel_id"].as_str().unwrap().parse().unwrap();
        self.shared().history.entry(channel).or_default().push(m);
    }

    /// Deletes message `id` from `channel`'s history (PluralKit deleting an original) and
    /// sends MESSAGE_DELETE.
    pub fn delete(&self, channel: u64, id: u64) {
        self.shared()
            .history
            .entry(channel)
            .or_default()
            .retain(|m| m["id"].as_str() != Some(id.to_string().as_str()));
        self.dispatch(
            "MESSAGE_DELETE",
            json!({"id": id.to_string(), "channel_id": channel.to_string(), "guild_id": GUILD_ID.to_string()}),
        );
    }

    /// Makes `thread` a thread of `parent` (for `GET /channels/{thread}`).
    pub fn add_thread(&self, thread: u64, parent: u64) {
        self.shared().threads.insert(thread, parent);
    }

    /// Answers the next `n` reads of one message with a 500.
    pub fn fail_message_reads(&self, n: u32) {
        self.shared().failing_reads = n;
    }

    /// Answers the next `n` reads of a channel (`GET /channels/{id}`) with a 500.
    pub fn fail_channel_reads(&self, n: u32) {
        self.shared().failing_channel_reads = n;
    }

    /// Sends op 7 (reconnect) on the live connection.
    pub fn reconnect(&self) {
        self.control(Control::Send(json!({"op": 7, "d": null}).to_string()));
    }

    /// Sends op 9 (invalid session, `resumable` or not) on the live connection and forgets the
    /// session when it is not resumable.
    pub fn invalid_session(&self, resumable: bool) {
        if !resumable {
            let mut s = self.shared();
            if let Some((session, _)) = s.live.take() {
                s.sessions.remove(&session);
            }
            s.current = None;
        }
        self.control(Control::Send(json!({"op": 9, "d": resumable}).to_string()));
    }

    /// Closes the live connection with `code`.
    pub fn close(&self, code: u16) {
        self.control(Control::Close(code));
    }

    /// Closes every IDENTIFY from now on with `code` (4004: bad token, 4014: intents).
    pub fn close_on_identify(&self, code: u16) {
        self.shared().close_on_identify = Some(code);
    }

    /// Refuses every RESUME from now on (op 9, not resumable).
    pub fn refuse_resumes(&self, refuse: bool) {
        self.shared().refuse_resumes = refuse;
    }

    /// Answers the next `n` message sends with a JSON 429.
    pub fn rate_limit_next_sends(&self, n: u32) {
        self.shared().json_429s = n;
    }

    /// Answers the next `n` message sends with a proxy's HTML 429 page.
    pub fn html_429_next_sends(&self, n: u32) {
        self.shared().html_429s = n;
    }

    fn control(&self, c: Control) {
        if let Some((_, tx)) = &self.shared().live {
            let _ = tx.send(c);
        }
    }

    /// IDENTIFYs received.
    pub fn identifies(&self) -> u64 {
        self.shared().identifies
    }

    /// RESUMEs accepted.
    pub fn resumes(&self) -> u64 {
        self.shared().resumes
    }

    /// Paths of the gateway connections so far (`/` or `/resume`).
    pub fn connections(&self) -> Vec<String> {
        self.shared().connections.clone()
    }

    /// Makes the edit bucket `limit` edits per `window`.
    pub fn edit_bucket(&self, limit: u32, window: std::time::Duration) {
        let mut s = self.shared();
        s.edits.limit = limit;
        s.edits.window = window;
    }

    /// Edits answered 429 so far (sent past the bucket).
    pub fn edits_refused(&self) -> u32 {
        self.shared().edits.refused
    }

    /// Every REST request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared().requests.clone()
    }

    /// The bodies of the messages the bot sent (`POST /channels/*/messages` that succeeded),
    /// with the channel each went to.
    pub fn sent(&self) -> Vec<(u64, Value)> {
        let s = self.shared();
        let mut out = Vec::new();
        for (channel, list) in &s.history {
            for m in list {
                if m["author"]["id"] == json!(BOT_ID.to_string()) {
                    out.push((*channel, m.clone()));
                }
            }
        }
        out.sort_by_key(|(_, m)| m["id"].as_str().unwrap().parse::<u64>().unwrap());
        out
    }

    async fn serve_connection(self, stream: tokio::net::TcpStream) {
        let Ok((request, ws)) = ServerBuilder::new().accept(stream).await else {
            return;
        };
        let path = request.uri().path().trim_end_matches('/').to_string();
        let path = if path.is_empty() {
            "/".to_string()
        } else {
            path
        };
        self.shared().connections.push(path);
        let (mut sink, mut source) = ws.split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Control>();
        let hello = json!({"op": 10, "d": {"heartbeat_interval": 41_250}}).to_string();
        if sink.send(WsMessage::text(hello)).await.is_err() {
            return;
        }
        loop {
            tokio::select! {
                control = rx.recv() => match control {
                    Some(Control::Send(text)) => {
                        if sink.send(WsMessage::text(text)).await.is_err() {
                            break;
                        }
                    }
                    Some(Control::Close(code)) => {
                        let code = CloseCode::try_from(code).unwrap_or(CloseCode::NORMAL_CLOSURE);
                        let _ = sink.send(WsMessage::close(Some(code), "closed by the fake")).await;
                        break;
                    }
                    None => break,
                },
                incoming = source.next() => {
                    let Some(Ok(msg)) = incoming else { break };
                    let Some(text) = msg.as_text() else {
                        if msg.is_close() { break; }
                        continue;
                    };
                    let Ok(payload) = serde_json::from_str::<Value>(text) else { continue };
                    if !self.on_payload(&payload, &tx) {
                        break;
                    }
                }
            }
        }
        let mut s = self.shared();
        if s.live
            .as_ref()
            .is_some_and(|(_, live)| live.same_channel(&tx))
        {
            s.live = None;
        }
    }

    /// Handles one payload from the client; false to close the connection.
    fn on_payload(&self, p: &Value, tx: &mpsc::UnboundedSender<Control>) -> bool {
        match p["op"].as_u64() {
            Some(1) => {
                let _ = tx.send(Control::Send(json!({"op": 11, "d": null}).to_string()));
            }
            Some(2) => {
                let mut s = self.shared();
                s.identifies += 1;
                if p["d"]["token"] != json!(format!("Bot {TOKEN}")) {
                    let _ = tx.send(Control::Close(4004));
                    return true;
                }
                if let Some(code) = s.close_on_identify {
                    let _ = tx.send(Control::Close(code));
                    return true;
                }
                let session = format!("session-{}", s.identifies);
                s.sessions.insert(session.clone(), Session::default());
                s.current = Some(session.clone());
                s.live = Some((session, tx.clone()));
                drop(s);
                let resume_url = format!("{}/resume", self.gateway_url);
                self.dispatch("READY", json!({
                    "v": 10, "user": user(BOT_ID, true), "guilds": [{"id": GUILD_ID.to_string(), "unavailable": true}],
                    "session_id": self.shared().live.as_ref().unwrap().0.clone(),
                    "resume_gateway_url": resume_url, "shard": [0, 1],
                    "application": {"id": APP_ID.to_string(), "flags": 1 << 19}
                }));
                self.dispatch(
                    "GUILD_CREATE",
                    json!({
                        "id": GUILD_ID.to_string(), "name": "Fake guild",
                        "channels": [{"id": "20", "type": 0}, {"id": "21", "type": 0}],
                        "threads": [],
                        "members": [{"user": user(BOT_ID, true), "roles": [BOT_ROLE.to_string()]}]
                    }),
                );
            }
            Some(6) => {
                let mut s = self.shared();
                let id = p["d"]["session_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let after = p["d"]["seq"].as_u64().unwrap_or(0);
                if s.refuse_resumes || !s.sessions.contains_key(&id) {
                    s.sessions.remove(&id);
                    s.current = None;
                    let _ = tx.send(Control::Send(json!({"op": 9, "d": false}).to_string()));
                    return true;
                }
                s.resumes += 1;
                s.current = Some(id.clone());
                s.live = Some((id.clone(), tx.clone()));
                let session = s.sessions.get_mut(&id).unwrap();
                for (seq, text) in &session.log {
                    if *seq > after {
                        let _ = tx.send(Control::Send(text.clone()));
                    }
                }
                session.seq += 1;
                let resumed =
                    json!({"op": 0, "s": session.seq, "t": "RESUMED", "d": {}}).to_string();
                session.log.push((session.seq, resumed.clone()));
                let _ = tx.send(Control::Send(resumed));
            }
            _ => {}
        }
        true
    }

    fn record(&self, method: &str, path: String, body: Value) {
        self.shared().requests.push(Recorded {
            method: method.into(),
            path,
            body,
        });
    }
}

fn limited(mut response: Response) -> Response {
    let h = response.headers_mut();
    for (k, v) in [
        ("x-ratelimit-limit", "50"),
        ("x-ratelimit-remaining", "49"),
        ("x-ratelimit-reset-after", "0.050"),
        ("x-ratelimit-bucket", "fake-bucket"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    response
}

fn authorized(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bot {TOKEN}"))
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"message": "401: Unauthorized", "code": 0})),
    )
        .into_response()
}

async fn current_user(State(f): State<FakeDiscord>, headers: HeaderMap) -> Response {
    f.record("GET", "/users/@me".into(), Value::Null);
    if !authorized(&headers) {
        return unauthorized();
    }
    limited(axum::Json(user(BOT_ID, true)).into_response())
}

async fn application(State(f): State<FakeDiscord>) -> Response {
    f.record("GET", "/applications/@me".into(), Value::Null);
    limited(
        axum::Json(json!({
            "id": APP_ID.to_string(), "name": "Fake", "icon": null, "description": "",
            "bot_public": true, "bot_require_code_grant": false, "verify_key": "k",
            "team": null, "flags": 1 << 19, "owner": user(1, false), "summary": ""
        }))
        .into_response(),
    )
}

async fn gateway_bot(State(f): State<FakeDiscord>) -> Response {
    f.record("GET", "/gateway/bot".into(), Value::Null);
    limited(axum::Json(json!({
        "url": f.gateway_url, "shards": 1,
        "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
    })).into_response())
}

async fn get_channel(State(f): State<FakeDiscord>, Path(id): Path<u64>) -> Response {
    f.record("GET", format!("/channels/{id}"), Value::Null);
    let mut s = f.shared();
    if s.failing_channel_reads > 0 {
        s.failing_channel_reads -= 1;
        return limited(
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"message": "500: Internal Server Error", "code": 0})),
            )
                .into_response(),
        );
    }
    let parent = s.threads.get(&id).copied();
    drop(s);
    let body = match parent {
        Some(p) => {
            json!({"id": id.to_string(), "type": 11, "parent_id": p.to_string(), "guild_id": GUILD_ID.to_string()})
        }
        None => json!({"id": id.to_string(), "type": 0, "guild_id": GUILD_ID.to_string()}),
    };
    limited(axum::Json(body).into_response())
}

async fn typing(State(f): State<FakeDiscord>, Path(id): Path<u64>) -> Response {
    f.record("POST", format!("/channels/{id}/typing"), Value::Null);
    limited(StatusCode::NO_CONTENT.into_response())
}

async fn create_message(
    State(f): State<FakeDiscord>,
    Path(id): Path<u64>,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    f.record("POST", format!("/channels/{id}/messages"), body.clone());
    {
        let mut s = f.shared();
        if s.html_429s > 0 {
            s.html_429s -= 1;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("content-type", "text/html")],
                "<html><body>Error 1015: You are being rate limited</body></html>",
            )
                .into_response();
        }
        if s.json_429s > 0 {
            s.json_429s -= 1;
            let mut r = (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(json!({
                    "message": "You are being rate limited.", "retry_after": 0.05, "global": false
                })),
            )
                .into_response();
            r.headers_mut()
                .insert("retry-after", HeaderValue::from_static("1"));
            return limited(r);
        }
        if let (Some(nonce), true) = (body["nonce"].as_str(), body["enforce_nonce"] == json!(true))
        {
            if let Some(existing) = s.nonces.get(nonce) {
                return limited(axum::Json(existing.clone()).into_response());
            }
        }
    }
    let mid = f.next_id();
    let mut m = message_json(
        mid,
        id,
        Some(GUILD_ID),
        BOT_ID,
        true,
        body["content"].as_str().unwrap_or(""),
    );
    if let Some(reference) = body.get("message_reference") {
        m["message_reference"] =
            json!({"message_id": reference["message_id"], "channel_id": id.to_string(), "type": 0});
        m["type"] = json!(19);
    }
    {
        let mut s = f.shared();
        if let Some(nonce) = body["nonce"].as_str() {
            s.nonces.insert(nonce.to_string(), m.clone());
        }
        s.history.entry(id).or_default().push(m.clone());
    }
    // Discord echoes the bot's own message on the gateway.
    f.dispatch("MESSAGE_CREATE", m.clone());
    limited(axum::Json(m).into_response())
}

async fn update_message(
    State(f): State<FakeDiscord>,
    Path((id, mid)): Path<(u64, u64)>,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    f.record(
        "PATCH",
        format!("/channels/{id}/messages/{mid}"),
        body.clone(),
    );
    let mut s = f.shared();
    let now = std::time::Instant::now();
    let b = &mut s.edits;
    if b.started.is_none_or(|t| now >= t + b.window) {
        b.started = Some(now);
        b.used = 0;
    }
    let reset_after = (b.started.unwrap_or(now) + b.window).saturating_duration_since(now);
    let reset = format!("{:.3}", reset_after.as_secs_f64());
    if b.used >= b.limit {
        b.refused += 1;
        let mut r = (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(json!({
                "message": "You are being rate limited.", "retry_after": reset_after.as_secs_f64(),
                "global": false
            })),
        )
            .into_response();
        edit_headers(&mut r, b.limit, 0, &reset);
        // Discord names the scope on a 429 only; it is what makes twilight learn the bucket.
        r.headers_mut()
            .insert("x-ratelimit-scope", HeaderValue::from_static("user"));
        return r;
    }
    b.used += 1;
    let (limit, remaining) = (b.limit, b.limit - b.used);
    let Some(m) = s
        .history
        .get_mut(&id)
        .and_then(|l| l.iter_mut().find(|m| m["id"] == json!(mid.to_string())))
    else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"message": "Unknown Message", "code": 10008})),
        )
            .into_response();
    };
    if let Some(content) = body["content"].as_str() {
        m["content"] = json!(content);
    }
    m["edited_timestamp"] = json!("2026-01-01T00:00:01.000000+00:00");
    let mut r = axum::Json(m.clone()).into_response();
    edit_headers(&mut r, limit, remaining, &reset);
    r
}

fn edit_headers(r: &mut Response, limit: u32, remaining: u32, reset_after: &str) {
    let h = r.headers_mut();
    h.insert("x-ratelimit-limit", HeaderValue::from(limit));
    h.insert("x-ratelimit-remaining", HeaderValue::from(remaining));
    if let Ok(v) = HeaderValue::from_str(reset_after) {
        h.insert("x-ratelimit-reset-after", v);
    }
    h.insert(
        "x-ratelimit-bucket",
        HeaderValue::from_static("fake-edit-bucket"),
    );
}

/// `GET /channels/{id}/messages/{mid}`: one message of the channel's history (404 when it is
/// not there, as Discord answers `Unknown Message`).
async fn get_message(State(f): State<FakeDiscord>, Path((id, mid)): Path<(u64, u64)>) -> Response {
    f.record("GET", format!("/channels/{id}/messages/{mid}"), Value::Null);
    let mut s = f.shared();
    if s.failing_reads > 0 {
        s.failing_reads -= 1;
        return limited(
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"message": "500: Internal Server Error", "code": 0})),
            )
                .into_response(),
        );
    }
    let found = s.history.get(&id).and_then(|l| {
        l.iter()
            .find(|m| m["id"].as_str() == Some(mid.to_string().as_str()))
            .cloned()
    });
    match found {
        Some(mut m) => {
            m.as_object_mut().unwrap().remove("guild_id");
            limited(axum::Json(m).into_response())
        }
        None => limited(
            (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"message": "Unknown Message", "code": 10008})),
            )
                .into_response(),
        ),
    }
}

async fn channel_messages(
    State(f): State<FakeDiscord>,
    Path(id): Path<u64>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    f.record("GET", format!("/channels/{id}/messages"), json!(q));
    let after: u64 = q.get("after").and_then(|a| a.parse().ok()).unwrap_or(0);
    let limit: usize = q.get("limit").and_then(|a| a.parse().ok()).unwrap_or(50);
    let s = f.shared();
    let mut list: Vec<Value> = s
        .history
        .get(&id)
        .map(|l| {
            l.iter()
                .filter(|m| m["id"].as_str().unwrap().parse::<u64>().unwrap() > after)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    list.sort_by_key(|m| m["id"].as_str().unwrap().parse::<u64>().unwrap());
    list.truncate(limit);
    // REST reads carry no guild id; newest first, as Discord answers.
    for m in &mut list {
        m.as_object_mut().unwrap().remove("guild_id");
        m.as_object_mut().unwrap().remove("member");
    }
    list.reverse();
    limited(axum::Json(list).into_response())
}
