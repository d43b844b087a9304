//! Agents apart, through a real runtime (sled in a temp dir) and one recording model per
//! agent: two agents bound in one group chat (by sender) never see each other's workspace
//! memory, chat lines, recall or summaries; tools are offered per agent.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::json;

use crate::config::Config;
use crate::error::ModelError;
use crate::inbound::{ChatKind, InboundMessage, Sender};
use crate::model::{Model, ModelReply, ModelRequest};
use crate::Runtime;

/// Answers "ok from <name>", recording every request's whole text.
struct Recording {
    name: &'static str,
    prompts: Mutex<Vec<String>>,
    tools: Mutex<Vec<Vec<String>>>,
}

impl Recording {
    fn new(name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            prompts: Mutex::default(),
            tools: Mutex::default(),
        })
    }

    fn prompts(&self) -> Vec<String> {
        self.prompts.lock().unwrap().clone()
    }
}

impl Model for Recording {
    fn name(&self) -> &str {
        self.name
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        let text: Vec<&str> = request
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        self.prompts.lock().unwrap().push(text.join("\n"));
        self.tools
            .lock()
            .unwrap()
            .push(request.tools.iter().map(|t| t.name.clone()).collect());
        let name = self.name;
        Box::pin(async move {
            Ok(ModelReply {
                text: format!("ok from {name}"),
                ..ModelReply::default()
            })
        })
    }
}

fn said(sender: &str, id: &str, text: &str, addressed: bool) -> InboundMessage {
    InboundMessage {
        channel: "test".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Group,
        chat_id: "g1".into(),
        thread_id: None,
        message_id: id.into(),
        sender: Sender {
            id: sender.into(),
            name: sender.to_uppercase(),
            is_bot: false,
        },
        text: text.into(),
        mentions: vec![],
        mentioned_bot: addressed,
        reply_to: None,
        timestamp_ms: 0,
        attachments: vec![],
        kind: crate::inbound::MessageKind::Message,
    }
}

/// Submits `m` and waits for its answer (addressed) or its acknowledgement (chatter).
async fn say(rt: &Runtime, m: InboundMessage) -> Option<String> {
    let addressed = m.mentioned_bot;
    let mut waiter = rt.reply_to(&m.message_id);
    match rt.submit(m).await {
        Ok(_) if addressed => Some(waiter.recv().await.unwrap().text.clone()),
        Ok(_) => None,
        Err(e) if e.dropped().is_some() => None,
        Err(e) => panic!("{e}"),
    }
}

fn workspace(root: &std::path::Path, name: &str, secret: &str) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("memory")).unwrap();
    std::fs::write(
        dir.join("MEMORY.md"),
        format!("Long-term memory: {secret}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("memory/2025-01-02.md"),
        format!("The vault and the zebras: {secret}-daily.\n"),
    )
    .unwrap();
    dir
}

