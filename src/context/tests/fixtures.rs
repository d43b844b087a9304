//! Builders shared by the context tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Config;
use crate::context::{
    Assembly, AssemblyRequest, BlockKind, BlockMeta, ChatPolicy, ContextBlock, ContextEngine,
    ContextStore, CurrentMessage, MemoryStore, Registry, SessionView,
};
use crate::inbound::{ChatKind, InboundMessage, Sender};
use crate::model::{Encoding, TokenCounter, MESSAGE_OVERHEAD_TOKENS};
use crate::store::{EntryKind, HistoryLine, InboxRecord, SystemEvent, ToolInfo, TranscriptEntry};

/// "Now" in every test: 2025-11-30T02:33:20Z.
pub(super) const NOW: u64 = 1_764_470_000_000;
pub(super) const MINUTE: u64 = 60_000;

pub(super) fn tokens() -> TokenCounter {
    TokenCounter::new(Encoding::Cl100k)
}

/// The checked-in workspace fixture.
pub(super) fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/context/golden")
}

/// A transcript entry of `kind` written `ago` ms before [`NOW`].
pub(super) fn entry(kind: EntryKind, text: &str, ago: u64) -> TranscriptEntry {
    TranscriptEntry::new(kind, text, tokens().count(text), NOW - ago)
}

pub(super) fn user(text: &str, id: &str, ago: u64) -> TranscriptEntry {
    entry(EntryKind::User, text, ago).with_message_id(id)
}

pub(super) fn tool_call(call_id: &str, name: &str, args: &str, ago: u64) -> TranscriptEntry {
    let tokens = tokens().count(name) + tokens().count(args);
    let call = ToolInfo {
        call_id: call_id.into(),
        name: name.into(),
        arguments: args.into(),
    };
    TranscriptEntry::tool_call("", tokens, NOW - ago, call)
}

pub(super) fn tool_result(call_id: &str, name: &str, text: &str, ago: u64) -> TranscriptEntry {
    entry(EntryKind::ToolResult, text, ago).with_tool(ToolInfo {
        call_id: call_id.into(),
        name: name.into(),
        arguments: String::new(),
    })
}

pub(super) fn inbound(kind: ChatKind, id: &str, text: &str, ago: u64) -> InboundMessage {
    InboundMessage {
        channel: "telegram".into(),
        account_id: "default".into(),
        chat_kind: kind,
        chat_id: "-100123".into(),
        thread_id: None,
        message_id: id.into(),
        sender: Sender {
            id: "111".into(),
            name: "Alice".into(),
            is_bot: false,
        },
        text: text.into(),
        mentions: vec![],
        mentioned_bot: true,
        reply_to: None,
        timestamp_ms: NOW - ago,
        attachments: vec![],
        kind: crate::inbound::MessageKind::Message,
    }
}

pub(super) fn current(
    message: InboundMessage,
    inbox_seq: u64,
    system_events: Vec<SystemEvent>,
    group_history: Vec<HistoryLine>,
) -> CurrentMessage {
    let tokens = tokens().count(&message.text);
    CurrentMessage {
        inbox_seq,
        record: Arc::new(InboxRecord {
            message,
            accepted_at_ms: NOW,
            system_events,
            group_history,
        }),
        tokens,
    }
}

/// A config whose workspace is `workspace` (skills shown relative to its parent as `~`).
pub(super) fn config_with_workspace(workspace: Option<&Path>) -> Config {
    let mut c = Config::default();
    c.context.system_prompt = "You are Turnstile's test agent.".into();
    c.agent.workspace_dir = workspace.map(Path::to_path_buf);
    if let Some(home) = workspace.and_then(Path::parent) {
        for s in &mut c.context.sources {
            if s.name == "skills" {
                s.params
                    .insert("home_dir".into(), home.display().to_string().into());
            }
        }
    }
    c
}

pub(super) fn engine(config: &Config) -> ContextEngine {
    ContextEngine::new(config, &Registry::builtin(), tokens()).unwrap()
}

pub(super) fn assemble(
    engine: &ContextEngine,
    store: &MemoryStore,
    key: &str,
    session_id: u64,
    current: &[CurrentMessage],
) -> Arc<Assembly> {
    engine
        .assemble(
            store,
            AssemblyRequest {
                session_key: key,
                stored: store.stored(session_id),
                current,
                queue: Default::default(),
                now_ms: NOW,
            },
        )
        .unwrap()
}

/// A view for running one stage alone.
pub(super) fn view<'a>(
    policy: &'a ChatPolicy,
    store: &'a dyn ContextStore,
    total: u32,
) -> SessionView<'a> {
    SessionView::new(
        "agent:main:main",
        ChatKind::Direct,
        policy,
        NOW,
        &[],
        None,
        tokens(),
        total,
        store,
    )
}

/// A conversation block as history makes it.
pub(super) fn conv(kind: BlockKind, text: &str, seq: u64, ago: u64) -> ContextBlock {
    let mut b = ContextBlock::new(kind, text, tokens().count(text) + MESSAGE_OVERHEAD_TOKENS)
        .with_meta(BlockMeta {
            seq: Some(seq),
            timestamp_ms: Some(NOW - ago),
            user_text: kind == BlockKind::User,
            ..BlockMeta::default()
        });
    b.source = "history".into();
    // History is collected newest first.
    b.index = u32::MAX - seq as u32;
    b
}
