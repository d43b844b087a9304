//! The binding matrix: inbound messages to the agent, the tier that matched and the session
//! key; the config contract's validation errors; model names to agents.

use super::*;
use crate::inbound::{ChatKind, Sender};

/// A message on `channel` of `kind` in `chat` from `sender`.
fn msg(channel: &str, kind: ChatKind, chat: &str, sender: &str) -> InboundMessage {
    InboundMessage {
        channel: channel.into(),
        account_id: "default".into(),
        chat_kind: kind,
        chat_id: chat.into(),
        thread_id: None,
        message_id: "m1".into(),
        sender: Sender {
            id: sender.into(),
            name: "Someone".into(),
            is_bot: false,
        },
        text: "hi".into(),
        mentions: vec![],
        mentioned_bot: false,
        reply_to: None,
        timestamp_ms: 1,
        attachments: vec![],
        kind: Default::default(),
    }
}

fn dm(channel: &str, sender: &str) -> InboundMessage {
    msg(channel, ChatKind::Direct, sender, sender)
}

fn group(channel: &str, chat: &str, sender: &str) -> InboundMessage {
    msg(channel, ChatKind::Group, chat, sender)
}

fn in_thread(mut m: InboundMessage, id: &str) -> InboundMessage {
    m.thread_id = Some(id.into());
    m
}

fn on_account(mut m: InboundMessage, id: &str) -> InboundMessage {
    m.account_id = id.into();
    m
}

fn hints(guild: &str, roles: &[&str]) -> RouteHints {
    RouteHints {
        guild_id: Some(guild.into()),
        roles: roles.iter().map(|r| r.to_string()).collect(),
    }
}

/// Agents `main` (default), `support`, `ops`, `sales`, `vip`, `topic`, `mods`, `guild`,
/// `work`, `tg` and `groups`, with one binding per tier (and two in one tier, to show config
/// order), written out of order on purpose: precedence comes from the tiers, not the order.
const MATRIX: &str = r#"
[session]
dm_scope = "per-channel-peer"

[agents.support]
system_prompt = "You are support."
[agents.ops]
[agents.sales]
[agents.vip]
[agents.topic]
[agents.mods]
[agents.guild]
[agents.work]
[agents.tg]
[agents.groups]

[[bindings]]
agent = "tg"
channel = "telegram"

[[bindings]]
agent = "groups"
chat_kind = "group"
channel = "slack"

[[bindings]]
agent = "work"
channel = "telegram"
account_id = "work-bot"

[[bindings]]
agent = "guild"
channel = "discord"
guild_id = "g1"

[[bindings]]
agent = "mods"
channel = "discord"
guild_id = "g1"
roles = ["moderator", "admin"]

[[bindings]]
agent = "support"
channel = "telegram"
chat_id = "-100500"

[[bindings]]
agent = "sales"
channel = "telegram"
chat_id = "-100500"

[[bindings]]
agent = "vip"
sender_id = "+1 (555) 000-1111"

[[bindings]]
agent = "topic"
channel = "telegram"
chat_id = "-100500"
thread_id = "42"

[[bindings]]
agent = "ops"
channel = "discord"
chat_id = "c-ops"
"#;

fn directory(toml: &str) -> AgentDirectory {
    let config = Config::parse(toml).expect("the config is valid");
    AgentDirectory::new(&config).expect("the directory builds")
}

