//! Group memory over real HTTP and sled: what five people said in a group reaches the model
//! later — chatter survives a restart, a fact said without addressing the bot is in the
//! request of a late question about it, past turns say who spoke, the rolling summary is in a
//! group's context, and DELETE takes the chat's record with the session. The model is a test
//! double that records every request it is sent.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use turnstile::context::sources::SUMMARY_HEADER;
use turnstile::loadtest::group_memory::{self, GroupMemorySpec, RecordingModel};
use turnstile::model::{ModelRequest, Role};

use crate::support::{
    data_dir, encode_key, eventually, group_key, one_turn_per_message, start_server_full, Api, Msg,
    TestServer,
};

const PATIENCE: Duration = Duration::from_secs(30);

/// A message in group `chat` from `name` (id derived from the name); `addressed` mentions the
/// bot.
fn said(chat: &str, id: &str, name: &str, text: &str, addressed: bool) -> Msg {
    Msg::group(chat, id, text)
        .with(
            "sender",
            json!({"id": format!("id-{name}"), "name": name, "is_bot": false}),
        )
        .with("mentioned_bot", json!(addressed))
}

/// Posts a message that does not address the bot: dropped as `no_mention`, kept as chatter.
async fn chatter(api: &Api, msg: &Msg) {
    let (status, body) = api.post_message(msg.json()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["reason"], "no_mention", "{body}");
}

async fn start(dir: Arc<tempfile::TempDir>, model: &Arc<RecordingModel>) -> TestServer {
    start_server_full(dir, one_turn_per_message, Some(model.clone())).await
}

/// Waits until the model has been asked `n` times; returns the requests.
async fn requests(model: &RecordingModel, n: usize) -> Vec<ModelRequest> {
    eventually(PATIENCE, "model requests", || async {
        let r = model.requests();
        (r.len() >= n)
            .then_some(r.clone())
            .ok_or(format!("{} requests", r.len()))
    })
    .await
}

