//! Inbound: the normalised message every channel produces, its validation, and the session key
//! it belongs to.

mod message;
mod sanitize;
mod session_key;

pub use message::{
    Attachment, ChatKind, InboundMessage, Sender, MAX_ATTACHMENTS, MAX_ID_CHARS, MAX_MENTIONS,
};
pub use sanitize::{sanitize_text, untrusted, untrusted_block, MAX_UNTRUSTED_CHARS};
pub use session_key::{normalize_id, normalize_session_key, session_key, MAX_NORMALIZED_ID_CHARS};

/// What a channel submits: a validated message, and optionally the session it must go to
/// (the OpenAI-compatible endpoint names its session explicitly).
#[derive(Debug, Clone)]
pub struct InboundEvent {
    /// The message, already validated.
    pub message: InboundMessage,
    /// An explicit session key; `None` derives it from the message.
    pub session_key: Option<String>,
}
