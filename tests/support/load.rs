//! Load and durability checks: senders that post as fast as the server takes them, and the
//! check that every acknowledged message was answered, in order, once.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::task::JoinHandle;

use super::api::{Api, Entry};
use super::message::{group_key, Msg};
use super::wait::{eventually, PATIENCE};

/// Senders that post messages as fast as the server takes them: one task per session
/// (`load-<n>`), each sequential, recording every message id that got a `202`. A task stops
/// at the first transport error (the server died) or `503` (it is shutting down); any other
/// status fails the test.
pub struct Load {
    acked: Arc<std::sync::atomic::AtomicUsize>,
    tasks: Vec<JoinHandle<(String, Vec<String>)>>,
}

impl Load {
    /// Starts `sessions` senders against `api`; message ids are `<prefix>-<session>-<n>`.
    pub fn start(api: &Api, sessions: usize, prefix: &str) -> Self {
        let acked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks = (0..sessions)
            .map(|s| {
                let (api, acked, prefix) = (api.clone(), Arc::clone(&acked), prefix.to_string());
                tokio::spawn(async move {
                    let chat = format!("load-{s}");
                    let mut ids = Vec::new();
                    for n in 0.. {
                        let id = format!("{prefix}-{s}-{n}");
                        let msg = Msg::group(&chat, &id, &format!("{id} says hello"));
                        let sent = api
                            .client
                            .post(api.url("/v1/messages"))
                            .json(msg.json())
                            .send()
                            .await;
                        let Ok(response) = sent else { break };
                        let status = response.status();
                        if status == StatusCode::SERVICE_UNAVAILABLE {
                            break;
                        }
                        // A transport error while reading the body: the server died.
                        let Ok(body) = response.text().await else {
                            break;
                        };
                        assert_eq!(status, StatusCode::ACCEPTED, "{id}: {body}");
                        ids.push(id);
                        acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    (group_key(&chat), ids)
                })
            })
            .collect();
        Self { acked, tasks }
    }

    /// Messages acknowledged so far, over all senders.
    pub fn acked(&self) -> usize {
        self.acked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until at least `n` messages were acknowledged.
    pub async fn wait_for_acks(&self, n: usize) {
        eventually(PATIENCE, "load to flow", || async move {
            let acked = self.acked();
            if acked >= n {
                Ok(())
            } else {
                Err(format!("{acked} acknowledged"))
            }
        })
        .await;
    }

    /// Waits for every sender to stop (the server must be gone or shutting down); returns
    /// each session key with the ids acknowledged in it, in send order.
    pub async fn finish(self) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for task in self.tasks {
            let done = tokio::time::timeout(PATIENCE, task)
                .await
                .expect("a sender did not stop");
            out.push(done.expect("a sender failed"));
        }
        out
    }
}

/// Why `entries` does not yet hold every id of `acked` as a user entry, in order, each once
/// and each followed by an assistant entry; `Ok` once it does. Once the transcript starts with
/// a compaction summary, the oldest acknowledged ids may have been compacted into it: only
/// the ids after them must be present.
pub fn all_answered(entries: &[Entry], acked: &[String]) -> Result<(), String> {
    let compacted = if entries.first().is_some_and(|e| e.kind == "summary") {
        let stored: std::collections::HashSet<&str> = entries
            .iter()
            .filter_map(|e| e.message_id.as_deref())
            .collect();
        acked
            .iter()
            .take_while(|id| !stored.contains(id.as_str()))
            .count()
    } else {
        0
    };
    let acked = &acked[compacted..];
    let users: Vec<(usize, &str)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == "user")
        .filter_map(|(i, e)| e.message_id.as_deref().map(|id| (i, id)))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for (_, id) in &users {
        // Not retryable: a message processed twice stays processed twice.
        assert!(seen.insert(*id), "message {id} is in the transcript twice");
    }
    let acked_set: std::collections::HashSet<&str> = acked.iter().map(String::as_str).collect();
    let present: Vec<(usize, &str)> = users
        .into_iter()
        .filter(|(_, id)| acked_set.contains(id))
        .collect();
    if present.len() < acked.len() {
        let missing: Vec<&String> = acked
            .iter()
            .filter(|id| !present.iter().any(|(_, p)| p == id))
            .take(5)
            .collect();
        return Err(format!(
            "{} of {} acknowledged messages missing, e.g. {missing:?}",
            acked.len() - present.len(),
            acked.len()
        ));
    }
    let order: Vec<&str> = present.iter().map(|(_, id)| *id).collect();
    assert_eq!(order, acked, "acknowledged messages out of order");
    let last_answer = entries.iter().rposition(|e| e.kind == "assistant");
    match present.last() {
        Some((i, id)) if last_answer.is_none_or(|a| a < *i) => {
            Err(format!("{id} (entry {i}) is not answered yet"))
        }
        _ => Ok(()),
    }
}

/// Waits until every session of `acked` has all its acknowledged messages, in order, answered.
pub async fn wait_all_answered(api: &Api, acked: &[(String, Vec<String>)]) {
    wait_all_answered_within(api, acked, PATIENCE).await;
}

/// [`wait_all_answered`], waiting at most `patience` per session.
pub async fn wait_all_answered_within(
    api: &Api,
    acked: &[(String, Vec<String>)],
    patience: Duration,
) {
    for (key, ids) in acked {
        if ids.is_empty() {
            continue;
        }
        let (key, ids) = (key.as_str(), ids.as_slice());
        eventually(
            patience,
            &format!(
                "every acknowledged message of {key} answered on {}",
                api.base
            ),
            || async move {
                let entries = api
                    .transcript(key)
                    .await
                    .ok_or_else(|| format!("no session {key}"))?;
                all_answered(&entries, ids)
            },
        )
        .await;
    }
}
