//! Two agents in one server, through HTTP against a recording fake model server: bindings
//! route webhook messages, `model` routes chat completions, each agent's turns reach the model
//! with its own system prompt and model name, and the API shows which agent a session has.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::fake_model::{Behaviour, FakeModel};
use crate::small_window::openai_model;
use crate::support::{data_dir, encode_key, eventually, json_of, start_server_with, Api};
use turnstile::config::{AgentSection, BindingConfig, Config};

/// `[model]` on the fake; agent `support` with its own prompt and model, bound to the
/// `helpdesk` channel and to one Discord guild's moderators, with the alias `support-bot`.
fn two_agents(config: &mut Config, base_url: &str) {
    openai_model(config, base_url, "main-model");
    config.context.system_prompt = "You are the MAIN agent.".into();
    config.agents.insert(
        "support".into(),
        AgentSection {
            system_prompt: Some("You are the SUPPORT agent.".into()),
            model: Some("support-model".into()),
            aliases: vec!["support-bot".into()],
            ..AgentSection::default()
        },
    );
    let mut helpdesk = BindingConfig::to_agent("support");
    helpdesk.channel = Some("helpdesk".into());
    let mut mods = BindingConfig::to_agent("support");
    mods.channel = Some("discord".into());
    mods.guild_id = Some("g1".into());
    mods.roles = vec!["mod".into()];
    config.bindings = vec![helpdesk, mods];
}

fn dm(channel: &str, sender: &str, id: &str, text: &str) -> Value {
    json!({
        "channel": channel, "chat_kind": "direct", "chat_id": sender, "message_id": id,
        "sender": {"id": sender, "name": "U"}, "text": text, "mentioned_bot": true
    })
}

