//! Tool call/result pairing of the messages of one request, repaired before every model call:
//! a `tool` message must answer a call of the assistant message right before its run of tool
//! messages, and every call must be answered — otherwise providers reject the request, and
//! would keep rejecting it on every retry.

use crate::context::processors::MISSING_RESULT_TEXT;
use crate::model::{ChatMessage, Role};

use super::result_message;

/// Drops orphan `tool` messages and adds a synthetic error result for every unanswered call.
/// Returns how many messages were dropped or added.
pub(crate) fn repair_tool_messages(messages: &mut Vec<ChatMessage>) -> usize {
    if is_paired(messages) {
        return 0;
    }
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

/// True when [`repair_tool_messages`] would change nothing. The context pipeline repairs
/// pairing already, so this is the usual case: a read-only pass finds it without moving every
/// message of the request into a new list.
fn is_paired(messages: &[ChatMessage]) -> bool {
    let mut open: Vec<&str> = Vec::new();
    for m in messages {
        if m.role == Role::Tool {
            let pending = m
                .tool_call_id
                .as_deref()
                .and_then(|id| open.iter().position(|o| *o == id));
            match pending {
                Some(i) => {
                    open.remove(i);
                }
                None => return false,
            }
            continue;
        }
        if !open.is_empty() {
            return false;
        }
        if m.role == Role::Assistant {
            open.extend(m.tool_calls.iter().map(|c| c.id.as_str()));
        }
    }
    open.is_empty()
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

    #[test]
    fn the_read_only_check_agrees_with_the_repair() {
        let u = || ChatMessage::text(Role::User, "u");
        let cases = vec![
            vec![],
            vec![u()],
            vec![
                u(),
                call_message("", &[call("a")]),
                result_message("a", "r"),
                u(),
            ],
            vec![
                call_message("", &[call("a"), call("b")]),
                result_message("b", "r"),
            ],
            vec![call_message("", &[call("a")]), u()],
            vec![result_message("a", "orphan"), u()],
            vec![
                call_message("", &[call("a"), call("b")]),
                result_message("b", "rb"),
                result_message("a", "ra"),
            ],
            vec![
                call_message("", &[call("a")]),
                result_message("a", "r"),
                result_message("a", "again"),
            ],
            vec![call_message("x", &[])],
        ];
        for case in cases {
            let mut repaired = case.clone();
            let changes = repair_tool_messages(&mut repaired);
            assert_eq!(is_paired(&case), changes == 0, "{case:?}");
        }
    }
}
