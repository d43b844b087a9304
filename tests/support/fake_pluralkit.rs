//! A fake PluralKit API: a **test double** standing in for `api.pluralkit.me/v2` on loopback,
//! scripted by the test. `GET /v2/messages/{id}` answers a proxied message (by the repost's id
//! or the original's, as PluralKit does) with its system and member, else 404;
//! `GET /v2/systems/{account}` answers 200 for accounts the test gave a system, else 404. The
//! next answers can be made 500s. Every request is recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

#[derive(Default)]
struct Shared {
    systems: HashMap<u64, String>,
    messages: HashMap<u64, Value>,
    failing: u32,
    requests: Vec<String>,
}

/// The fake PluralKit.
#[derive(Clone)]
pub struct FakePluralKit {
    shared: Arc<Mutex<Shared>>,
    /// `http://127.0.0.1:<port>/v2`: the API base (`pluralkit_api_base`).
    pub api_base: String,
}

impl FakePluralKit {
    /// Starts it on loopback.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api_base = format!("http://{}/v2", listener.local_addr().unwrap());
        let fake = Self {
            shared: Arc::new(Mutex::new(Shared::default())),
            api_base,
        };
        let app = Router::new()
            .route("/v2/messages/{id}", get(message))
            .route("/v2/systems/{id}", get(system))
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        fake
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap()
    }

    /// Gives Discord account `account` the system `system_id`.
    pub fn add_system(&self, account: u64, system_id: &str) {
        self.shared().systems.insert(account, system_id.to_string());
    }

    /// Records that `repost` proxies `original` of `account` as member `member`.
    pub fn proxy(&self, repost: u64, original: u64, account: u64, member: &str) {
        let mut s = self.shared();
        let system = s.systems.get(&account).cloned().unwrap_or_default();
        let body = json!({
            "timestamp": "2026-12-06T23:00:00Z", "id": repost.to_string(),
            "original": original.to_string(), "sender": account.to_string(),
            "channel": "20", "guild": "10",
            "system": {"id": system, "uuid": "00000000-0000-0000-0000-000000000000", "name": "The System"},
            "member": {"id": "mbrid", "name": member.to_lowercase(), "display_name": member}
        });
        s.messages.insert(repost, body.clone());
        s.messages.insert(original, body);
    }

    /// Answers the next `n` requests with a 500.
    pub fn fail_next(&self, n: u32) {
        self.shared().failing = n;
    }

    /// The paths asked, in order (`/messages/…`, `/systems/…`).
    pub fn requests(&self) -> Vec<String> {
        self.shared().requests.clone()
    }
}

fn failing(s: &mut Shared) -> Option<Response> {
    (s.failing > 0).then(|| {
        s.failing -= 1;
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    })
}

fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"message": format!("{what} not found."), "code": 20006})),
    )
        .into_response()
}

async fn message(State(f): State<FakePluralKit>, Path(id): Path<u64>) -> Response {
    let mut s = f.shared();
    s.requests.push(format!("/messages/{id}"));
    if let Some(r) = failing(&mut s) {
        return r;
    }
    match s.messages.get(&id) {
        Some(body) => axum::Json(body.clone()).into_response(),
        None => not_found("Message"),
    }
}

async fn system(State(f): State<FakePluralKit>, Path(id): Path<u64>) -> Response {
    let mut s = f.shared();
    s.requests.push(format!("/systems/{id}"));
    if let Some(r) = failing(&mut s) {
        return r;
    }
    match s.systems.get(&id) {
        Some(system) => axum::Json(json!({"id": system, "name": "The System"})).into_response(),
        None => not_found("System"),
    }
}
