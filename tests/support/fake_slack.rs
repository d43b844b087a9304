//! A fake Slack: a **test double** standing in for Slack's Web API and its Socket Mode
//! websocket, on loopback, scripted by the test.
//!
//! The Web API (axum, `POST /api/<method>`, form or JSON bodies): records every request;
//! `auth.test` and `apps.connections.open` check their tokens (bot and app-level);
//! `apps.connections.open` answers this fake's websocket URL; `chat.postMessage` keeps the
//! bot's message in its conversation's history (and echoes it on the socket as Slack does),
//! or answers the next sends with 429 and `Retry-After`; `chat.update` is recorded;
//! `conversations.history` (top-level messages after `oldest`, newest first, `limit`,
//! `has_more`), `conversations.replies` (a thread's first message and its replies after
//! `oldest`, oldest first; without `oldest`, as a thread's starter is read, it can answer
//! 500 when asked) and `conversations.info` read the histories. Both read in pages
//! as Slack does: at most `limit` messages (and at most the test's page cap, as Slack
//! answers fewer than asked for some apps), `response_metadata.next_cursor` naming where
//! the next page starts (older messages for the history, newer replies for a thread), and
//! `cursor` taking it back.
//!
//! The Socket Mode websocket: `hello` on connect; a user's message goes out as an
//! `events_api` envelope (a `message` event, and an `app_mention` too when it mentions the
//! bot, as for an app subscribed to both) on the live connection — or nowhere while none is
//! open (only the history has it then, as after an outage); acks (`{"envelope_id"}`) are
//! recorded; the test can redeliver an envelope, send `disconnect` (then close), or drop the
//! connection. It counts connections open at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_websockets::{Message as WsMessage, ServerBuilder};

/// The bot's user id.
pub const BOT_USER: &str = "UBOT";
/// The bot id its messages carry.
pub const BOT_ID: &str = "BBOT";
/// The workspace.
pub const TEAM: &str = "T1";
/// The bot token the fake accepts.
pub const BOT_TOKEN: &str = "xoxb-fake-bot-token";
/// The app-level token the fake accepts.
pub const APP_TOKEN: &str = "xapp-fake-app-token";

/// What the test can make the live connection do.
#[derive(Debug)]
enum Control {
    Send(String),
    Disconnect(String),
    Drop,
}

/// One Web API request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The method (`chat.postMessage`…).
    pub method: String,
    /// Its parameters (form fields as strings, or the JSON body).
    pub body: Value,
    /// When it came.
    pub at: std::time::Instant,
}

#[derive(Default)]
struct Shared {
    /// Conversation → every message, thread replies included, oldest first.
    history: BTreeMap<String, Vec<Value>>,
    /// Conversation → `channel_type`.
    types: HashMap<String, String>,
    requests: Vec<Recorded>,
    live: Option<(u64, mpsc::UnboundedSender<Control>)>,
    open_now: usize,
    max_open: usize,
    connections: u64,
    opens: u64,
    acks: Vec<String>,
    envelopes: Vec<(String, Value)>,
    post_429s: u32,
    retry_after_secs: u32,
    /// Most messages one history or replies page holds, whatever `limit` asks (none: `limit`).
    page_cap: Option<usize>,
    /// Thread-parent reads (`conversations.replies` without `oldest`) still to answer 500.
    parent_read_500s: u32,
}

/// The fake Slack.
#[derive(Clone)]
pub struct FakeSlack {
    shared: Arc<Mutex<Shared>>,
    next: Arc<AtomicU64>,
    /// The seconds of every `ts` (an hour before the fake started; the counter makes them
    /// distinct and ordered).
    epoch: u64,
    /// `http://127.0.0.1:<port>/api`: the Web API base (`api_base`).
    pub api_base: String,
    /// `ws://127.0.0.1:<port>/link`: what `apps.connections.open` answers.
    pub socket_url: String,
}

fn form(body: &[u8]) -> Value {
    let text = String::from_utf8_lossy(body);
    let mut out = serde_json::Map::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(&s.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        };
        out.insert(decode(k), Value::String(decode(v)));
    }
    Value::Object(out)
}

