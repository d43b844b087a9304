//! Models: the request/response shapes a turn uses, the built-in `echo` model, and token
//! counting.

mod echo;
mod tokens;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub use echo::{EchoModel, ECHO_QUOTE_CHARS};
pub use tokens::{Encoding, TokenCounter, MAX_RUN_BYTES, MESSAGE_OVERHEAD_TOKENS};

use crate::error::ModelError;

/// The speaker of a chat message, as OpenAI-compatible servers name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// One message sent to a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: Role,
    /// What is said.
    pub content: String,
}

/// A request to a model.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The assembled context, in order.
    pub messages: Vec<ChatMessage>,
    /// Our token count of `messages`.
    pub prompt_tokens: u32,
    /// Most tokens the answer may use.
    pub max_output_tokens: u32,
}

/// Token usage reported by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Prompt tokens as the server counted them.
    pub prompt_tokens: u32,
    /// Completion tokens.
    pub completion_tokens: u32,
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReply {
    /// The text.
    pub text: String,
    /// Usage, when the server reports it.
    pub usage: Option<Usage>,
}

/// Something that answers a chat request. Object-safe so the model is chosen by config.
pub trait Model: Send + Sync + 'static {
    /// The model's name (also picks the tokenizer).
    fn name(&self) -> &str;

    /// Answers `request`.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;
}
