//! Models: the request/response shapes a turn uses, the built-in `echo` model, the
//! OpenAI-compatible client, per-model token calibration, the per-model request limiter
//! (`limiter.rs`: AIMD on 429, requests and tokens per minute), and token counting
//! (`tokens.rs`; `pretokenize.rs`: cl100k's split of ASCII text without its regex).

mod calibration;
mod echo;
mod limiter;
pub(crate) mod openai;
mod pretokenize;
mod text;
mod tokens;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub(crate) use calibration::{CalibrationStore, MIN_PLAUSIBLE_WINDOW};
pub(crate) use echo::EchoModel;
pub(crate) use limiter::{LimiterSettings, ModelLimiter};
pub(crate) use openai::{OpenAiModel, OpenAiSettings};
pub(crate) use text::MessageText;
pub(crate) use tokens::MESSAGE_OVERHEAD_TOKENS;
pub use tokens::{Encoding, TokenCounter};

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

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, echoed by the matching tool result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as the JSON text the model produced.
    pub arguments: String,
}

/// A tool the model may call (registered by the embedding application).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: serde_json::Value,
}

/// One message sent to a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: Role,
    /// What is said (shared with the transcript entry it came from, when it did).
    pub content: MessageText,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Images sent with a user message (URLs, with `[model] vision`); models that take them
    /// get them as `image_url` parts beside the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_urls: Vec<String>,
}

impl ChatMessage {
    /// A plain text message.
    pub fn text(role: Role, content: impl Into<MessageText>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            image_urls: Vec::new(),
        }
    }
}

/// A request to a model.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The assembled context, in order.
    pub messages: Vec<ChatMessage>,
    /// Tools the model may call (empty: none).
    pub tools: Vec<ToolSpec>,
    /// Our token count of `messages`.
    pub prompt_tokens: u32,
    /// Most tokens the answer may use.
    pub max_output_tokens: u32,
    /// Sampling and output parameters the client asked for (OpenAI-compatible endpoint).
    pub params: RequestParams,
}

/// Per-request parameters forwarded to an OpenAI-compatible server; `None`/empty: not sent, the
/// server's default applies. Models that cannot honour them (the echo model) ignore them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestParams {
    /// Most tokens of the answer; replaces `max_output_tokens` when lower.
    pub max_tokens: Option<u32>,
    /// Sampling temperature (0 to 2).
    pub temperature: Option<f64>,
    /// Nucleus sampling (0 to 1).
    pub top_p: Option<f64>,
    /// Sequences that end the answer (at most four).
    pub stop: Vec<String>,
    /// Seed for repeatable sampling.
    pub seed: Option<i64>,
    /// Penalty for tokens by how often they appeared (-2 to 2).
    pub frequency_penalty: Option<f64>,
    /// Penalty for tokens that appeared at all (-2 to 2).
    pub presence_penalty: Option<f64>,
    /// The answer's format (`{"type": "json_object"}`…), as the client sent it.
    pub response_format: Option<serde_json::Value>,
    /// Which tool the model must or may call, as the client sent it.
    pub tool_choice: Option<serde_json::Value>,
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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelReply {
    /// The text.
    pub text: String,
    /// Tool calls the model asked for (empty: a final answer).
    pub tool_calls: Vec<ToolCall>,
    /// Usage, when the server reports it.
    pub usage: Option<Usage>,
    /// Why the model stopped (`stop`, `length`, `tool_calls`…), as the server said.
    pub finish_reason: Option<String>,
    /// The model that answered (the primary or a fallback), when the client knows it.
    pub model: Option<String>,
}

/// Receives the text of a streamed answer as it arrives. Bounded by its channel's capacity.
pub type DeltaSink = tokio::sync::mpsc::Sender<String>;

/// Something that answers a chat request. Object-safe so the model is chosen by config.
pub trait Model: Send + Sync + 'static {
    /// The model's name (also picks the tokenizer).
    fn name(&self) -> &str;

    /// Answers `request`.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;

    /// Answers `request`, sending the text to `sink` as it arrives; the returned reply holds
    /// the whole answer. A closed sink does not stop the call. The default sends the whole text
    /// as one delta once [`Model::complete`] returns, for models that cannot stream.
    fn complete_streaming<'a>(
        &'a self,
        request: &'a ModelRequest,
        sink: DeltaSink,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let reply = self.complete(request).await?;
            if !reply.text.is_empty() {
                // A closed sink means nobody is watching; the reply is still returned.
                let _ = sink.send(reply.text.clone()).await;
            }
            Ok(reply)
        })
    }
}
