//! Tool call/result pairing of the messages of one request, repaired before every model call:
//! a `tool` message must answer a call of the assistant message right before its run of tool
//! messages, and every call must be answered — otherwise providers reject the request, and
//! would keep rejecting it on every retry.

use crate::context::processors::MISSING_RESULT_TEXT;
use crate::model::{ChatMessage, Role};

use super::result_message;

/// Drops orphan `tool` messages and adds a synthetic error result for every unanswered call.
/// Returns how many messages were dropped or added.
pub fn repair_tool_messages(messages: &mut Vec<ChatMessage>) -> usize {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    let mut open: Vec<String> = Vec::new();
    let mut changes = 0usize;
    let close = |open: &mut Vec<String>, out: &mut Vec<ChatMessage>, changes: &mut usize| {
        for id in open.drain(..) {
            out.push(result_message(&id, MISSING_RESULT_TEXT));
            *changes += 1;
        }
    };
    for m in messages.drain(..) {
        if m.role == Role::Tool {
            let pending = m
                .tool_call_id
                .as_ref()
                .and_then(|id| open.iter().position(|o| o == id));
            match pending {
                Some(i) => {
                    open.remove(i);
                    out.push(m);
                }
                None => changes += 1,
            }
            continue;
        }
        close(&mut open, &mut out, &mut changes);
        if m.role == Role::Assistant {
            open.extend(m.tool_calls.iter().map(|c| c.id.clone()));
        }
        out.push(m);
    }
    close(&mut open, &mut out, &mut changes);
    *messages = out;
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use crate::tools::call_message;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn orphans_go_and_missing_results_are_filled() {
        let mut m = vec![
            ChatMessage::text(Role::System, "s"),
            result_message("ghost", "orphan"),
            call_message("", &[call("a"), call("b")]),
            result_message("b", "rb"),
            ChatMessage::text(Role::User, "u"),
            result_message("a", "late"),
            call_message("x", &[call("c")]),
        ];
        assert_eq!(repair_tool_messages(&mut m), 4);
        let shape: Vec<(Role, Option<&str>)> = m
            .iter()
            .map(|m| (m.role, m.tool_call_id.as_deref()))
            .collect();
        assert_eq!(
            shape,
            [
                (Role::System, None),
                (Role::Assistant, None),
                (Role::Tool, Some("b")),
                (Role::Tool, Some("a")),
                (Role::User, None),
                (Role::Assistant, None),
                (Role::Tool, Some("c")),
            ]
        );
        assert_eq!(m[3].content, MISSING_RESULT_TEXT);
        // Idempotent.
        assert_eq!(repair_tool_messages(&mut m), 0);
    }
}
