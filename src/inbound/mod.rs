//! Inbound: the normalised message every channel produces, its validation, the session key
//! it belongs to, preflight (which messages become turns) and its vocabulary (`refusal.rs`).

mod message;
pub mod preflight;
mod refusal;
mod sanitize;
mod session_key;

pub use message::{
    check_session_key, Attachment, ChatKind, InboundMessage, MessageKind, Sender, MAX_ATTACHMENTS,
    MAX_ATTACHMENT_URL_CHARS, MAX_ID_CHARS, MAX_MENTIONS, OPENAI_API_CHANNEL,
};
pub use preflight::{Preflight, PreflightStats};
pub use refusal::{DropReason, Refusal};
pub use sanitize::{sanitize_text, untrusted, untrusted_block, MAX_UNTRUSTED_CHARS};
pub use session_key::{
    channel_name, identity_links, normalize_id, normalize_session_key, peer_id, session_key,
    user_session_key, SessionKeys, GLOBAL_SESSION_KEY, MAX_NORMALIZED_ID_CHARS, PHONE_CHANNELS,
};

/// What a channel submits: a validated message, and optionally the session it must go to
/// (the OpenAI-compatible endpoint names its session explicitly).
#[derive(Debug, Clone)]
pub struct InboundEvent {
    /// The message, already validated.
    pub message: InboundMessage,
    /// An explicit session key; `None` derives it from the message.
    pub session_key: Option<String>,
    /// The message id was minted by this server for this one request (an OpenAI-compatible
    /// request without an idempotency key, on its first attempt), so it cannot arrive again
    /// after a restart: admission checks it against the in-memory dedupe only and writes no
    /// durable dedupe mark (two sled writes and a lookup per turn saved).
    pub minted_id: bool,
}
