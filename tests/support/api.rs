//! A thin client for the HTTP contract of SPEC §9a.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

use super::message::Msg;
use super::sse::SseStream;
use super::wait::http_client;

/// A transcript entry of `GET /v1/sessions/{key}/transcript`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub kind: String,
    pub text: String,
    #[serde(default)]
    pub message_id: Option<String>,
    #[serde(default)]
    pub sender: Option<String>,
    pub timestamp_ms: u64,
    pub tokens: u32,
}

/// A client for one server's HTTP API.
#[derive(Clone)]
pub struct Api {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub client: reqwest::Client,
}

/// Percent-encodes a session key for a URL path segment.
pub fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, NON_ALPHANUMERIC).to_string()
}

/// Reads a response as (status, JSON body); a body that is not JSON becomes a JSON string.
pub async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("reading a response body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

impl Api {
    pub fn new(base: String) -> Self {
        Self {
            base,
            client: http_client(),
        }
    }

    /// The absolute URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        json_of(response).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .delete(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("DELETE {path}: {e}"));
        json_of(response).await
    }

    /// `POST /v1/messages` with any JSON body.
    pub async fn post_message(&self, body: &Value) -> (StatusCode, Value) {
        self.post_raw("/v1/messages", body.to_string()).await
    }

    /// `POST path` with raw bytes as a JSON body.
    pub async fn post_raw(&self, path: &str, body: String) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        json_of(response).await
    }

    /// Sends a message that must be accepted; returns the session key of the `202`.
    pub async fn send(&self, msg: &Msg) -> String {
        let (status, body) = self.post_message(msg.json()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["status"], "accepted", "{body}");
        assert_eq!(body["message_id"], msg.json()["message_id"], "{body}");
        body["session_key"]
            .as_str()
            .unwrap_or_else(|| panic!("no session_key in {body}"))
            .to_string()
    }

    /// `GET /v1/sessions` (first page).
    pub async fn sessions(&self) -> Vec<Value> {
        let (status, body) = self.get("/v1/sessions?limit=1000").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body.as_array()
            .unwrap_or_else(|| panic!("not a list: {body}"))
            .clone()
    }

    /// `GET /v1/sessions/{key}`.
    pub async fn session(&self, key: &str) -> (StatusCode, Value) {
        self.get(&format!("/v1/sessions/{}", encode_key(key))).await
    }

    /// The whole transcript of `key` as raw JSON (every page), or `None` on 404.
    pub async fn transcript_json(&self, key: &str) -> Option<Vec<Value>> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let path = format!(
                "/v1/sessions/{}/transcript?after={after}&limit=1000",
                encode_key(key)
            );
            let (status, body) = self.get(&path).await;
            if status == StatusCode::NOT_FOUND {
                assert!(all.is_empty(), "session {key} vanished while paging");
                return None;
            }
            assert_eq!(status, StatusCode::OK, "{body}");
            let page = body
                .as_array()
                .unwrap_or_else(|| panic!("not a list: {body}"));
            let Some(last) = page.last() else {
                return Some(all);
            };
            let next = last["seq"]
                .as_u64()
                .unwrap_or_else(|| panic!("no seq in {last}"));
            assert!(next > after, "transcript paging went backwards: {last}");
            after = next;
            all.extend(page.iter().cloned());
        }
    }

    /// The whole transcript of `key`, or `None` on 404.
    pub async fn transcript(&self, key: &str) -> Option<Vec<Entry>> {
        self.transcript_json(key).await.map(|items| {
            items
                .into_iter()
                .map(|v| {
                    serde_json::from_value(v.clone())
                        .unwrap_or_else(|e| panic!("bad transcript entry {v}: {e}"))
                })
                .collect()
        })
    }

    /// Opens `GET /v1/events` (optionally filtered to one session). Once this returns, the
    /// server has subscribed: every later reply is on the stream.
    pub async fn events(&self, session_key: Option<&str>) -> SseStream {
        let path = match session_key {
            Some(k) => format!("/v1/events?session_key={}", encode_key(k)),
            None => "/v1/events".to_string(),
        };
        self.sse(self.client.get(self.url(&path))).await
    }

    /// Sends `request` and reads its body as Server-Sent Events.
    pub async fn sse(&self, request: reqwest::RequestBuilder) -> SseStream {
        let response = request
            // A stream lives as long as the test needs it.
            .timeout(Duration::from_secs(600))
            .send()
            .await
            .expect("opening an event stream");
        assert_eq!(response.status(), StatusCode::OK, "opening an event stream");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(
            content_type.starts_with("text/event-stream"),
            "content-type {content_type:?}"
        );
        SseStream::new(response)
    }
}

/// Posts a message with a plain client; `Ok(true)` when it was acknowledged (`202`), `Err` on
/// a transport error (the server is gone).
pub async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Result<bool, String> {
    let r = client
        .post(format!("{url}/v1/messages"))
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(r.status() == StatusCode::ACCEPTED)
}

/// A session's whole transcript as JSON, page by page; empty when the session is unknown.
pub async fn transcript(client: &reqwest::Client, url: &str, key: &str) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut after = 0u64;
    loop {
        let r = client
            .get(format!(
                "{url}/v1/sessions/{}/transcript?after={after}&limit=1000",
                encode_key(key)
            ))
            .send()
            .await
            .expect("reading a transcript");
        if r.status() == StatusCode::NOT_FOUND {
            return out;
        }
        let page: Vec<Value> = r.json().await.expect("a transcript page is JSON");
        let Some(last) = page.last() else { return out };
        after = last["seq"].as_u64().expect("entries have a seq");
        out.extend(page);
    }
}
