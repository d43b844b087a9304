//! Config reload of the real binary (issue 44, item 4's "config reload"): SIGHUP and
//! `POST /v1/admin/reload` read the `--config` file again. A new quota rule applies to the
//! next message without a restart while a turn runs on; a file that fails validation is
//! refused (400 with the reason, an error log line on SIGHUP) and the old rules stay; a
//! changed `listen` or data dir is reported as needing a restart and left as it runs; every
//! reload is in the audit log.

use std::path::Path;

use serde_json::{json, Value};

use crate::fake_model::{Behaviour, FakeModel};
use crate::support::{data_dir, eventually, Msg, ServerProcess, PATIENCE};

/// One message a minute per sender, no burst beyond it, dropped silently when over.
const QUOTA: &str = "[[quotas]]\nmatch = { sender = \"*\" }\nmessages_per_minute = 1\n\
                     burst = 1\nover = \"drop\"\n";

fn write_config(config_dir: &Path, text: &str) {
    std::fs::write(config_dir.join("turnstile.toml"), text).expect("writing the config");
}

/// The audit log's `server.reload` records, oldest first.
async fn reloads(server: &ServerProcess) -> Vec<Value> {
    let (status, body) = server.api.get("/v1/admin/audit?tail=50").await;
    assert_eq!(status, 200, "{body}");
    let text = match body {
        Value::String(lines) => lines,
        // A single line parses as one JSON value.
        one => one.to_string(),
    };
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r["action"] == "server.reload")
        .collect()
}

/// Waits for the `n`th reload record (1-based) and returns it.
async fn nth_reload(server: &ServerProcess, n: usize) -> Value {
    eventually(PATIENCE, "the reload in the audit log", || async move {
        let all = reloads(server).await;
        all.get(n - 1)
            .cloned()
            .ok_or_else(|| format!("{} reload records: {all:?}", all.len()))
    })
    .await
}

/// Posts a group message from sender 111; its status and `reason`.
async fn post(server: &ServerProcess, chat: &str, id: &str) -> (u16, Value) {
    let (status, body) = server
        .api
        .post_message(Msg::group(chat, id, "hello").json())
        .await;
    (status.as_u16(), body["reason"].clone())
}