/// Posts `body` to `/v1/messages`; the session key of its `202`.
async fn post(api: &Api, body: &Value) -> String {
    let (status, reply) = api.post_message(body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
    reply["session_key"].as_str().expect("a key").to_string()
}

/// Waits until `key`'s transcript holds an answer; returns the transcript.
async fn answered(api: &Api, key: &str) -> Vec<Value> {
    eventually(Duration::from_secs(20), "the answer", || async {
        let t = api.transcript_json(key).await.unwrap_or_default();
        if t.iter().any(|e| e["kind"] == "assistant") {
            Ok(t)
        } else {
            Err(format!("{t:?}"))
        }
    })
    .await
}

async fn completion(api: &Api, model: &str, user: &str, text: &str) -> (StatusCode, Value) {
    let body = json!({"model": model, "user": user,
        "messages": [{"role": "user", "content": text}]});
    let response = api
        .client
        .post(api.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("POST /v1/chat/completions");
    json_of(response).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_answer_with_their_own_prompts_and_models() {
    let fake = FakeModel::start(Behaviour::default()).await;
    let server = start_server_with(data_dir(), |c| two_agents(c, &fake.base_url)).await;
    let api = &server.api;

    // Bindings: the helpdesk channel goes to `support`, anything else to `main`.
    let support_key = post(api, &dm("helpdesk", "u1", "h1", "help turn-1")).await;
    let main_key = post(api, &dm("webhook", "u1", "w1", "hello turn-2")).await;
    assert_eq!(support_key, "agent:support:main");
    assert_eq!(main_key, "agent:main:main");
    // Roles: a moderator in guild g1 goes to `support`, a member to `main`.
    let mut moderator = dm("discord", "d1", "d1", "mod turn-3");
    moderator["chat_kind"] = json!("channel");
    moderator["chat_id"] = json!("c-general");
    moderator["guild_id"] = json!("g1");
    moderator["roles"] = json!(["member", "mod"]);
    let mod_key = post(api, &moderator).await;
    assert_eq!(mod_key, "agent:support:discord:channel:c-general");
    let mut member = moderator.clone();
    member["message_id"] = json!("d2");
    member["roles"] = json!(["member"]);
    member["text"] = json!("member turn-4");
    assert_eq!(
        post(api, &member).await,
        "agent:main:discord:channel:c-general"
    );

    for key in [&support_key, &main_key, &mod_key] {
        let t = answered(api, key).await;
        let agent = if key.starts_with("agent:support:") {
            "support"
        } else {
            "main"
        };
        assert!(t.iter().all(|e| e["agent"] == agent), "{key}: {t:?}");
    }

    // `model` selects the agent of a chat completion: by `agent:<id>`, by alias, or (any
    // other name) the default agent as before.
    let (status, body) = completion(api, "agent:support", "alice", "oa turn-5").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["model"], "support-model", "{body}");
    let (status, body) = completion(api, "support-bot", "bob", "oa turn-6").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = completion(api, "gpt-4o", "carol", "oa turn-7").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["model"], "main-model", "{body}");
    let (status, body) = completion(api, "agent:nobody", "dave", "x").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    assert_eq!(body["error"]["param"], "model", "{body}");

    // What the model saw: each agent's system prompt and model name, never the other's.
    let seen = eventually(Duration::from_secs(20), "seven model calls", || async {
        let seen = fake.seen();
        if seen.len() >= 7 {
            Ok(seen)
        } else {
            Err(format!("{} calls", seen.len()))
        }
    })
    .await;
    for turn in 1..=7 {
        let marker = format!("turn-{turn}");
        let s = seen
            .iter()
            .find(|s| s.last_user.contains(&marker))
            .unwrap_or_else(|| panic!("no call for {marker}"));
        let support = matches!(turn, 1 | 3 | 5 | 6);
        let (model, prompt, other) = if support {
            ("support-model", "SUPPORT agent", "MAIN agent")
        } else {
            ("main-model", "MAIN agent", "SUPPORT agent")
        };
        assert_eq!(s.model, model, "{marker}");
        assert!(s.system.contains(prompt), "{marker}: {}", s.system);
        assert!(!s.prompt.contains(other), "{marker}: {}", s.prompt);
    }

    // The API shows each session's agent: the session, its transcript, its context dump.
    let (_, session) = api.session("agent:support:alice").await;
    assert_eq!(session["agent"], "support", "{session}");
    let (_, session) = api.session("carol").await;
    assert_eq!(session["agent"], "main", "{session}");
    let listed = api.sessions().await;
    assert!(listed
        .iter()
        .any(|s| s["session_key"] == "agent:support:bob" && s["agent"] == "support"));
    let (status, dump) = api
        .get(&format!(
            "/v1/sessions/{}/context",
            encode_key("agent:support:alice")
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{dump}");
    assert_eq!(dump["agent"], "support");
    // /v1/stats: the agents and their turns.
    let (_, stats) = api.get("/v1/stats").await;
    let agents = stats["agents"].as_array().expect("agents in /v1/stats");
    assert_eq!(agents[0]["id"], "main");
    assert_eq!(agents[0]["default"], true);
    assert_eq!(agents[1]["id"], "support");
    assert_eq!(agents[1]["model"], "support-model");
    assert_eq!(agents[1]["bindings"], 2);
    assert_eq!(agents[1]["turns"], 4, "{stats}");
    assert_eq!(agents[0]["turns"], 3, "{stats}");
    // /v1/models: the agents by the names that select them.
    let (_, models) = api.get("/v1/models").await;
    let ids: Vec<&str> = models["data"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    for id in ["main-model", "agent:main", "agent:support", "support-bot"] {
        assert!(ids.contains(&id), "{id} missing from {models}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_binding_stops_the_start_with_a_clear_error() {
    let mut config = Config::with_data_dir(data_dir().path());
    config.bindings = vec![{
        let mut b = BindingConfig::to_agent("ghost");
        b.channel = Some("telegram".into());
        b
    }];
    let err = match turnstile::Runtime::builder().config(config).build().await {
        Ok(_) => panic!("a binding to an unknown agent was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("bindings[0].agent") && err.contains("unknown agent \"ghost\""),
        "{err}"
    );
}