/// The whole request as one text.
fn text_of(r: &ModelRequest) -> String {
    r.messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chatter_and_queued_events_survive_a_restart() {
    let dir = data_dir();
    let model = Arc::new(RecordingModel::default());
    let server = start(dir.clone(), &model).await;
    chatter(
        &server,
        &said(
            "gm1",
            "1",
            "Priya",
            "ticket ZX-4411 is owned by Priya",
            false,
        ),
    )
    .await;
    chatter(&server, &said("gm1", "2", "Bob", "ok, noted", false)).await;
    let event = said(
        "gm1",
        "e1",
        "Carol",
        "Carol pinned the release notes",
        false,
    )
    .with("kind", json!("system_event"));
    let (status, body) = server.post_message(event.json()).await;
    assert_eq!(
        (status, body["reason"].clone()),
        (StatusCode::OK, json!("system_event"))
    );
    server.stop().await;

    let model = Arc::new(RecordingModel::default());
    let server = start(dir, &model).await;
    server
        .send(&said("gm1", "3", "Alice", "@bot who owns ZX-4411?", true))
        .await;
    let r = requests(&model, 1).await;
    let last = r[0]
        .messages
        .last()
        .map(|m| m.content.clone())
        .unwrap_or_default();
    assert!(
        last.contains("Priya: ticket ZX-4411 is owned by Priya") && last.contains("Bob: ok, noted"),
        "the pending chatter is in the turn after the restart:\n{last}"
    );
    assert!(
        last.contains("Carol pinned the release notes"),
        "the queued event too:\n{last}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_unaddressed_fact_reaches_a_late_question() {
    let model = Arc::new(RecordingModel::default());
    let server = start(data_dir(), &model).await;
    let people = ["Alice", "Bob", "Carol", "Dave", "Priya"];
    chatter(
        &server,
        &said(
            "gm2",
            "fact",
            "Priya",
            "ticket ZX-4411 is owned by Priya, due 2026-12-03",
            false,
        ),
    )
    .await;
    let mut turns = 0;
    for i in 0..400 {
        let name = people[i % people.len()];
        let id = format!("m{i}");
        if i % 20 == 19 {
            server
                .send(&said("gm2", &id, name, &format!("@bot status {i}?"), true))
                .await;
            turns += 1;
            requests(&model, turns).await;
        } else {
            chatter(
                &server,
                &said("gm2", &id, name, "the build is slow again", false),
            )
            .await;
        }
    }
    server
        .send(&said(
            "gm2",
            "q",
            "Alice",
            "@bot who owns ticket ZX-4411?",
            true,
        ))
        .await;
    let r = requests(&model, turns + 1).await;
    let late = text_of(&r[turns]);
    assert!(
        late.lines()
            .any(|l| l.contains("ZX-4411") && l.contains("Priya") && l.contains("2026-12-03")),
        "the fact is in the late question's request:\n{late}"
    );
    let tokens: Vec<u32> = r.iter().map(|r| r.prompt_tokens).collect();
    assert!(
        tokens.iter().all(|t| *t <= 4_000),
        "every turn within the group preset: {tokens:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_turns_say_who_spoke() {
    let model = Arc::new(RecordingModel::default());
    let server = start(data_dir(), &model).await;
    server
        .send(&said("gm3", "1", "Alice", "@bot I prefer tea", true))
        .await;
    requests(&model, 1).await;
    chatter(&server, &said("gm3", "2", "Dave", "lunch at noon?", false)).await;
    server
        .send(&said("gm3", "3", "Bob", "@bot I prefer coffee", true))
        .await;
    requests(&model, 2).await;
    server
        .send(&said("gm3", "4", "Carol", "@bot who prefers what?", true))
        .await;
    let r = requests(&model, 3).await;
    let users: Vec<&str> = r[2]
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .collect();
    let history = users[..users.len() - 1].join("\n");
    assert!(history.contains("Alice: @bot I prefer tea"), "{history}");
    assert!(history.contains("Bob: @bot I prefer coffee"), "{history}");
    // Bob's turn carried Dave's chatter: shown with it, once.
    assert_eq!(
        history.matches("Dave: lunch at noon?").count(),
        1,
        "{history}"
    );
    assert!(!users[users.len() - 1].contains("lunch at noon"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_session_has_its_summary_in_the_context() {
    let model = Arc::new(RecordingModel::default());
    let server = start(data_dir(), &model).await;
    let key = group_key("gm4");
    let mut n = 0;
    for i in 0..12 {
        chatter(
            &server,
            &said(
                "gm4",
                &format!("c{i}"),
                "Priya",
                &format!("order ORD-{i:04} shipped"),
                false,
            ),
        )
        .await;
        server
            .send(&said(
                "gm4",
                &format!("m{i}"),
                "Alice",
                &format!("@bot anything new {i}?"),
                true,
            ))
            .await;
        n += 1;
        requests(&model, n).await;
    }
    // The window (15 messages) left the first turns out: they are compacted in the background.
    eventually(PATIENCE, "a compaction", || async {
        let (_, s) = server.session(&key).await;
        (s["compaction_count"].as_u64() >= Some(1))
            .then_some(())
            .ok_or(format!("{s}"))
    })
    .await;
    server
        .send(&said("gm4", "last", "Alice", "@bot summary please", true))
        .await;
    let r = requests(&model, n + 1).await;
    let system = &r[n].messages[0];
    assert_eq!(system.role, Role::System);
    assert!(
        system.content.contains(SUMMARY_HEADER),
        "{}",
        system.content
    );
    assert!(
        system.content.contains("ORD-0000"),
        "the first chatter is summarised: {}",
        system.content
    );
    let (status, dump) = server
        .get(&format!("/v1/sessions/{}/context", encode_key(&key)))
        .await;
    assert_eq!(status, StatusCode::OK);
    let kinds: Vec<&Value> = dump["blocks"]
        .as_array()
        .map(|b| b.iter().map(|b| &b["kind"]).collect())
        .unwrap_or_default();
    assert!(kinds.contains(&&json!("summary")), "{kinds:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_takes_the_chat_record_with_the_session() {
    let model = Arc::new(RecordingModel::default());
    let server = start(data_dir(), &model).await;
    let key = group_key("gm5");
    chatter(
        &server,
        &said("gm5", "1", "Priya", "the vault code is KX-9911", false),
    )
    .await;
    server
        .send(&said("gm5", "2", "Alice", "@bot hello", true))
        .await;
    requests(&model, 1).await;
    chatter(
        &server,
        &said("gm5", "3", "Bob", "pending line before delete", false),
    )
    .await;
    eventually(PATIENCE, "an idle session", || async {
        let (status, body) = server
            .delete(&format!("/v1/sessions/{}", encode_key(&key)))
            .await;
        (status == StatusCode::OK)
            .then_some(())
            .ok_or(format!("{status} {body}"))
    })
    .await;
    server
        .send(&said(
            "gm5",
            "4",
            "Alice",
            "@bot what is the vault code KX-9911?",
            true,
        ))
        .await;
    let r = requests(&model, 2).await;
    let after = text_of(&r[1]);
    assert!(
        !after.contains("the vault code is KX-9911")
            && !after.contains("pending line before delete"),
        "nothing of the deleted chat record comes back:\n{after}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_memory_scenario_keeps_its_facts_within_the_budget() {
    let dir = data_dir();
    let config = turnstile::config::Config::with_data_dir(dir.path());
    let report = group_memory::run(&GroupMemorySpec::default(), config)
        .await
        .expect("the scenario runs");
    assert!(
        report.answerable_pct >= 95.0,
        "answerable {}/{}: missed {:?}",
        report.answerable,
        report.probes,
        report.missed
    );
    assert!(
        report.prompt_tokens_max <= report.budget,
        "{} > {}",
        report.prompt_tokens_max,
        report.budget
    );
    assert!(
        report.baseline_tokens > report.budget,
        "the chat outgrows the budget"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_stays_in_the_context_when_the_window_ends_before_it() {
    let model = Arc::new(RecordingModel::default());
    let server = start_server_full(
        data_dir(),
        |c| {
            one_turn_per_message(c);
            c.compaction.window_trigger = false;
            c.compaction.soft_threshold = 1.0;
        },
        Some(model.clone()),
    )
    .await;
    let key = group_key("gm6");
    let mut n = 0;
    let turn = |i: usize| {
        said(
            "gm6",
            &format!("m{i}"),
            "Alice",
            // A statement: questions put to the bot are not summarised as the group's facts.
            &format!(
                "@bot note: order ORD-{i:04} ships from the Berlin warehouse after the customs check"
            ),
            true,
        )
    };
    for i in 0..12 {
        server.send(&turn(i)).await;
        n += 1;
        requests(&model, n).await;
    }
    let (status, body) = server
        .post_raw(
            &format!("/v1/sessions/{}/compact", encode_key(&key)),
            String::new(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["tokens_after"].as_u64() < body["tokens_before"].as_u64(),
        "{body}"
    );
    // Twenty more turns: forty entries after the summary, far past the 15-message window.
    for i in 12..32 {
        server.send(&turn(i)).await;
        n += 1;
        requests(&model, n).await;
    }
    let (_, dump) = server
        .get(&format!("/v1/sessions/{}/context", encode_key(&key)))
        .await;
    let summary = dump["blocks"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["kind"] == "summary"))
        .unwrap_or_else(|| panic!("no summary block: {dump}"));
    assert!(
        summary["content"]
            .as_str()
            .unwrap_or("")
            .contains("ORD-0000"),
        "{summary}"
    );
    server.stop().await;
}
