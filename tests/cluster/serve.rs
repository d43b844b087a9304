//! Three `turnstile serve` processes on a real 3-node JetStream cluster, driven over the HTTP
//! contract as clients would: every node answers every session, and a node killed or paused
//! under load loses no acknowledged message and answers none twice.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::{Json, Router};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use turnstile::cluster::{partition_of, LEASES_BUCKET};

use super::nats::NatsCluster;
use super::support::{
    eventually, group_key, wait_all_answered_within, Api, Msg, ServerProcess, PATIENCE,
};

/// One of these tests at a time: each runs three NATS servers and three nodes, which is what
/// two cores can take while the timing of leases still means something.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Partitions of every test cluster: few, so each node owns several and a kill moves some.
pub const PARTITIONS: u32 = 12;

/// How long a node waits for its takeover and the answers after it: two leases (the lease to
/// expire, the view to notice) plus the replay.
fn takeover_patience(lease_ms: u64) -> Duration {
    PATIENCE + Duration::from_millis(3 * lease_ms)
}

/// Nodes `n1`, `n2`, … of one cluster, each with its own data dir.
pub struct Nodes {
    pub nodes: Vec<Option<ServerProcess>>,
    dirs: Vec<TempDir>,
    configs: Vec<String>,
}

impl Nodes {
    /// Starts `count` nodes on `nats` with `lease_ms`; `extra` is appended to every config
    /// (a `[model]` section, say).
    pub async fn start(nats: &NatsCluster, count: usize, lease_ms: u64, extra: &str) -> Nodes {
        let urls = nats
            .urls()
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut nodes = Nodes {
            nodes: Vec::new(),
            dirs: Vec::new(),
            configs: Vec::new(),
        };
        for i in 1..=count {
            let config = format!(
                "[cluster]\nnats = [{urls}]\nnode_id = \"n{i}\"\npartitions = {PARTITIONS}\n\
                 lease_ms = {lease_ms}\n{extra}"
            );
            let dir = tempfile::Builder::new()
                .prefix("turnstile-cluster-node-")
                .tempdir()
                .expect("creating a node dir");
            nodes.configs.push(config);
            nodes.dirs.push(dir);
            nodes.nodes.push(None);
        }
        let started = futures_util::future::join_all(
            (0..count).map(|i| Self::launch(nodes.dirs[i].path(), &nodes.configs[i])),
        )
        .await;
        nodes.nodes = started.into_iter().map(Some).collect();
        nodes
    }

    async fn launch(dir: &Path, config: &str) -> ServerProcess {
        let data = dir.join("data");
        ServerProcess::start(&data, dir, config).await
    }

    /// Node `i` (0-based), which must be running.
    pub fn node(&self, i: usize) -> &ServerProcess {
        self.nodes[i].as_ref().expect("the node is running")
    }

    /// The APIs of the running nodes.
    pub fn apis(&self) -> Vec<Api> {
        self.nodes.iter().flatten().map(|n| n.api.clone()).collect()
    }

    /// SIGKILLs node `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut node) = self.nodes[i].take() {
            node.kill9();
        }
    }

    /// Starts node `i` again on its data dir.
    pub async fn restart(&mut self, i: usize) {
        self.nodes[i] = Some(Self::launch(self.dirs[i].path(), &self.configs[i]).await);
    }

    /// Stops node `i` gracefully, removes its data dir (sessions, positions, everything) and
    /// starts it again: a wiped node rejoining.
    pub async fn wipe(&mut self, i: usize) {
        if let Some(mut node) = self.nodes[i].take() {
            node.stop().await;
        }
        let data = self.dirs[i].path().join("data");
        std::fs::remove_dir_all(&data).expect("removing the node's data dir");
        self.restart(i).await;
    }

    /// Stops every node gracefully.
    pub async fn stop(&mut self) {
        for node in self.nodes.iter_mut().flatten() {
            node.stop().await;
        }
    }
}

impl Drop for Nodes {
    /// With `TURNSTILE_KEEP_NODE_DIRS` set, the node dirs (data and logs) outlive the test,
    /// for a post-mortem; their paths are printed.
    fn drop(&mut self) {
        if std::env::var_os("TURNSTILE_KEEP_NODE_DIRS").is_some() {
            for dir in self.dirs.drain(..) {
                eprintln!("kept node dir {}", dir.keep().display());
            }
        }
    }
}

