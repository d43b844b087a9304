//! The disk budget against the real binary: a sustained write load of four times the budget
//! must leave the data dir within `max_disk_bytes` + 10%, keep the newest sessions and keep the
//! server answering. The always-on test is small; the `#[ignore]`d ones are the measurements
//! reported in ARCHITECTURE.md (run them with `cargo test --release --test disk_budget --
//! --ignored --nocapture`).

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{disk_bytes, encode_key, message, post, session_key, transcript, ServerProcess};

/// Messages per session before the load moves on to the next one.
const PER_SESSION: u64 = 20;

/// How often the data dir is measured during a run: often enough to see a short peak (a
/// rewrite's two generations side by side last tens of milliseconds).
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

struct Outcome {
    max_disk: u64,
    acked: u64,
    /// `507 insufficient_storage` answers (each retried until it was accepted).
    refused: u64,
    last_chat: String,
    samples: Vec<(f64, u64)>,
    elapsed: Duration,
    /// Acknowledged message ids no reply on `/v1/events` named (empty unless asked to check).
    unanswered: Vec<String>,
}

/// What one POST got.
enum Posted {
    Accepted,
    /// 429 (inbox full) or 507 (disk budget reached): back-pressure, retry the same message.
    Retry {
        insufficient_storage: bool,
    },
}