#[test]
fn the_binding_matrix() {
    let d = directory(MATRIX);
    let none = RouteHints::default();
    // (message, hints, agent, tier, session key)
    let cases: Vec<(InboundMessage, RouteHints, &str, Option<Tier>, &str)> = vec![
        // Nothing matches: the default agent, today's key.
        (
            dm("webhook", "u1"),
            none.clone(),
            "main",
            None,
            "agent:main:webhook:direct:u1",
        ),
        // A channel binding.
        (
            dm("telegram", "77"),
            none.clone(),
            "tg",
            Some(Tier::Channel),
            "agent:tg:telegram:direct:77",
        ),
        // An account binding beats the channel binding.
        (
            on_account(dm("telegram", "77"), "Work-Bot"),
            none.clone(),
            "work",
            Some(Tier::Account),
            "agent:work:telegram:direct:77",
        ),
        // A chat binding beats the account and channel bindings; of two chat bindings the
        // first in config order wins.
        (
            on_account(group("telegram", "-100500", "5"), "work-bot"),
            none.clone(),
            "support",
            Some(Tier::Peer),
            "agent:support:telegram:group:-100500",
        ),
        // A thread binding beats its chat's; a Telegram topic in `thread_id` …
        (
            in_thread(group("telegram", "-100500", "5"), "42"),
            none.clone(),
            "topic",
            Some(Tier::Thread),
            "agent:topic:telegram:group:-100500:topic:42",
        ),
        // … or written into the chat id, as the Telegram channel does.
        (
            group("telegram", "-100500:topic:42", "5"),
            none.clone(),
            "topic",
            Some(Tier::Thread),
            "agent:topic:telegram:group:-100500:topic:42",
        ),
        // Another topic of that chat: the chat binding (OpenClaw's parent peer).
        (
            in_thread(group("telegram", "-100500", "5"), "43"),
            none.clone(),
            "support",
            Some(Tier::Peer),
            "agent:support:telegram:group:-100500:topic:43",
        ),
        // A sender binding, on any channel, the number in any spelling.
        (
            dm("whatsapp", "+15550001111"),
            none.clone(),
            "vip",
            Some(Tier::Peer),
            "agent:vip:whatsapp:direct:+15550001111",
        ),
        (
            group("signal", "grp", "tel:+1-555-000-1111"),
            none.clone(),
            "vip",
            Some(Tier::Peer),
            "agent:vip:signal:group:grp",
        ),
        // Discord: a channel binding beats guild and roles bindings.
        (
            msg("discord", ChatKind::Channel, "c-ops", "9"),
            hints("g1", &["admin"]),
            "ops",
            Some(Tier::Peer),
            "agent:ops:discord:channel:c-ops",
        ),
        // Guild + a role the sender holds.
        (
            msg("discord", ChatKind::Channel, "c-general", "9"),
            hints("g1", &["member", "admin"]),
            "mods",
            Some(Tier::GuildRoles),
            "agent:mods:discord:channel:c-general",
        ),
        // Guild, without one of those roles.
        (
            msg("discord", ChatKind::Channel, "c-general", "9"),
            hints("g1", &["member"]),
            "guild",
            Some(Tier::Guild),
            "agent:guild:discord:channel:c-general",
        ),
        // Another guild: nothing matches.
        (
            msg("discord", ChatKind::Channel, "c-general", "9"),
            hints("g2", &["admin"]),
            "main",
            None,
            "agent:main:discord:channel:c-general",
        ),
        // Chat kind: Slack groups go to `groups`, Slack DMs to the default.
        (
            group("slack", "C0123", "U1"),
            none.clone(),
            "groups",
            Some(Tier::Channel),
            "agent:groups:slack:group:c0123",
        ),
        (
            dm("slack", "U1"),
            none.clone(),
            "main",
            None,
            "agent:main:slack:direct:u1",
        ),
        // Case does not matter in channel, chat or account ids.
        (
            group("Telegram", "-100500", "5"),
            none.clone(),
            "support",
            Some(Tier::Peer),
            "agent:support:telegram:group:-100500",
        ),
    ];
    for (m, h, agent, tier, key) in cases {
        let (got_key, route) = d.session_key(&m, &h);
        assert_eq!(
            (route.agent.as_str(), route.matched_by, got_key.as_str()),
            (agent, tier, key),
            "message {m:?} with {h:?}"
        );
        // The key names its agent again.
        assert_eq!(d.agent_of_key(&got_key), agent);
    }
}

#[test]
fn no_agents_no_change() {
    // Today's config: one agent, its keys exactly as before.
    let d = directory("");
    assert!(!d.is_multi());
    assert_eq!(d.default_id(), "main");
    let (key, route) = d.session_key(&dm("telegram", "1"), &RouteHints::default());
    assert_eq!(
        (key.as_str(), route.agent.as_str()),
        ("agent:main:main", "main")
    );
    let d = directory("[session]\nagent_id = \"Bob\"\nscope = \"global\"\n");
    assert_eq!(d.default_id(), "bob");
    assert_eq!(
        d.session_key(&dm("x", "1"), &RouteHints::default()).0,
        "global"
    );
    // Keys naming no configured agent belong to the default agent.
    assert_eq!(d.agent_of_key("agent:other:main"), "bob");
    assert_eq!(d.agent_of_key("global"), "bob");
    assert_eq!(d.agent_of_key("alice-oa"), "bob");
}