/// The `ts` a cursor of this fake names (`ts:<ts>`).
fn cursor_ts(cursor: &str) -> Option<u64> {
    cursor.strip_prefix("ts:").map(ts_key)
}

/// Messages per page: `limit` (Slack's default 100), under the test's cap.
fn page_size(limit: &str, cap: Option<usize>) -> usize {
    let limit: usize = limit.parse().unwrap_or(100);
    cap.map_or(limit, |c| c.min(limit)).max(1)
}

/// The first `size` of `list` as one page, with `has_more` and a `next_cursor` naming the
/// last `ts` served when more are left.
fn page(mut list: Vec<Value>, size: usize) -> Value {
    let has_more = list.len() > size;
    list.truncate(size);
    for m in &mut list {
        m.as_object_mut().unwrap().remove("channel");
    }
    let next = match (has_more, list.last()) {
        (true, Some(m)) => format!("ts:{}", m["ts"].as_str().unwrap()),
        _ => String::new(),
    };
    json!({"messages": list, "has_more": has_more, "response_metadata": {"next_cursor": next}})
}

fn ts_key(ts: &str) -> u64 {
    let (s, f) = ts.split_once('.').unwrap_or((ts, "0"));
    s.parse::<u64>().unwrap_or(0) * 1_000_000 + f.parse::<u64>().unwrap_or(0)
}

/// Whether `m` is a top-level message (what `conversations.history` lists).
fn top_level(m: &Value) -> bool {
    match m["thread_ts"].as_str() {
        None => true,
        Some(t) => t == m["ts"].as_str().unwrap_or("") || m["subtype"] == json!("thread_broadcast"),
    }
}