async fn post_reload(server: &ServerProcess) -> (u16, Value) {
    let (status, body) = server.api.post_raw("/v1/admin/reload", String::new()).await;
    (status.as_u16(), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_new_quota_while_a_turn_runs_on() {
    let fake = FakeModel::start(Behaviour {
        held: true,
        ..Behaviour::default()
    })
    .await;
    let dir = data_dir();
    let conf = tempfile::tempdir().expect("a config dir");
    let base = format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"slow\"\n\
         api_key_env = \"TURNSTILE_TEST_UNSET_KEY\"\n",
        fake.base_url
    );
    let mut server = ServerProcess::start(dir.path(), conf.path(), &base).await;
    let pid = server.pid();

    // A turn held at the model across the reload.
    let running = {
        let http = reqwest::Client::new();
        let url = format!("{}/v1/chat/completions", server.url);
        tokio::spawn(async move {
            let r = http
                .post(url)
                .header("X-Session-Key", "reload-running")
                .json(&json!({
                    "model": "slow",
                    "messages": [{"role": "user", "content": "a long question"}],
                }))
                .send()
                .await
                .expect("an answer");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.expect("a JSON answer"))
        })
    };
    eventually(PATIENCE, "the turn at the model", || {
        let arrived = fake.arrived();
        async move {
            (arrived >= 1)
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        }
    })
    .await;
    // No quota yet: two messages in a row are both taken.
    assert_eq!(post(&server, "r0", "r0-1").await.0, 202);
    assert_eq!(post(&server, "r0", "r0-2").await.0, 202);

    write_config(conf.path(), &format!("{base}{QUOTA}"));
    server.sighup();
    let record = nth_reload(&server, 1).await;
    assert_eq!(record["status"], 200, "{record}");
    assert_eq!(
        record["target"], "SIGHUP: applied: quotas; restart required: none",
        "{record}"
    );
    assert!(record.get("key_fingerprint").is_none(), "{record}");
    assert!(server.is_running(), "{}", server.log_text());
    assert_eq!(server.pid(), pid, "the same process: no restart");

    // The new rule applies to the next messages: one a minute.
    assert_eq!(post(&server, "r1", "r1-1").await, (202, Value::Null));
    assert_eq!(post(&server, "r1", "r1-2").await, (200, json!("quota")));
    let (_, stats) = server.api.get("/v1/stats").await;
    assert_eq!(stats["quotas"]["rules"], 1, "{stats}");

    // The turn that ran across the reload finishes with its answer.
    fake.release();
    let (status, body) = running.await.expect("the client task");
    assert_eq!(status, 200, "{body}");
    assert!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{body}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_is_refused_and_the_old_rules_stay() {
    let dir = data_dir();
    let conf = tempfile::tempdir().expect("a config dir");
    let mut server = ServerProcess::start(dir.path(), conf.path(), QUOTA).await;

    // Out of range: the start-up validation's message, naming the key.
    write_config(conf.path(), &QUOTA.replace("burst = 1", "burst = 0"));
    let (status, body) = post_reload(&server).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_config", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("quotas.burst") && message.contains("out of range"),
        "{body}"
    );

    // Not TOML at all, by SIGHUP: an error line in the log, a refusal in the audit log.
    write_config(conf.path(), "[[quotas]\nmatch = ");
    server.sighup();
    let record = nth_reload(&server, 2).await;
    assert_eq!(record["status"], 400, "{record}");
    let target = record["target"].as_str().unwrap_or_default();
    assert!(
        target.starts_with("SIGHUP: the config was not reloaded"),
        "{record}"
    );
    let first = nth_reload(&server, 1).await;
    assert_eq!(first["status"], 400, "{first}");
    assert!(
        first["target"]
            .as_str()
            .is_some_and(|t| t.contains("quotas.burst")),
        "{first}"
    );
    let log = server.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("config reload refused")),
        "{log}"
    );
    assert!(server.is_running());

    // The old rule is still in force.
    assert_eq!(post(&server, "b1", "b1-1").await, (202, Value::Null));
    assert_eq!(post(&server, "b1", "b1-2").await, (200, json!("quota")));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_listen_address_or_data_dir_waits_for_a_restart() {
    let dir = data_dir();
    let conf = tempfile::tempdir().expect("a config dir");
    let data = dir.path().to_path_buf();
    let file_for = move |listen: std::net::SocketAddr, data: &Path| {
        format!(
            "[server]\nlisten = \"{listen}\"\n[storage]\ndata_dir = {:?}\n",
            data.display().to_string()
        )
    };
    let start_text = {
        let data = data.clone();
        move |addr| file_for(addr, &data)
    };
    let mut server = ServerProcess::start_from_file(&data, conf.path(), &start_text).await;
    let addr: std::net::SocketAddr = server
        .url
        .trim_start_matches("http://")
        .parse()
        .expect("the server's address");
    let moved = std::net::SocketAddr::from(([127, 0, 0, 1], crate::support::free_port()));
    let elsewhere = conf.path().join("elsewhere");

    write_config(
        conf.path(),
        &format!("{}{QUOTA}", file_for(moved, &elsewhere)),
    );
    let (status, body) = post_reload(&server).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({
            "applied": ["quotas"],
            "restart_required": ["server.listen", "storage.data_dir"],
            "unchanged": false,
        })
    );
    // Still where it was, on the data it had, with the new quota.
    let (status, _) = server.api.get("/readyz").await;
    assert_eq!(status, 200);
    assert!(!elsewhere.exists());
    assert_eq!(post(&server, "l1", "l1-1").await.0, 202);
    assert_eq!(post(&server, "l1", "l1-2").await, (200, json!("quota")));
    let log = server.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("need a restart")),
        "{log}"
    );

    // Asked again, the restart is still owed; nothing more to apply.
    let (_, body) = post_reload(&server).await;
    assert_eq!(
        body,
        json!({
            "applied": [],
            "restart_required": ["server.listen", "storage.data_dir"],
            "unchanged": false,
        })
    );
    // The file back at what runs: unchanged.
    write_config(conf.path(), &format!("{}{QUOTA}", file_for(addr, &data)));
    let (_, body) = post_reload(&server).await;
    assert_eq!(
        body,
        json!({ "applied": [], "restart_required": [], "unchanged": true })
    );

    let records = reloads(&server).await;
    let targets: Vec<(&Value, &Value)> = records
        .iter()
        .map(|r| (&r["status"], &r["target"]))
        .collect();
    assert_eq!(
        targets,
        [
            (
                &json!(200),
                &json!("applied: quotas; restart required: server.listen, storage.data_dir")
            ),
            (
                &json!(200),
                &json!("applied: none; restart required: server.listen, storage.data_dir")
            ),
            (&json!(200), &json!("unchanged")),
        ]
    );
    assert!(
        records.iter().all(|r| r["client"].is_string()),
        "{records:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_config_file_there_is_nothing_to_reload() {
    let dir = data_dir();
    let mut server = crate::support::spawn_binary(dir.path()).await;
    let (status, body) = post_reload(&server).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "no_config_file", "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_preflight_policy_applies_to_the_next_message() {
    let dir = data_dir();
    let conf = tempfile::tempdir().expect("a config dir");
    let mut server = ServerProcess::start(dir.path(), conf.path(), "").await;
    let chatter =
        |id: &str| Msg::group("p1", id, "no mention here").with("mentioned_bot", json!(false));
    let (status, body) = server.api.post_message(chatter("p1-1").json()).await;
    assert_eq!(
        (status.as_u16(), &body["reason"]),
        (200, &json!("no_mention"))
    );

    write_config(conf.path(), "[preflight]\nrequire_mention = false\n");
    let (status, body) = post_reload(&server).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["applied"],
        json!(["preflight.require_mention"]),
        "{body}"
    );
    let (status, body) = server.api.post_message(chatter("p1-2").json()).await;
    assert_eq!(
        status, 202,
        "the next message is screened by the new policy: {body}"
    );
    server.stop().await;
}