/// The leases bucket, read as an operator would.
pub async fn leases(nats: &NatsCluster) -> async_nats::jetstream::kv::Store {
    let client = async_nats::connect(nats.urls()).await.expect("connecting");
    async_nats::jetstream::new(client)
        .get_key_value(LEASES_BUCKET)
        .await
        .expect("the leases bucket")
}

/// Who holds each partition (node ids), as the leases say.
pub async fn holders(kv: &async_nats::jetstream::kv::Store) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        if let Ok(Some(entry)) = kv.entry(format!("p.{p}")).await {
            if entry.operation == async_nats::jetstream::kv::Operation::Put {
                if let Some(node) = String::from_utf8_lossy(&entry.value).split(' ').next() {
                    out.insert(p, node.to_string());
                }
            }
        }
    }
    out
}

/// Waits until every partition is held and `nodes` hold their shares (`P / n`, the remainder
/// one each): balancing has settled, so owners stay put while nothing fails.
pub async fn wait_balanced(nats: &NatsCluster, nodes: &[&str], patience: Duration) {
    let kv = leases(nats).await;
    let kv = &kv;
    let (low, high) = (
        PARTITIONS as usize / nodes.len(),
        (PARTITIONS as usize).div_ceil(nodes.len()),
    );
    eventually(
        patience,
        "every partition held, shared out evenly",
        || async move {
            let held = holders(kv).await;
            let all = held.len() == PARTITIONS as usize;
            let even = nodes.iter().all(|n| {
                let share = held.values().filter(|h| h == n).count();
                (low..=high).contains(&share)
            });
            if all && even {
                Ok(())
            } else {
                Err(format!("{held:?}"))
            }
        },
    )
    .await;
}

/// Senders posting group messages to the nodes in turn, one sequential sender per session,
/// recording every id that got a `202`. A node that fails a request (it died, it refused with
/// 503) is skipped for that message: the sender goes on with a new message on the next
/// node. At most [`MAX_PER_SENDER`] messages per sender.
pub struct ClusterLoad {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<(String, Vec<String>)>>,
}

/// Most messages one sender posts.
pub const MAX_PER_SENDER: usize = 2_000;

impl ClusterLoad {
    pub fn start(apis: Vec<Api>, sessions: usize, prefix: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let tasks = (0..sessions)
            .map(|s| {
                let (apis, stop, acked) = (apis.clone(), Arc::clone(&stop), Arc::clone(&acked));
                let prefix = prefix.to_string();
                tokio::spawn(async move {
                    let chat = format!("{prefix}-{s}");
                    let mut ids = Vec::new();
                    for n in 0..MAX_PER_SENDER {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let api = &apis[(s + n) % apis.len()];
                        let id = format!("{prefix}-{s}-{n}");
                        let msg = Msg::group(&chat, &id, &format!("{id} says hello"));
                        let sent = api
                            .client
                            .post(api.url("/v1/messages"))
                            .json(msg.json())
                            .timeout(Duration::from_secs(10))
                            .send()
                            .await;
                        let Ok(response) = sent else { continue };
                        let status = response.status();
                        let Ok(body) = response.text().await else {
                            continue;
                        };
                        match status {
                            StatusCode::ACCEPTED => {
                                ids.push(id);
                                acked.fetch_add(1, Ordering::Relaxed);
                            }
                            StatusCode::SERVICE_UNAVAILABLE => {
                                tokio::time::sleep(Duration::from_millis(50)).await
                            }
                            other => panic!("{id}: {other} {body}"),
                        }
                    }
                    (group_key(&chat), ids)
                })
            })
            .collect();
        Self { stop, acked, tasks }
    }

    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until `n` more messages than now are acknowledged.
    pub async fn wait_for_more(&self, n: usize) {
        let target = self.acked() + n;
        eventually(PATIENCE, "load to flow", || async move {
            let acked = self.acked();
            if acked >= target {
                Ok(())
            } else {
                Err(format!("{acked} acknowledged, waiting for {target}"))
            }
        })
        .await;
    }

