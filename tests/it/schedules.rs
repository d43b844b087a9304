//! Scheduled turns over HTTP and through the binary: `/v1/schedules` adds, shows and deletes
//! jobs (bad ones refused, config jobs kept), a job's runs record the turn's real outcome, a
//! heartbeat with nothing to report is recorded as quiet, and a job due while the binary was
//! killed runs exactly once after the restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use turnstile::error::ModelError;
use turnstile::model::{Model, ModelReply, ModelRequest};

use crate::support::{
    data_dir, eventually, eventually_some, start_server_full, ServerProcess, PATIENCE,
};

/// A test double for a remote model: a heartbeat gets `HEARTBEAT_OK`, anything else an
/// acknowledgement.
struct HeartbeatModel;

impl Model for HeartbeatModel {
    fn name(&self) -> &str {
        "heartbeat-double"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        let last = request
            .messages
            .last()
            .map(|m| m.content.to_string())
            .unwrap_or_default();
        let text = if last.contains("Heartbeat.") {
            "HEARTBEAT_OK".to_string()
        } else {
            format!("done: {}", last.lines().last().unwrap_or_default())
        };
        Box::pin(async move {
            Ok(ModelReply {
                text,
                ..ModelReply::default()
            })
        })
    }
}

async fn post(server: &crate::support::Api, body: &Value) -> (reqwest::StatusCode, Value) {
    server.post_raw("/v1/schedules", body.to_string()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_added_run_and_deleted_over_http() {
    let server = start_server_full(
        data_dir(),
        |c| {
            c.schedules = turnstile::Config::parse(
                "[[schedules]]\nid = \"yearly\"\ncron = \"0 0 1 1 *\"\n\
                 time_zone = \"Europe/Berlin\"\nmessage = \"happy new year\"\n",
            )
            .expect("a valid schedule")
            .schedules;
        },
        Some(Arc::new(HeartbeatModel)),
    )
    .await;
    let api = &server.api;

    let (status, job) = post(
        api,
        &json!({"id": "ping", "every_ms": 1000, "message": "ping the team"}),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    assert_eq!(job["session_key"], "agent:main:schedule:ping");
    assert_eq!(job["origin"], "api");
    let (status, body) = post(
        api,
        &json!({"id": "ping", "every_ms": 1000, "message": "x"}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    for (bad, says) in [
        (
            json!({"id": "b", "cron": "61 * * * *", "message": "x"}),
            "outside 0-59",
        ),
        (json!({"id": "b", "every_ms": 1000}), "message"),
        (json!({"id": "B!", "every_ms": 1000, "message": "x"}), "id"),
        (
            json!({"id": "b", "every_ms": 1000, "message": "x", "agent": "ghost"}),
            "ghost",
        ),
        (
            json!({"id": "b", "every_ms": 1000, "message": "x", "colour": 1}),
            "colour",
        ),
    ] {
        let (status, body) = post(api, &bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{bad}: {body}");
    }
    let (status, body) = api.get("/v1/schedules/b").await;
    assert_eq!(status, 404, "nothing refused was stored: {body}");

    let (status, body) = post(
        api,
        &json!({"id": "hb", "every_ms": 1000, "heartbeat": true}),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Each job's first run records what its turn answered.
    let ping = eventually_some(PATIENCE, "a run of ping answered", || async {
        let (_, job) = api.get("/v1/schedules/ping").await;
        let answered = job["runs"]
            .as_array()?
            .iter()
            .find(|r| r["status"] == "answered")?
            .clone();
        Some(answered)
    })
    .await;
    assert_eq!(ping["reply"], "done: ping the team", "{ping}");
    assert!(ping["finished_at_ms"].as_u64() >= ping["started_at_ms"].as_u64());
    let quiet = eventually_some(PATIENCE, "a quiet heartbeat", || async {
        let (_, job) = api.get("/v1/schedules/hb").await;
        let runs = job["runs"].as_array()?.clone();
        runs.into_iter().find(|r| r["status"] == "quiet")
    })
    .await;
    assert!(quiet["due_ms"].is_u64(), "{quiet}");

    let (status, list) = api.get("/v1/schedules").await;
    assert_eq!(status, 200, "{list}");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert_eq!(ids, ["hb", "ping", "yearly"]);

    let (status, body) = api.delete("/v1/schedules/yearly").await;
    assert_eq!(status, 409, "a config job stays: {body}");
    let (status, body) = api.delete("/v1/schedules/ping").await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = api.get("/v1/schedules/ping").await;
    assert_eq!(status, 404);
    let (_, audit) = api.get("/v1/admin/audit").await;
    let actions = audit.to_string();
    assert!(
        actions.contains("schedule.create") && actions.contains("schedule.delete"),
        "{audit}"
    );
    server.stop().await;
}

/// The runs of `job` as the server shows them: (due, started, status).
async fn runs(api: &crate::support::Api, job: &str) -> Vec<(u64, u64, String)> {
    let (_, body) = api.get(&format!("/v1/schedules/{job}")).await;
    body["runs"]
        .as_array()
        .map(|runs| {
            runs.iter()
                .map(|r| {
                    (
                        r["due_ms"].as_u64().unwrap_or_default(),
                        r["started_at_ms"].as_u64().unwrap_or_default(),
                        r["status"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_due_while_the_binary_was_killed_runs_exactly_once_after_the_restart() {
    let dir = data_dir();
    let config_dir = tempfile::tempdir().expect("a config dir");
    let config = "[[schedules]]\nid = \"digest\"\nevery_ms = 1000\n\
                  message = \"post the digest\"\nmissed = \"run_once\"\n";
    let mut server = ServerProcess::start(dir.path(), config_dir.path(), config).await;
    eventually(PATIENCE, "two answered runs", || async {
        let answered = runs(&server.api, "digest")
            .await
            .iter()
            .filter(|r| r.2 == "answered")
            .count();
        if answered >= 2 {
            Ok(())
        } else {
            Err(format!("{answered} answered"))
        }
    })
    .await;
    server.kill9();
    // Down for several due times.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let restarted_at = now_ms();
    let server = ServerProcess::start(dir.path(), config_dir.path(), config).await;
    eventually(PATIENCE, "runs after the restart", || async {
        let after = runs(&server.api, "digest")
            .await
            .iter()
            .filter(|r| r.0 > restarted_at && r.2 == "answered")
            .count();
        if after >= 2 {
            Ok(())
        } else {
            Err(format!("{after} runs due after the restart answered"))
        }
    })
    .await;
    let all = runs(&server.api, "digest").await;
    // Due before the restart, started after it: the missed run, once however many times it
    // was due while the server was down.
    let missed: Vec<_> = all
        .iter()
        .filter(|r| r.0 < restarted_at && r.1 >= restarted_at)
        .collect();
    assert_eq!(missed.len(), 1, "{all:?}");
    assert!(all.iter().all(|r| r.2 != "failed"), "{all:?}");

    // Every run's turn happened once: one user entry per message id, each answered.
    let transcript = server
        .api
        .transcript_json("agent:main:schedule:digest")
        .await
        .expect("the job's session");
    let mut asked: HashMap<String, usize> = HashMap::new();
    for (i, e) in transcript.iter().enumerate() {
        if e["kind"] == "user" {
            let id = e["message_id"].as_str().unwrap_or_default().to_string();
            assert!(id.starts_with("schedule:digest:"), "{e}");
            *asked.entry(id).or_default() += 1;
            assert_eq!(
                transcript.get(i + 1).map(|n| n["kind"].clone()),
                Some(json!("assistant")),
                "each run answered: {e}"
            );
        }
    }
    assert!(asked.values().all(|n| *n == 1), "asked twice: {asked:?}");
    for (due, _, status) in &all {
        if status == "answered" {
            assert_eq!(
                asked.get(&format!("schedule:digest:{due}")),
                Some(&1),
                "{all:?}"
            );
        }
    }
}
