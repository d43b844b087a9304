//! `turnstile chat`: an interactive chat with a running server.

use std::io::{BufRead, Write};

use anyhow::Context;

pub(crate) async fn chat(url: String, session: String) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let endpoint = format!("{}/v1/chat/completions", url.trim_end_matches('/'));
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    write!(out, "you> ")?;
    out.flush()?;
    for line in stdin.lock().lines() {
        let line = line?;
        let text = line.trim();
        if text.is_empty() {
            write!(out, "you> ")?;
            out.flush()?;
            continue;
        }
        if text == "/quit" || text == "/exit" {
            break;
        }
        let body = serde_json::json!({
            "model": "turnstile",
            "user": session,
            "messages": [{"role": "user", "content": text}],
        });
        let response = client
            .post(&endpoint)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("is a server running at {url}?"))?;
        let status = response.status();
        let value: serde_json::Value = response.json().await.context("reading the reply")?;
        if status.is_success() {
            let reply = value["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or("");
            writeln!(out, "bot> {reply}")?;
        } else {
            writeln!(out, "error {status}: {}", value["error"]["message"])?;
        }
        write!(out, "you> ")?;
        out.flush()?;
    }
    Ok(())
}