    /// Stops the senders; each session key with the ids acknowledged in it, in send order.
    pub async fn finish(self) -> Vec<(String, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut out = Vec::new();
        for task in self.tasks {
            out.push(task.await.expect("a sender panicked"));
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_answers_every_session_and_a_killed_node_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let lease_ms = 2_000;
    let Some(nats) = NatsCluster::start().await else {
        return;
    };
    let mut nodes = Nodes::start(&nats, 3, lease_ms, "").await;
    wait_balanced(&nats, &["n1", "n2", "n3"], takeover_patience(lease_ms)).await;

    // An OpenAI client talks to each node in turn in one conversation: each answer has the
    // whole history, wherever the session lives.
    let client = reqwest::Client::new();
    for (turn, api) in nodes.apis().iter().enumerate() {
        let response = client
            .post(api.url("/v1/chat/completions"))
            .json(&json!({"model": "echo", "user": "carol",
                          "messages": [{"role": "user", "content": format!("turn {turn}")}]}))
            .timeout(PATIENCE)
            .send()
            .await
            .expect("a chat completion");
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.expect("a JSON answer");
        let text = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        let expected = format!("received {} messages", 2 * turn + 2);
        assert!(text.contains(&expected), "turn {turn}: {text}");
    }

    let load = ClusterLoad::start(nodes.apis(), 12, "kill");
    load.wait_for_more(150).await;
    nodes.kill9(1);
    let killed = Instant::now();
    // The survivors keep accepting, and answer the killed node's sessions once they move.
    let load_after = load.acked();
    load.wait_for_more(150).await;
    let acked = load.finish().await;
    let total: usize = acked.iter().map(|(_, ids)| ids.len()).sum();
    assert!(total > load_after, "nothing acknowledged after the kill");
    for i in [0, 2] {
        wait_all_answered_within(&nodes.node(i).api, &acked, takeover_patience(lease_ms)).await;
    }
    eprintln!(
        "{total} acknowledged; all answered on both survivors {:?} after the kill",
        killed.elapsed()
    );
    // The killed node comes back on its data dir, catches up from the changelog, and takes
    // its share again.
    nodes.restart(1).await;
    wait_all_answered_within(&nodes.node(1).api, &acked, takeover_patience(lease_ms)).await;
    wait_balanced(&nats, &["n1", "n2", "n3"], takeover_patience(lease_ms)).await;
    let more = ClusterLoad::start(nodes.apis(), 6, "back");
    more.wait_for_more(60).await;
    let acked_back = more.finish().await;
    for i in 0..3 {
        wait_all_answered_within(&nodes.node(i).api, &acked_back, takeover_patience(lease_ms))
            .await;
    }
    nodes.stop().await;
}

/// A fake OpenAI-compatible model (a test double) answering every request after `delay`;
/// counts requests.
struct SlowModel {
    url: String,
    requests: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl SlowModel {
    async fn start(delay: Duration) -> SlowModel {
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&requests);
        let app = Router::new().route(
            "/v1/chat/completions",
            post(move |Json(body): Json<Value>| {
                let counted = Arc::clone(&counted);
                async move {
                    let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(delay).await;
                    let last = body["messages"]
                        .as_array()
                        .and_then(|m| m.last())
                        .and_then(|m| m["content"].as_str())
                        .unwrap_or_default()
                        .chars()
                        .rev()
                        .take(20)
                        .collect::<String>();
                    Json(json!({
                        "id": format!("slow-{n}"), "object": "chat.completion", "created": 0,
                        "model": "slow",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant",
                                                 "content": format!("answer {n} to …{last}")}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake model");
        let url = format!("http://{}/v1", listener.local_addr().expect("its address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SlowModel {
            url,
            requests,
            task,
        }
    }
}

impl Drop for SlowModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn signal(node: &ServerProcess, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(node.pid()).expect("pid fits pid_t");
    // SAFETY: `kill` has no memory-safety preconditions; the pid is our unreaped child.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
}

/// The owner of a session is paused (SIGSTOP) in the middle of its turn, past its lease;
/// another node takes the partition over and answers. Resumed (SIGCONT), the old owner's
/// turn finishes its model call but cannot commit: the session has one answer everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_paused_past_its_lease_cannot_commit_after_it_resumes() {
    let _serial = SERIAL.lock().await;
    let lease_ms = 1_500;
    let delay = Duration::from_millis(2_500);
    let model = SlowModel::start(delay).await;
    let Some(nats) = NatsCluster::start().await else {
        return;
    };
    let extra = format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"slow\"\nmax_retries = 0\n",
        model.url
    );
    let nodes = Nodes::start(&nats, 3, lease_ms, &extra).await;
    wait_balanced(&nats, &["n1", "n2", "n3"], takeover_patience(lease_ms)).await;

    let chat = "paused";
    let key = group_key(chat);
    let kv = leases(&nats).await;
    let owner_id = holders(&kv).await[&partition_of(&key, PARTITIONS)].clone();
    let owner: usize = owner_id[1..].parse::<usize>().expect("a node id n<i>") - 1;
    let (other, third) = ((owner + 1) % 3, (owner + 2) % 3);

    let (status, _) = nodes
        .node(other)
        .api
        .post_message(Msg::group(chat, "p-1", "are you there?").json())
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The owner's turn is in its model call: pause the owner there.
    eventually(PATIENCE, "the owner to call the model", || async {
        match model.requests.load(Ordering::SeqCst) {
            0 => Err("no request yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    signal(nodes.node(owner), libc::SIGSTOP);
    let paused = Instant::now();
    assert_eq!(
        holders(&kv).await[&partition_of(&key, PARTITIONS)],
        owner_id,
        "the partition moved before the pause"
    );

    // Another node takes the partition over, replays the message and answers it.
    let third_api = &nodes.node(third).api;
    let answered = vec![(key.clone(), vec!["p-1".to_string()])];
    wait_all_answered_within(third_api, &answered, takeover_patience(lease_ms) + delay).await;
    let moved_after = paused.elapsed();
    let new_owner = holders(&kv).await[&partition_of(&key, PARTITIONS)].clone();
    assert_ne!(new_owner, owner_id, "the partition did not move");

    // Resumed, the old owner's model call returns; its commit must be refused.
    signal(nodes.node(owner), libc::SIGCONT);
    // Long enough for its pending model answer to reach its delivery (the answer is ready).
    tokio::time::sleep(Duration::from_millis(2 * lease_ms)).await;
    for i in 0..3 {
        let api = &nodes.node(i).api;
        let entries = eventually(PATIENCE, "the session on every node", || async {
            api.transcript(&key)
                .await
                .filter(|e| e.len() >= 2)
                .ok_or_else(|| "not there yet".to_string())
        })
        .await;
        let answers: Vec<&str> = entries
            .iter()
            .filter(|e| e.kind == "assistant")
            .map(|e| e.text.as_str())
            .collect();
        assert_eq!(answers.len(), 1, "node n{}: {answers:?}", i + 1);
        let users = entries.iter().filter(|e| e.kind == "user").count();
        assert_eq!(users, 1, "node n{}: {entries:?}", i + 1);
    }
    assert!(
        model.requests.load(Ordering::SeqCst) >= 2,
        "both owners called the model"
    );
    let log = nodes.node(owner).log_text();
    assert!(
        log.contains("turn fenced off"),
        "the old owner's log does not say its turn was fenced off:\n{log}"
    );
    eprintln!("the paused owner's session was answered elsewhere {moved_after:?} after the pause");
    let mut nodes = nodes;
    nodes.stop().await;
}

/// A NATS server is SIGKILLed under load: the streams keep a quorum, the nodes reconnect
/// to the others, and every acknowledged message is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nats_server_loses_no_acknowledged_message() {
    let _serial = SERIAL.lock().await;
    // Longer than JetStream's leader election after a server dies (4–9 s measured here), so
    // leases outlive it.
    let lease_ms = 10_000;
    let Some(mut nats) = NatsCluster::start().await else {
        return;
    };
    let mut nodes = Nodes::start(&nats, 3, lease_ms, "").await;
    wait_balanced(&nats, &["n1", "n2", "n3"], takeover_patience(lease_ms)).await;
    let load = ClusterLoad::start(nodes.apis(), 9, "nats");
    load.wait_for_more(100).await;
    nats.kill(0);
    let before = load.acked();
    // Service continues: more messages are acknowledged after the kill.
    eventually(
        takeover_patience(lease_ms),
        "acknowledgements after the kill",
        || async {
            if load.acked() >= before + 100 {
                Ok(())
            } else {
                Err(format!("{} acknowledged", load.acked()))
            }
        },
    )
    .await;
    let acked = load.finish().await;
    for i in 0..3 {
        wait_all_answered_within(&nodes.node(i).api, &acked, takeover_patience(lease_ms)).await;
    }
    nodes.stop().await;
}
