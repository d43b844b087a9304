//! A `tools/call` result as the text of a tool message.
//!
//! Text blocks are joined with newlines; structured content with no text beside it is sent
//! as JSON; images, audio and embedded resources are named, not inlined (a chat model's tool
//! message is text, and base64 would only burn its context).

use rmcp::model::{CallToolResult, ContentBlock};

/// The text of `result`, and whether the server flagged it as an error.
pub(crate) fn result_text(result: &CallToolResult) -> (String, bool) {
    let mut parts: Vec<String> = Vec::with_capacity(result.content.len());
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!("[image: {}]", i.mime_type),
            ContentBlock::Audio(a) => format!("[audio: {}]", a.mime_type),
            ContentBlock::Resource(_) => "[embedded resource]".to_string(),
            ContentBlock::ResourceLink(r) => format!("[resource: {}]", r.uri),
            _ => "[content of a kind this client does not read]".to_string(),
        });
    }
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    (parts.join("\n"), result.is_error.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_text_and_falls_back_to_structured_content() {
        let r = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(result_text(&r), ("a\nb".to_string(), false));
        let r = CallToolResult::error(vec![ContentBlock::text("bad")]);
        assert_eq!(result_text(&r), ("bad".to_string(), true));
        let r = CallToolResult::structured(serde_json::json!({"n": 1}));
        assert!(
            result_text(&r).0.contains("\"n\":1"),
            "{:?}",
            result_text(&r)
        );
    }
}