#[test]
fn a_global_scope_is_global_per_agent() {
    let d = directory(
        "[session]\nscope = \"global\"\n[agents.b]\n[[bindings]]\nagent = \"b\"\nchannel = \"x\"\n",
    );
    let none = RouteHints::default();
    assert_eq!(d.session_key(&dm("y", "1"), &none).0, "global");
    assert_eq!(d.session_key(&dm("x", "1"), &none).0, "agent:b:global");
    assert_eq!(d.agent_of_key("agent:b:global"), "b");
}

#[test]
fn a_missing_account_matches_every_account() {
    // OpenClaw matches only the account `default` here; Turnstile every account.
    let d = directory(
        "[agents.b]\n[[bindings]]\nagent = \"b\"\nchannel = \"telegram\"\nchat_id = \"1\"\n",
    );
    let m = on_account(group("telegram", "1", "2"), "second-bot");
    assert_eq!(d.route(&m, &RouteHints::default()).agent, "b");
    let star = directory(
        "[agents.b]\n[[bindings]]\nagent = \"b\"\nchannel = \"telegram\"\naccount_id = \"*\"\n",
    );
    let r = star.route(&m, &RouteHints::default());
    assert_eq!((r.agent.as_str(), r.matched_by), ("b", Some(Tier::Channel)));
}

#[test]
fn profiles_inherit_all_but_the_workspace() {
    let d = directory(
        r#"
[context]
system_prompt = "top"
[model]
model = "m-top"
fallbacks = ["f1"]
[agent]
workspace_dir = "/srv/main"
[context.presets.tiny]
max_messages = 3
[agents.b]
model = "m-b"
presets = { group = "tiny" }
tools_allow = ["clock", "github__*"]
tools_deny = ["github__delete_*"]
mcp_servers = ["github"]
aliases = ["support-bot"]
[agents.c]
system_prompt = "c prompt"
fallbacks = []
workspace_dir = "/srv/c"
"#,
    );
    let main = d.profile("main").unwrap();
    assert!(main.is_default);
    assert_eq!(main.config.context.system_prompt, "top");
    assert_eq!(
        main.config.agent.workspace_dir.as_deref(),
        Some(std::path::Path::new("/srv/main"))
    );
    let b = d.profile("b").unwrap();
    assert_eq!(b.config.context.system_prompt, "top");
    assert_eq!(
        (
            b.config.model.model.as_str(),
            b.config.model.fallbacks.clone()
        ),
        ("m-b", vec!["f1".to_string()])
    );
    assert_eq!(b.config.agent.workspace_dir, None, "not inherited");
    assert_eq!(b.config.context.chat_kinds.group, "tiny");
    assert_eq!(b.config.context.chat_kinds.direct, "assistant");
    assert!(b.tools.allows("github__create_issue") && !b.tools.allows("github__delete_repo"));
    assert!(!b.tools.allows("shell"));
    assert_eq!(b.mcp_servers, vec!["github".to_string()]);
    let c = d.profile("c").unwrap();
    assert_eq!(c.config.context.system_prompt, "c prompt");
    assert_eq!(c.config.model.model, "m-top");
    assert!(c.config.model.fallbacks.is_empty());
    assert!(c.tools.is_open());
    assert_eq!(
        d.profiles().map(|p| p.id.as_str()).collect::<Vec<_>>(),
        ["main", "b", "c"]
    );
}