#[tokio::test]
async fn two_agents_in_one_group_chat_do_not_see_each_others_memory() {
    let dir = tempfile::tempdir().unwrap();
    let wa = workspace(dir.path(), "wa", "alpha-secret");
    let wb = workspace(dir.path(), "wb", "bravo-secret");
    let mut config = Config::parse(&format!(
        r#"
[queue]
mode = "followup"
debounce_ms = 0
[agents.a]
system_prompt = "You are agent A."
workspace_dir = {wa:?}
[agents.b]
system_prompt = "You are agent B."
workspace_dir = {wb:?}
tools_deny = ["secret_*"]
# Alice's messages in the chat go to `a`, everyone else's to `b` (one tier: config order).
[[bindings]]
agent = "a"
channel = "test"
sender_id = "alice"
[[bindings]]
agent = "b"
channel = "test"
chat_id = "g1"
"#
    ))
    .unwrap();
    config.storage.data_dir = dir.path().join("data");
    let (ma, mb) = (Recording::new("model-a"), Recording::new("model-b"));
    let rt = Runtime::builder()
        .config(config)
        .agent_model("a", Arc::clone(&ma) as Arc<dyn Model>)
        .agent_model("b", Arc::clone(&mb) as Arc<dyn Model>)
        .tool("clock", "The time", json!({"type": "object"}), |_| async {
            Ok("noon".to_string())
        })
        .tool(
            "secret_vault",
            "Opens the vault",
            json!({"type": "object"}),
            |_| async { Ok("open".to_string()) },
        )
        .build()
        .await
        .unwrap();

    // Alice talks to `a`: chatter first (kept in the chat's record), then a question.
    assert_eq!(
        say(
            &rt,
            said(
                "alice",
                "1",
                "alpha-chatter: the password is swordfish",
                false
            )
        )
        .await,
        None
    );
    let a1 = say(
        &rt,
        said("alice", "2", "what about the vault and the zebras?", true),
    )
    .await;
    assert_eq!(a1.as_deref(), Some("ok from model-a"));
    // `a`'s session is compacted: a summary of what Alice said.
    let key_a = "agent:a:test:group:g1";
    let key_b = "agent:b:test:group:g1";
    assert_eq!(rt.agent_of_session(key_a), "a");
    // Bob asks `b` about exactly that.
    assert_eq!(
        say(&rt, said("bob", "3", "bravo-chatter: lunch at noon", false)).await,
        None
    );
    let b1 = say(
        &rt,
        said(
            "bob",
            "4",
            "what did alice say about the vault, the zebras, the swordfish password?",
            true,
        ),
    )
    .await;
    assert_eq!(b1.as_deref(), Some("ok from model-b"));
    rt.compact(key_a).await.unwrap();
    let b2 = say(
        &rt,
        said(
            "bob",
            "5",
            "and the alpha-chatter, the vault, swordfish?",
            true,
        ),
    )
    .await;
    assert_eq!(b2.as_deref(), Some("ok from model-b"));

    let pa = ma.prompts().join("\n----\n");
    let pb = mb.prompts().join("\n----\n");
    // Each agent saw its own prompt, memory (bootstrap and daily notes) and chatter…
    assert!(
        pa.contains("You are agent A.") && pa.contains("alpha-secret"),
        "{pa}"
    );
    assert!(
        pa.contains("alpha-secret-daily") && pa.contains("swordfish"),
        "{pa}"
    );
    assert!(
        pb.contains("You are agent B.") && pb.contains("bravo-secret"),
        "{pb}"
    );
    assert!(
        pb.contains("bravo-secret-daily") && pb.contains("lunch at noon"),
        "{pb}"
    );
    // … and nothing of the other's: no workspace, no chatter, no summary, no prompt.
    for leak in [
        "agent A",
        "alpha-secret",
        "alpha-chatter: the password",
        "is swordfish",
    ] {
        assert!(!pb.contains(leak), "agent b saw {leak:?}:\n{pb}");
    }
    for leak in [
        "agent B",
        "bravo-secret",
        "lunch at noon",
        "what did alice say",
    ] {
        assert!(!pa.contains(leak), "agent a saw {leak:?}:\n{pa}");
    }
    // Tools per agent: `b` is never offered the denied one.
    let tools_a = ma.tools.lock().unwrap().clone();
    let tools_b = mb.tools.lock().unwrap().clone();
    assert!(
        tools_a.iter().all(|t| t == &["clock", "secret_vault"]),
        "{tools_a:?}"
    );
    assert!(tools_b.iter().all(|t| t == &["clock"]), "{tools_b:?}");
    // The sessions say whose they are.
    let sessions = rt.sessions(None, 10).unwrap();
    let agents: Vec<(&str, &str)> = sessions
        .iter()
        .map(|s| (s.session_key.as_str(), s.agent.as_str()))
        .collect();
    assert!(
        agents.contains(&(key_a, "a")) && agents.contains(&(key_b, "b")),
        "{agents:?}"
    );
    rt.shutdown().await.unwrap();
}
