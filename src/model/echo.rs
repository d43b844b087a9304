//! `echo`: the built-in test double and embedded default. It needs no network and describes
//! what it received; it is not a language model and never pretends to be one.

use futures_util::future::BoxFuture;

use super::{DeltaSink, Encoding, Model, ModelReply, ModelRequest, Role, TokenCounter, Usage};
use crate::error::ModelError;

/// Longest excerpt of the last message quoted in an echo reply.
pub(crate) const ECHO_QUOTE_CHARS: usize = 200;

/// The deterministic built-in model.
#[derive(Debug, Default, Clone)]
pub(crate) struct EchoModel;

impl Model for EchoModel {
    fn name(&self) -> &str {
        "echo"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move { Ok(echo(request)) })
    }

    /// Streams the reply a word at a time, so streaming consumers see several deltas.
    fn complete_streaming<'a>(
        &'a self,
        request: &'a ModelRequest,
        sink: DeltaSink,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let reply = echo(request);
            for word in reply.text.split_inclusive(' ') {
                // A closed sink means nobody is watching; the reply is still returned.
                if sink.send(word.to_string()).await.is_err() {
                    break;
                }
            }
            Ok(reply)
        })
    }
}

fn echo(request: &ModelRequest) -> ModelReply {
    let last = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .unwrap_or("");
    let mut quote: String = last.chars().take(ECHO_QUOTE_CHARS).collect();
    if last.chars().count() > ECHO_QUOTE_CHARS {
        quote.push('…');
    }
    let text = format!(
        "echo: received {} messages ({} tokens); last: {}",
        request.messages.len(),
        request.prompt_tokens,
        quote
    );
    // Counted like a real model's usage (its own tokenizer), since the turn stores the reply
    // with the count the model reports.
    let completion_tokens = TokenCounter::new(Encoding::Cl100k).count(&text);
    ModelReply {
        text,
        tool_calls: Vec::new(),
        usage: Some(Usage {
            prompt_tokens: request.prompt_tokens,
            completion_tokens,
        }),
        finish_reason: Some("stop".into()),
        model: Some("echo".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChatMessage;

    #[tokio::test]
    async fn describes_what_it_received() {
        let request = ModelRequest {
            messages: vec![
                ChatMessage::text(Role::System, "sys"),
                ChatMessage::text(Role::User, "hello there"),
            ],
            tools: vec![],
            prompt_tokens: 17,
            max_output_tokens: 100,
            params: Default::default(),
        };
        let reply = EchoModel.complete(&request).await.unwrap();
        assert_eq!(
            reply.text,
            "echo: received 2 messages (17 tokens); last: hello there"
        );
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let streamed = EchoModel.complete_streaming(&request, tx).await.unwrap();
        let mut pieces = Vec::new();
        while let Some(piece) = rx.recv().await {
            pieces.push(piece);
        }
        assert!(pieces.len() > 1, "{pieces:?}");
        assert_eq!(pieces.concat(), streamed.text);
        assert_eq!(streamed, reply);
    }
}