impl FakeSlack {
    /// Starts both sides on loopback.
    pub async fn start() -> Self {
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket_url = format!("ws://{}/link", socket.local_addr().unwrap());
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api_base = format!("http://{}/api", http.local_addr().unwrap());
        let fake = Self {
            shared: Arc::new(Mutex::new(Shared {
                retry_after_secs: 1,
                ..Shared::default()
            })),
            next: Arc::new(AtomicU64::new(1)),
            epoch: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                - 3_600,
            api_base,
            socket_url,
        };
        let app = Router::new()
            .route("/api/{method}", post(web_api))
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(http, app).await });
        let f = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = socket.accept().await {
                let f = f.clone();
                tokio::spawn(async move { f.serve_connection(stream).await });
            }
        });
        fake
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap()
    }

    fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// A fresh `ts`, later than every one before.
    pub fn next_ts(&self) -> String {
        format!("{}.{:06}", self.epoch, self.next())
    }

    /// Sets a conversation's kind (`channel`, `group`, `mpim`, `im`); default `channel`.
    pub fn set_type(&self, channel: &str, channel_type: &str) {
        self.shared()
            .types
            .insert(channel.into(), channel_type.into());
    }

    fn channel_type(&self, channel: &str) -> String {
        self.shared()
            .types
            .get(channel)
            .cloned()
            .unwrap_or_else(|| "channel".into())
    }

    fn message(&self, channel: &str, user: &str, text: &str, thread_ts: Option<&str>) -> Value {
        let ts = self.next_ts();
        let mut m = json!({"type": "message", "user": user, "text": text, "ts": ts,
                           "team": TEAM, "channel": channel});
        if let Some(t) = thread_ts {
            m["thread_ts"] = json!(t);
        }
        m
    }

    /// User `user` posts `text` in `channel` (in thread `thread_ts`): into the history and, on
    /// the live connection, as a `message` event (and an `app_mention` when it mentions the
    /// bot). Returns its `ts`.
    pub fn post(&self, channel: &str, user: &str, text: &str, thread_ts: Option<&str>) -> String {
        let m = self.message(channel, user, text, thread_ts);
        self.shared()
            .history
            .entry(channel.into())
            .or_default()
            .push(m.clone());
        self.deliver(channel, &m);
        m["ts"].as_str().unwrap().to_string()
    }

    /// Like [`Self::post`], but the socket never delivers it: only the history has it.
    pub fn post_unseen(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> String {
        let m = self.message(channel, user, text, thread_ts);
        self.shared()
            .history
            .entry(channel.into())
            .or_default()
            .push(m.clone());
        m["ts"].as_str().unwrap().to_string()
    }

    /// Sends the events of message `m` on the live connection, if one is open.
    fn deliver(&self, channel: &str, m: &Value) {
        let mut event = m.clone();
        event["channel_type"] = json!(self.channel_type(channel));
        event["event_ts"] = m["ts"].clone();
        self.envelope(event.clone());
        let mentions_bot = m["text"]
            .as_str()
            .is_some_and(|t| t.contains(&format!("<@{BOT_USER}>")));
        if mentions_bot && m["user"] != json!(BOT_USER) {
            let mut mention = event;
            mention["type"] = json!("app_mention");
            mention.as_object_mut().unwrap().remove("channel_type");
            self.envelope(mention);
        }
    }

    /// Sends an `events_api` envelope for `event` on the live connection.
    fn envelope(&self, event: Value) {
        let n = self.next();
        let id = format!("env-{n}");
        let frame = json!({
            "envelope_id": id, "type": "events_api", "accepts_response_payload": false,
            "retry_attempt": 0, "retry_reason": "",
            "payload": {"type": "event_callback", "team_id": TEAM, "api_app_id": "A1",
                        "event_id": format!("Ev{n}"), "event_time": self.epoch, "event": event}
        });
        let mut s = self.shared();
        let Some((_, tx)) = &s.live else { return };
        let _ = tx.send(Control::Send(frame.to_string()));
        s.envelopes.push((id, frame));
    }

    /// Sends a slash command envelope on the live connection.
    pub fn slash_command(&self, channel: &str, user: &str, command: &str, text: &str) {
        let n = self.next();
        let frame = json!({
            "envelope_id": format!("env-{n}"), "type": "slash_commands",
            "accepts_response_payload": true,
            "payload": {"command": command, "text": text, "user_id": user, "user_name": "ann",
                        "channel_id": channel, "team_id": TEAM, "trigger_id": format!("trig{n}")}
        });
        self.send(frame.to_string());
    }

    /// Sends the newest envelope again, as Slack does when it saw no ack in time.
    pub fn redeliver_last(&self) {
        let last = self.shared().envelopes.last().cloned();
        if let Some((_, mut frame)) = last {
            frame["retry_attempt"] = json!(1);
            frame["retry_reason"] = json!("timeout");
            self.send(frame.to_string());
        }
    }

    fn send(&self, text: String) {
        if let Some((_, tx)) = &self.shared().live {
            let _ = tx.send(Control::Send(text));
        }
    }

    /// Sends `disconnect` with `reason` (e.g. `refresh_requested`) and closes the connection.
    pub fn disconnect(&self, reason: &str) {
        let mut s = self.shared();
        if let Some((_, tx)) = s.live.take() {
            let _ = tx.send(Control::Disconnect(reason.into()));
        }
    }

    /// Drops the live connection without a word.
    pub fn drop_connection(&self) {
        let mut s = self.shared();
        if let Some((_, tx)) = s.live.take() {
            let _ = tx.send(Control::Drop);
        }
    }

    /// Answers the next `n` reads of a thread's first message alone (`conversations.replies`
    /// without `oldest`, as a thread starter is read; a catch-up always names `oldest`) with
    /// HTTP 500.
    pub fn fail_parent_reads(&self, n: u32) {
        self.shared().parent_read_500s = n;
    }

    /// Serves at most `n` messages per `conversations.history`/`replies` page, whatever the
    /// `limit` (as Slack does for some apps), so a catch-up must follow `next_cursor`.
    pub fn cap_pages(&self, n: usize) {
        self.shared().page_cap = Some(n);
    }

    /// Answers the next `n` `chat.postMessage` calls with 429 and `Retry-After: secs`.
    pub fn rate_limit_next_posts(&self, n: u32, secs: u32) {
        let mut s = self.shared();
        s.post_429s = n;
        s.retry_after_secs = secs;
    }

    /// Every Web API request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared().requests.clone()
    }

    /// The requests of `method` so far.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method)
            .map(|r| r.body)
            .collect()
    }

    /// Envelope ids acknowledged so far.
    pub fn acks(&self) -> Vec<String> {
        self.shared().acks.clone()
    }

    /// Envelope ids sent so far (redeliveries not counted).
    pub fn envelope_ids(&self) -> Vec<String> {
        self.shared()
            .envelopes
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether a connection is open and has been greeted.
    pub fn is_live(&self) -> bool {
        self.shared().live.is_some()
    }

    /// Websocket connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared().connections
    }

    /// `apps.connections.open` calls so far.
    pub fn opens(&self) -> u64 {
        self.shared().opens
    }

    /// Most websocket connections open at once so far.
    pub fn max_open_connections(&self) -> usize {
        self.shared().max_open
    }

    /// The bot's messages (`chat.postMessage` that succeeded), oldest first, with their
    /// conversation.
    pub fn sent(&self) -> Vec<(String, Value)> {
        let s = self.shared();
        let mut out: Vec<(String, Value)> = s
            .history
            .iter()
            .flat_map(|(c, list)| {
                list.iter()
                    .filter(|m| m["user"] == json!(BOT_USER))
                    .map(move |m| (c.clone(), m.clone()))
            })
            .collect();
        out.sort_by_key(|(_, m)| ts_key(m["ts"].as_str().unwrap()));
        out
    }

    async fn serve_connection(self, stream: tokio::net::TcpStream) {
        let Ok((_, ws)) = ServerBuilder::new().accept(stream).await else {
            return;
        };
        let (mut sink, mut source) = ws.split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Control>();
        let id = self.next();
        {
            let mut s = self.shared();
            s.connections += 1;
            s.open_now += 1;
            s.max_open = s.max_open.max(s.open_now);
        }
        let hello = json!({"type": "hello", "num_connections": 1,
            "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
            "connection_info": {"app_id": "A1"}});
        if sink.send(WsMessage::text(hello.to_string())).await.is_ok() {
            self.shared().live = Some((id, tx.clone()));
            loop {
                tokio::select! {
                    control = rx.recv() => match control {
                        Some(Control::Send(text)) => {
                            if sink.send(WsMessage::text(text)).await.is_err() {
                                break;
                            }
                        }
                        Some(Control::Disconnect(reason)) => {
                            let frame = json!({"type": "disconnect", "reason": reason,
                                               "debug_info": {"host": "fake-slack"}});
                            let _ = sink.send(WsMessage::text(frame.to_string())).await;
                            let _ = sink.send(WsMessage::close(None, "")).await;
                            break;
                        }
                        Some(Control::Drop) | None => break,
                    },
                    incoming = source.next() => {
                        let Some(Ok(msg)) = incoming else { break };
                        if msg.is_close() {
                            break;
                        }
                        let Some(text) = msg.as_text() else { continue };
                        if let Ok(v) = serde_json::from_str::<Value>(text) {
                            if let Some(id) = v["envelope_id"].as_str() {
                                self.shared().acks.push(id.to_string());
                            }
                        }
                    }
                }
            }
        }
        let mut s = self.shared();
        s.open_now -= 1;
        if s.live.as_ref().is_some_and(|(live, _)| *live == id) {
            s.live = None;
        }
    }

    fn record(&self, method: &str, body: Value) {
        self.shared().requests.push(Recorded {
            method: method.into(),
            body,
            at: std::time::Instant::now(),
        });
    }
}