#[test]
fn models_select_agents() {
    let d = directory("[agents.b]\naliases = [\"Support-Bot\"]\n");
    assert_eq!(d.agent_for_model("agent:b"), Ok(Some("b")));
    assert_eq!(d.agent_for_model("agent:main"), Ok(Some("main")));
    assert_eq!(d.agent_for_model("support-bot"), Ok(Some("b")));
    assert_eq!(d.agent_for_model("gpt-4o"), Ok(None));
    assert!(d
        .agent_for_model("agent:nope")
        .unwrap_err()
        .contains("no agent \"nope\""));
    // Sessions named by an OpenAI client.
    assert_eq!(d.session_for_agent("main", "alice").unwrap(), "alice");
    assert_eq!(d.session_for_agent("b", "alice").unwrap(), "agent:b:alice");
    assert_eq!(d.session_for_agent("b", "agent:b:x").unwrap(), "agent:b:x");
    assert!(d.session_for_agent("main", "agent:b:x").is_err());
    assert!(d.session_for_agent("b", "agent:main:x").is_err());
    assert_eq!(d.chat_scope("main"), None);
    assert_eq!(d.chat_scope("b"), Some("b"));
}

#[test]
fn config_errors_are_clear() {
    let err = |toml: &str| Config::parse(toml).unwrap_err().to_string();
    let e = err("[[bindings]]\nagent = \"nope\"\nchannel = \"x\"\n");
    assert!(
        e.contains("bindings[0].agent")
            && e.contains("unknown agent \"nope\"")
            && e.contains("main"),
        "{e}"
    );
    let e = err("[agents.b]\n[[bindings]]\nagent = \"b\"\n");
    assert!(
        e.contains("bindings[0]") && e.contains("at least one of"),
        "{e}"
    );
    let e = err("[[bindings]]\nchannel = \"x\"\n");
    assert!(e.contains("agent"), "{e}");
    let e = err("[agents.b]\n[[bindings]]\nagent = \"b\"\nthread_id = \"1\"\n");
    assert!(
        e.contains("bindings[0].thread_id") && e.contains("chat_id"),
        "{e}"
    );
    let e = err("[agents.b]\n[[bindings]]\nagent = \"b\"\nroles = [\"r\"]\n");
    assert!(
        e.contains("bindings[0].roles") && e.contains("guild_id"),
        "{e}"
    );
    let e = err("[agents.b]\n[[bindings]]\nagent = \"b\"\nchat_kind = \"room\"\n");
    assert!(e.contains("room"), "{e}");
    let e = err("[agents.Support]\n");
    assert!(
        e.contains("agents.Support") && e.contains("[agents.support]"),
        "{e}"
    );
    let e = err("[agents.b]\npresets = { group = \"nope\" }\n");
    assert!(
        e.contains("agents.b.presets.group") && e.contains("nope"),
        "{e}"
    );
    let e = err("[agents.b]\nworkspace_dir = \"/w\"\n[agents.c]\nworkspace_dir = \"/x/../w/.\"\n");
    assert!(
        e.contains("agents.c.workspace_dir") && e.contains("share"),
        "{e}"
    );
    let e = err("[agent]\nworkspace_dir = \"/w\"\n[agents.b]\nworkspace_dir = \"/w\"\n");
    assert!(
        e.contains("agents.b.workspace_dir") && e.contains("\"main\""),
        "{e}"
    );
    // The default agent may name the top-level workspace as its own.
    Config::parse("[agent]\nworkspace_dir = \"/w\"\n[agents.main]\nworkspace_dir = \"/w\"\n")
        .unwrap();
    let e = err("[agents.b]\naliases = [\"x\"]\n[agents.c]\naliases = [\"X\"]\n");
    assert!(
        e.contains("agents.c.aliases") && e.contains("alias of agent \"b\""),
        "{e}"
    );
    let e = err("[agents.b]\naliases = [\"agent:c\"]\n");
    assert!(e.contains("built in"), "{e}");
    let e = err("[agents.b]\ntools_allow = [\"a b\"]\n");
    assert!(e.contains("agents.b.tools_allow"), "{e}");
    let e = err("[agents.b]\nmcp_servers = [\"\"]\n");
    assert!(e.contains("agents.b.mcp_servers"), "{e}");
    let e = err("[agents.b]\nbogus = 1\n");
    assert!(e.contains("bogus"), "{e}");
    let e =
        err("[agents.b]\nfallbacks = [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]\n");
    assert!(e.contains("agents.b.fallbacks"), "{e}");
}

#[test]
fn the_config_round_trips() {
    let config = Config::parse(MATRIX).unwrap();
    let text = toml::to_string(&config).unwrap();
    let back = Config::parse(&text).unwrap();
    assert_eq!(back.agents, config.agents);
    assert_eq!(back.bindings, config.bindings);
}