async fn post_once(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> Result<Posted, String> {
    let r = client
        .post(format!("{url}/v1/messages"))
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    match r.status().as_u16() {
        202 => Ok(Posted::Accepted),
        429 => Ok(Posted::Retry {
            insufficient_storage: false,
        }),
        507 => {
            let retry_after = r.headers().get("retry-after").cloned();
            let body: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
            if body["error"]["code"] != "insufficient_storage" || retry_after.is_none() {
                return Err(format!("a 507 without its code or Retry-After: {body}"));
            }
            Ok(Posted::Retry {
                insufficient_storage: true,
            })
        }
        other => Err(format!(
            "unexpected {other}: {}",
            r.text().await.unwrap_or_default()
        )),
    }
}

/// Collects the `in_reply_to` ids of every `event: reply` on `/v1/events` until told to stop;
/// a `lagged` event (a missed reply) is reported as the id `"<lagged>"`.
async fn collect_replies(
    url: String,
    answered: Arc<std::sync::Mutex<HashSet<String>>>,
) -> tokio::task::JoinHandle<()> {
    let mut response = reqwest::Client::new()
        .get(format!("{url}/v1/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "opening /v1/events");
    tokio::spawn(async move {
        let mut parser = turnstile::sse::SseParser::default();
        let mut events = turnstile::sse::SseEvents::default();
        let mut lines = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            parser.push(&chunk, &mut lines).unwrap();
            for event in lines.drain(..).filter_map(|l| events.line(l)) {
                let mut set = answered.lock().unwrap();
                match event.event.as_deref().map(str::trim).unwrap_or_default() {
                    "reply" => {
                        let v: serde_json::Value = serde_json::from_str(&event.data).unwrap();
                        for id in v["in_reply_to"].as_array().into_iter().flatten() {
                            set.insert(id.as_str().unwrap_or_default().to_string());
                        }
                    }
                    "lagged" => {
                        set.insert("<lagged>".into());
                    }
                    _ => {}
                }
            }
        }
    })
}

/// The load: `overload` × `budget` bytes of message text from `senders` concurrent senders,
/// `per_session` messages per session, the data dir measured every `SAMPLE_EVERY`.
struct Load {
    budget: u64,
    overload: u64,
    text_bytes: usize,
    senders: usize,
    per_session: u64,
    /// Check on `/v1/events` that every acknowledged message was answered.
    check_answers: bool,
}

/// Writes `overload` × `budget` bytes of message text with `senders` concurrent senders,
/// sampling the data dir's size every 100 ms.
async fn overload(
    server: &ServerProcess,
    budget: u64,
    overload: u64,
    text_bytes: usize,
    senders: usize,
) -> Outcome {
    run_load(
        server,
        &Load {
            budget,
            overload,
            text_bytes,
            senders,
            per_session: PER_SESSION,
            check_answers: false,
        },
    )
    .await
}

/// Measures `dir` every [`SAMPLE_EVERY`] until `done`, and once more then: (seconds since
/// `start`, bytes) per sample.
fn sample_disk(
    dir: std::path::PathBuf,
    start: Instant,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(f64, u64)>> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        while !done.load(Ordering::Relaxed) {
            samples.push((start.elapsed().as_secs_f64(), disk_bytes(&dir)));
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        samples.push((start.elapsed().as_secs_f64(), disk_bytes(&dir)));
        samples
    })
}

async fn run_load(server: &ServerProcess, load: &Load) -> Outcome {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let total_messages = load.budget * load.overload / load.text_bytes as u64;
    let per_session = load.per_session;
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let acked_ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let answered = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let replies = if load.check_answers {
        Some(collect_replies(server.url.clone(), Arc::clone(&answered)).await)
    } else {
        None
    };
    let done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let sampler = sample_disk(server.data_dir.clone(), start, Arc::clone(&done));
    let text = "x".repeat(load.text_bytes);
    let mut tasks = Vec::new();
    for _ in 0..load.senders {
        let (client, url, next, acked, refused, acked_ids, text) = (
            client.clone(),
            server.url.clone(),
            Arc::clone(&next),
            Arc::clone(&acked),
            Arc::clone(&refused),
            Arc::clone(&acked_ids),
            text.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total_messages {
                    return;
                }
                let chat = format!("c{:06}", n / per_session);
                let id = format!("m{n}");
                let body = message(&chat, &id, &text);
                loop {
                    match post_once(&client, &url, &body).await {
                        Ok(Posted::Accepted) => {
                            acked.fetch_add(1, Ordering::Relaxed);
                            acked_ids.lock().unwrap().push(id);
                            break;
                        }
                        Ok(Posted::Retry {
                            insufficient_storage,
                        }) => {
                            if insufficient_storage {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await
                        }
                        Err(e) => panic!("server stopped answering: {e}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut unanswered = Vec::new();
    if let Some(replies) = replies {
        // Every acknowledged message is answered; wait for the last turns (polling, bounded).
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            unanswered = {
                let answered = answered.lock().unwrap();
                acked_ids
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|id| !answered.contains(*id))
                    .cloned()
                    .collect()
            };
            if unanswered.is_empty() || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            !answered.lock().unwrap().contains("<lagged>"),
            "the reply stream lagged: raise server.events_buffer"
        );
        replies.abort();
    }
    // Let the last turns and a janitor pass finish before the final samples.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    done.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    Outcome {
        max_disk: samples.iter().map(|s| s.1).max().unwrap_or(0),
        acked: acked.load(Ordering::Relaxed),
        refused: refused.load(Ordering::Relaxed),
        last_chat: format!("c{:06}", (total_messages - 1) / per_session),
        samples,
        elapsed: start.elapsed(),
        unanswered,
    }
}

fn budget_config(budget: u64, durability: &str) -> String {
    format!(
        // No queue debounce: this measures reclamation. With the default 500 ms debounce a
        // session hit by a burst holds up to `queue.cap` messages in its inbox, which the
        // janitor may not evict (they are acknowledged), and the peak rises (see BENCHMARKS.md).
        // Uncompressed pages: the load's text ("x" repeated) compresses to almost nothing, and
        // with compressed pages the data dir never nears the budget, so nothing would be
        // reclaimed. (Once measured with compression on and pseudo-random letters instead:
        // all three runs stayed within the budget, but tokenizing such text tripled the time.)
        "[storage]\nmax_disk_bytes = {budget}\njanitor_interval_ms = 500\ndurability = \"{durability}\"\n\
         compression = false\ncache_capacity_bytes = 8388608\n[lanes]\nidle_timeout_ms = 300\n[queue]\ndebounce_ms = 0\n"
    )
}

async fn check_budget(budget: u64, factor: u64, text_bytes: usize, print: bool) {
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let server =
        ServerProcess::start(data.path(), conf.path(), &budget_config(budget, "strict")).await;
    let out = overload(&server, budget, factor, text_bytes, 8).await;
    if print {
        println!("budget {budget} B, {factor}x overload, {text_bytes}-byte messages");
        println!(
            "acked {} messages in {:.1} s",
            out.acked,
            out.elapsed.as_secs_f64()
        );
        let step = (out.samples.len() / 40).max(1);
        for (t, bytes) in out.samples.iter().step_by(step) {
            println!(
                "t={t:6.1}s data_dir={:7.2} MiB",
                *bytes as f64 / (1 << 20) as f64
            );
        }
        if let Ok(dir) = std::env::var("TURNSTILE_KEEP_LOGS") {
            let _ = std::process::Command::new("cp")
                .arg("-r")
                .arg(conf.path())
                .arg(&dir)
                .status();
            let _ = std::process::Command::new("cp")
                .arg("-r")
                .arg(data.path())
                .arg(format!("{dir}/data"))
                .status();
        }
        println!(
            "max data_dir {:.2} MiB (limit {:.2} MiB + 10%)",
            out.max_disk as f64 / (1 << 20) as f64,
            budget as f64 / (1 << 20) as f64
        );
    }
    let client = reqwest::Client::new();
    let health = client
        .get(format!("{}/healthz", server.url))
        .send()
        .await
        .unwrap();
    assert!(health.status().is_success(), "server still answers");
    let metrics = client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let evictions: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("turnstile_evictions_total{reason=\"disk_budget\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no disk_budget eviction counter in:\n{metrics}"));
    assert!(evictions >= 1.0, "evictions are counted: {evictions}");
    let newest = transcript(&client, &server.url, &session_key(&out.last_chat)).await;
    assert!(!newest.is_empty(), "the newest session survives");
    assert!(
        out.max_disk <= budget + budget / 10,
        "data dir reached {} bytes, budget {budget} (+10%)",
        out.max_disk
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_times_the_budget_stays_within_it() {
    check_budget(
        32 << 20,
        4,
        16 << 10,
        std::env::var_os("TURNSTILE_PRINT").is_some(),
    )
    .await;
}

/// Sessions revisited after the budget moved them to the cold tier, by senders that never
/// retry: many messages are refused (507) while the disk is full. A refused message must write
/// nothing — bringing its session back from the cold tier writes the whole transcript, and once
/// that came before the budget check, refusals alone carried the data dir to 2–3× its budget
/// — and a pack the janitor deletes while a turn thaws a session is not a server error. Then
/// reads: a cold session is found and its transcript read from its pack, which stays as it
/// is (no thaw, no write), and a DELETE removes it.
///
/// It failed 6 of 12 runs on 2026-12-06 in two ways, both since fixed: a rewrite's copy over
/// high water could take a quarter of the budget beside a data dir already far over it
/// (peaks of 111-117%), and a freeze that raced a compaction paired the old record with a
/// transcript the compaction had half changed (a cold transcript shorter than its record).
///
/// Still ignored in the default run: with both fixes it passed 3 of 4 runs on a machine at
/// load 18, and the fourth found fewer than 10 of its sessions still cold when it read them
/// (the assertion below), not yet explained. Run it with
/// `cargo test --test disk_budget -- --ignored refused_messages_to_cold`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "passes 3 of 4 runs: sometimes fewer than 10 sessions are still cold when read (docs/storage.md)"]
async fn refused_messages_to_cold_sessions_write_nothing() {
    const SENDERS: u64 = 8;
    const SESSIONS_PER_SENDER: u64 = 100;
    const POSTS_PER_SENDER: u64 = 1_000;
    let budget = 32u64 << 20;
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let server =
        ServerProcess::start(data.path(), conf.path(), &budget_config(budget, "strict")).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = sample_disk(server.data_dir.clone(), Instant::now(), Arc::clone(&done));
    let mut tasks = Vec::new();
    for w in 0..SENDERS {
        let (client, url) = (client.clone(), server.url.clone());
        tasks.push(tokio::spawn(async move {
            let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
            for i in 0..POSTS_PER_SENDER {
                let chat = format!("cold-{w}-{}", i % SESSIONS_PER_SENDER);
                let text = format!("word{i} ").repeat(2_000);
                let r = client
                    .post(format!("{url}/v1/messages"))
                    .json(&message(&chat, &format!("m{w}-{i}"), &text))
                    .send()
                    .await
                    .expect("the server answers");
                *statuses.entry(r.status().as_u16()).or_default() += 1;
            }
            statuses
        }));
    }
    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
    for t in tasks {
        for (status, n) in t.await.unwrap() {
            *statuses.entry(status).or_default() += n;
        }
    }
    done.store(true, Ordering::Relaxed);
    let peak = sampler
        .await
        .unwrap()
        .iter()
        .map(|&(_, bytes)| bytes)
        .max()
        .unwrap_or(0);
    println!(
        "statuses {statuses:?}; peak data dir {:.0}% of the budget",
        peak as f64 * 100.0 / budget as f64
    );
    assert!(
        statuses.keys().all(|s| [202, 429, 507].contains(s)),
        "only accepted and back-pressure answers: {statuses:?}"
    );
    assert!(
        statuses.contains_key(&507),
        "the budget was reached: {statuses:?}"
    );
    assert!(
        peak <= budget + budget / 10,
        "data dir peaked at {peak} bytes, past the budget {budget} + 10%"
    );

    let keys: Vec<String> = (0..SENDERS)
        .flat_map(|w| (0..SESSIONS_PER_SENDER).map(move |i| session_key(&format!("cold-{w}-{i}"))))
        .collect();
    // Acknowledged messages still queued get their turns, and a turn thaws its session: one
    // thawed between the record's read and the transcript's would differ from itself. Read
    // once every turn has run.
    let drained_by = Instant::now() + Duration::from_secs(120);
    loop {
        let stats: serde_json::Value = client
            .get(format!("{}/v1/stats", server.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if stats["queued_messages"] == 0 {
            break;
        }
        assert!(
            Instant::now() < drained_by,
            "queued messages not answered within 120 s: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cold_dir = server.data_dir.join("cold");
    let reads_began = Instant::now();
    let before = settled_segments(&cold_dir).await;
    let settled_after = reads_began.elapsed();
    let listed = cold_sessions(&client, &server.url).await;
    let cold: Vec<&String> = keys.iter().filter(|k| listed.contains(*k)).collect();
    assert!(
        cold.len() >= 10,
        "only {} cold sessions to read",
        cold.len()
    );
    for key in &cold {
        let path = format!("{}/v1/sessions/{}", server.url, encode_key(key));
        let r = client.get(&path).send().await.unwrap();
        assert_eq!(r.status(), 200, "GET a cold session {key}");
        let info: serde_json::Value = r.json().await.unwrap();
        let entries = info["entries"].as_u64().unwrap_or(0);
        assert!(entries > 0, "{info}");
        let r = client
            .get(format!("{path}/transcript?limit=1000"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "GET a cold session's transcript {key}");
        let page: Vec<serde_json::Value> = r.json().await.unwrap();
        let kinds: Vec<_> = page.iter().map(|e| (&e["seq"], &e["kind"])).collect();
        assert_eq!(
            page.len() as u64,
            entries.min(1_000),
            "{key}: the record {info} and its transcript {kinds:?}"
        );
    }
    assert_eq!(
        segments(&cold_dir),
        before,
        "reads changed the cold tier's files"
    );
    assert_eq!(
        cold_sessions(&client, &server.url).await,
        listed,
        "reads thawed cold sessions (a thaw writes the whole transcript back)"
    );
    println!(
        "the cold tier settled in {settled_after:?}; {} cold sessions read in {:?}",
        cold.len(),
        reads_began.elapsed() - settled_after
    );
    let gone = cold[0];
    let path = format!("{}/v1/sessions/{}", server.url, encode_key(gone));
    let r = client.delete(&path).send().await.unwrap();
    assert_eq!(r.status(), 200, "DELETE a cold session");
    assert!(!cold_sessions(&client, &server.url).await.contains(gone));
    assert_eq!(client.get(&path).send().await.unwrap().status(), 404);
}

/// The keys `GET /v1/sessions` lists as cold (every page).
async fn cold_sessions(client: &reqwest::Client, url: &str) -> std::collections::BTreeSet<String> {
    let mut cold = std::collections::BTreeSet::new();
    let mut after = String::new();
    loop {
        let r = client
            .get(format!("{url}/v1/sessions"))
            .query(&[("limit", "1000"), ("after", after.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "GET /v1/sessions");
        let page: Vec<serde_json::Value> = r.json().await.unwrap();
        let Some(last) = page.last() else {
            return cold;
        };
        after = last["session_key"].as_str().unwrap_or_default().to_string();
        cold.extend(
            page.iter()
                .filter(|s| s["cold"] == true)
                .filter_map(|s| s["session_key"].as_str().map(str::to_string)),
        );
    }
}

/// The cold tier's files: name → (size, modification time).
fn segments(
    dir: &std::path::Path,
) -> std::collections::BTreeMap<String, (u64, std::time::SystemTime)> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let meta = e.metadata().ok()?;
                    let modified = meta.modified().ok()?;
                    Some((
                        e.file_name().to_string_lossy().into_owned(),
                        (meta.len(), modified),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The cold tier once the janitor has stopped changing it (the same for a second, within
/// a bounded wait).
async fn settled_segments(
    dir: &std::path::Path,
) -> std::collections::BTreeMap<String, (u64, std::time::SystemTime)> {
    let mut last = segments(dir);
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = segments(dir);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the cold tier kept changing for a minute after the load");
}

/// One overload regime through the real binary: `config` is the whole config file. Asserts the
/// data dir's peak stays within the budget + 10%, every acknowledged message is answered, and
/// the newest session survives.
async fn check_regime(name: &str, budget: u64, config: &str, per_session: u64) {
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    // `TURNSTILE_KEEP_LOGS=DIR`: the config and the server log go there (kept after a failure).
    let conf_dir = match std::env::var("TURNSTILE_KEEP_LOGS") {
        Ok(dir) => {
            std::fs::create_dir_all(&dir).unwrap();
            std::path::PathBuf::from(dir)
        }
        Err(_) => conf.path().to_path_buf(),
    };
    let server = ServerProcess::start(data.path(), &conf_dir, config).await;
    let out = run_load(
        &server,
        &Load {
            budget,
            overload: 4,
            text_bytes: 16 << 10,
            senders: 8,
            per_session,
            check_answers: true,
        },
    )
    .await;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    // The cold tier is on by default: what it holds at the end (packs under `cold/`).
    let cold = data.path().join("cold");
    let segments = std::fs::read_dir(&cold).map(|d| d.count()).unwrap_or(0);
    println!(
        "{name}: acked {} ({} answers 507) in {:.1} s; peak data dir {:.2} MiB of {:.2} MiB ({:.0}%); \
         {segments} cold packs, {:.2} MiB at the end",
        out.acked,
        out.refused,
        out.elapsed.as_secs_f64(),
        mib(out.max_disk),
        mib(budget),
        out.max_disk as f64 * 100.0 / budget as f64,
        mib(disk_bytes(&cold)),
    );
    if std::env::var_os("TURNSTILE_PRINT").is_some() {
        let step = (out.samples.len() / 60).max(1);
        for (t, bytes) in out.samples.iter().step_by(step) {
            println!("t={t:6.1}s data_dir={:7.2} MiB", mib(*bytes));
        }
    }
    let client = reqwest::Client::new();
    let newest = transcript(&client, &server.url, &session_key(&out.last_chat)).await;
    assert!(!newest.is_empty(), "{name}: the newest session survives");
    assert!(
        out.unanswered.is_empty(),
        "{name}: {} acknowledged messages were never answered, e.g. {:?}",
        out.unanswered.len(),
        &out.unanswered[..out.unanswered.len().min(5)]
    );
    assert!(
        out.max_disk <= budget + budget / 10,
        "{name}: data dir reached {} bytes, budget {budget} (+10%)",
        out.max_disk
    );
}

/// The default 500 ms `collect` debounce: bursts wait in the inbox (acknowledged, so not
/// evictable) while the data dir fills; admission must refuse rather than pass the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_times_the_budget_with_the_default_debounce() {
    let budget = 32 << 20;
    let config = format!(
        "[server]\nevents_buffer = 65536\n[storage]\nmax_disk_bytes = {budget}\n\
         janitor_interval_ms = 500\ncache_capacity_bytes = 8388608\n[lanes]\nidle_timeout_ms = 300\n"
    );
    check_regime("default debounce", budget, &config, PER_SESSION).await;
}

/// The tester's case from issue 14: conversation compaction off, 4 messages per session, the
/// default janitor interval (60 s), so only admission and the high-water signal hold the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_times_the_budget_with_compaction_off() {
    let budget = 32 << 20;
    let config = format!(
        "[server]\nevents_buffer = 65536\n[storage]\nmax_disk_bytes = {budget}\n\
         [compaction]\nsoft_threshold = 1.0\n"
    );
    check_regime("compaction off", budget, &config, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: several minutes"]
async fn measure_overload_64_mib() {
    let mb: u64 = std::env::var("TURNSTILE_BUDGET_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    check_budget(mb << 20, 4, 16 << 10, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement"]
async fn measure_strict_vs_batched_throughput() {
    for durability in ["strict", "batched"] {
        let data = tempfile::tempdir().unwrap();
        let conf = tempfile::tempdir().unwrap();
        let server = ServerProcess::start(
            data.path(),
            conf.path(),
            &budget_config(1 << 30, durability),
        )
        .await;
        let client = reqwest::Client::new();
        let n = 4_000u64;
        let next = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..32 {
            let (client, url, next) = (client.clone(), server.url.clone(), Arc::clone(&next));
            tasks.push(tokio::spawn(async move {
                let mut ok = 0u64;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return ok;
                    }
                    let body = message(&format!("c{}", i % 256), &format!("m{i}"), "hello there");
                    if post(&client, &url, &body).await.unwrap() {
                        ok += 1;
                    }
                }
            }));
        }
        let mut acked = 0;
        for t in tasks {
            acked += t.await.unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{durability}: {acked} acked in {secs:.2} s = {:.0} msgs/s (32 concurrent senders)",
            acked as f64 / secs
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement"]
async fn measure_open_with_100k_sessions() {
    use turnstile::store::{EntryKind, Store, TranscriptEntry, TurnCommit};
    let dir = tempfile::tempdir().unwrap();
    let config = turnstile::config::StorageConfig {
        data_dir: dir.path().to_path_buf(),
        durability: turnstile::config::Durability::Batched,
        ..Default::default()
    };
    {
        let store = Store::open(&config).unwrap();
        let e = |kind| TranscriptEntry::new(kind, "a short message", 3, 1);
        let start = Instant::now();
        for i in 0..100_000u64 {
            store
                .commit_turn(&TurnCommit {
                    session_key: format!("agent:main:test:group:c{i:06}"),
                    entries: vec![e(EntryKind::User), e(EntryKind::Assistant)],
                    consumed: vec![],
                    now_ms: 1_000 + i,
                    channel_messages: vec![],
                    replica: None,
                })
                .unwrap();
        }
        println!(
            "wrote 100k sessions in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        store.close().await.unwrap();
    }
    println!(
        "data dir {:.1} MiB",
        disk_bytes(dir.path()) as f64 / (1 << 20) as f64
    );
    for _ in 0..3 {
        let start = Instant::now();
        let store = Store::open(&config).unwrap();
        let opened = start.elapsed();
        assert_eq!(store.open_report().unwrap().sessions, 100_000);
        println!(
            "open (with quick doctor) of 100k sessions: {:.0} ms",
            opened.as_secs_f64() * 1e3
        );
        store.close().await.unwrap();
    }
}