fn bearer(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string()
}

fn ok(mut v: Value) -> Response {
    v["ok"] = json!(true);
    axum::Json(v).into_response()
}

fn error(code: &str) -> Response {
    axum::Json(json!({"ok": false, "error": code})).into_response()
}

async fn web_api(
    State(f): State<FakeSlack>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let is_json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let params = if is_json {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    } else {
        form(&body)
    };
    f.record(&method, params.clone());
    let token = bearer(&headers);
    if method == "apps.connections.open" {
        if token != APP_TOKEN {
            return error(if token.starts_with("xoxb-") {
                "not_allowed_token_type"
            } else {
                "invalid_auth"
            });
        }
        f.shared().opens += 1;
        let n = f.next();
        return ok(json!({"url": format!("{}?ticket=t{n}", f.socket_url)}));
    }
    if token != BOT_TOKEN {
        return error("invalid_auth");
    }
    let p = |k: &str| params[k].as_str().unwrap_or_default().to_string();
    match method.as_str() {
        "auth.test" => ok(json!({"url": "https://fake.slack.com/", "team": "Fake",
            "user": "turnbot", "team_id": TEAM, "user_id": BOT_USER, "bot_id": BOT_ID})),
        "chat.postMessage" => {
            {
                let mut s = f.shared();
                if s.post_429s > 0 {
                    s.post_429s -= 1;
                    let mut r = (
                        StatusCode::TOO_MANY_REQUESTS,
                        axum::Json(json!({"ok": false, "error": "ratelimited"})),
                    )
                        .into_response();
                    r.headers_mut().insert(
                        "retry-after",
                        HeaderValue::from_str(&s.retry_after_secs.to_string()).unwrap(),
                    );
                    return r;
                }
            }
            let channel = p("channel");
            let thread = params["thread_ts"].as_str();
            let mut m = f.message(&channel, BOT_USER, &p("text"), thread);
            m["bot_id"] = json!(BOT_ID);
            f.shared()
                .history
                .entry(channel.clone())
                .or_default()
                .push(m.clone());
            // Slack sends the bot's own message to the app too.
            f.deliver(&channel, &m);
            ok(json!({"channel": channel, "ts": m["ts"], "message": m}))
        }
        "chat.update" => {
            let (channel, ts) = (p("channel"), p("ts"));
            let mut s = f.shared();
            let found = s
                .history
                .get_mut(&channel)
                .and_then(|l| l.iter_mut().find(|m| m["ts"] == json!(ts)));
            match found {
                Some(m) if m["user"] == json!(BOT_USER) => {
                    m["text"] = json!(p("text"));
                    ok(json!({"channel": channel, "ts": ts, "text": p("text")}))
                }
                Some(_) => error("cant_update_message"),
                None => error("message_not_found"),
            }
        }
        "conversations.info" => {
            let channel = p("channel");
            let t = f.channel_type(&channel);
            ok(
                json!({"channel": {"id": channel, "is_im": t == "im", "is_mpim": t == "mpim",
                                  "is_private": t == "group" || t == "mpim",
                                  "is_channel": t == "channel"}}),
            )
        }
        "conversations.history" => {
            let oldest = ts_key(&p("oldest"));
            // The cursor is the `ts` the previous page ended at: this page is older.
            let before = cursor_ts(&p("cursor")).unwrap_or(u64::MAX);
            let s = f.shared();
            let mut list: Vec<Value> = s
                .history
                .get(&p("channel"))
                .map(|l| {
                    l.iter()
                        .filter(|m| {
                            let ts = ts_key(m["ts"].as_str().unwrap());
                            top_level(m) && ts > oldest && ts < before
                        })
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            // Newest first, as Slack answers.
            list.reverse();
            ok(page(list, page_size(&p("limit"), s.page_cap)))
        }
        "conversations.replies" => {
            if params.get("oldest").is_none() {
                let mut s = f.shared();
                if s.parent_read_500s > 0 {
                    s.parent_read_500s -= 1;
                    return StatusCode::INTERNAL_SERVER_ERROR.into_response();
                }
            }
            let thread = p("ts");
            let oldest = ts_key(&p("oldest"));
            // The cursor is the `ts` the previous page ended at: this page is newer.
            let after = cursor_ts(&p("cursor"));
            let s = f.shared();
            let all: Vec<Value> = s.history.get(&p("channel")).cloned().unwrap_or_default();
            let parent = all.iter().find(|m| m["ts"] == json!(thread)).cloned();
            // The thread's first message leads the first page only.
            let mut list: Vec<Value> = parent.into_iter().filter(|_| after.is_none()).collect();
            let from = oldest.max(after.unwrap_or(0));
            list.extend(
                all.iter()
                    .filter(|m| {
                        m["thread_ts"] == json!(thread)
                            && m["ts"] != json!(thread)
                            && ts_key(m["ts"].as_str().unwrap()) > from
                    })
                    .cloned(),
            );
            ok(page(list, page_size(&p("limit"), s.page_cap)))
        }
        _ => error("unknown_method"),
    }
}
