//! Embedding Turnstile in a tokio program: submit a message, read the reply, shut down.
//!
//! Run with `cargo run --example embed`.

use turnstile::inbound::{ChatKind, InboundMessage, MessageKind, Sender};
use turnstile::{Runtime, SubmitError};

#[tokio::main]
async fn main() -> Result<(), turnstile::Error> {
    let dir = std::env::temp_dir().join(format!("turnstile-embed-{}", std::process::id()));
    // The built-in `echo` model answers; point `[model]` at an OpenAI-compatible server for a real one.
    let runtime = Runtime::builder().data_dir(&dir).build().await?;
    let mut replies = runtime.subscribe();

    let message = InboundMessage {
        channel: "example".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Direct,
        chat_id: "42".into(),
        thread_id: None,
        message_id: "m1".into(),
        sender: Sender {
            id: "alice".into(),
            name: "Alice".into(),
            is_bot: false,
        },
        text: "Hello, Turnstile!".into(),
        mentions: vec![],
        mentioned_bot: false,
        reply_to: None,
        timestamp_ms: 0,
        attachments: vec![],
        kind: MessageKind::Message,
    };
    match runtime.submit(message).await {
        Ok(ack) => println!("accepted into session {}", ack.session_key),
        Err(SubmitError::Refused(refusal)) => println!("refused: {refusal}"),
        Err(SubmitError::Failed(e)) => return Err(e),
    }
    if let Ok(reply) = replies.recv().await {
        println!("reply: {}", reply.text);
    }

    runtime.shutdown().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
