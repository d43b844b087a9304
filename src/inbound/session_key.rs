//! Session keys: which conversation a message belongs to (OpenClaw-compatible, SPEC §2.2).

use super::message::{ChatKind, InboundMessage};

/// Longest normalised id.
pub const MAX_NORMALIZED_ID_CHARS: usize = 64;

/// Normalises an agent or account id: trimmed, lowercased, runs of characters outside
/// `[a-z0-9_-]` become `-`, leading and trailing `-` stripped, cut to 64 chars; empty gives
/// `fallback`.
pub fn normalize_id(raw: &str, fallback: &str) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_NORMALIZED_ID_CHARS));
    let mut in_run = false;
    for c in raw.trim().chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let trimmed: String = out
        .trim_matches('-')
        .chars()
        .take(MAX_NORMALIZED_ID_CHARS)
        .collect();
    let trimmed = trimmed.trim_end_matches('-');
    if trimmed.is_empty() {
        fallback.to_string()
    } else {
        trimmed.to_string()
    }
}

/// The session key of `msg` for `agent_id`, with the default DM scope (`main`): every direct
/// message shares `agent:<agent>:main`; groups and channels get
/// `agent:<agent>:<channel>:<group|channel>:<chat_id>`, with `:thread:<id>` for threads.
pub fn session_key(agent_id: &str, msg: &InboundMessage) -> String {
    let agent = normalize_id(agent_id, "main");
    let key = match msg.chat_kind {
        ChatKind::Direct => format!("agent:{agent}:main"),
        kind => {
            let mut key = format!(
                "agent:{agent}:{}:{}:{}",
                msg.channel.trim(),
                kind.as_str(),
                msg.chat_id.trim()
            );
            if let Some(thread) = &msg.thread_id {
                key.push_str(":thread:");
                key.push_str(thread.trim());
            }
            key
        }
    };
    key.to_lowercase()
}

/// Normalises a session key given explicitly (by API clients or in URLs): trimmed and
/// lowercased, so lookups match however the client cased it.
pub fn normalize_session_key(raw: &str) -> String {
    raw.trim().to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_normalisation() {
        for (raw, want) in [
            ("Main", "main"),
            ("  Sales Bot  ", "sales-bot"),
            ("a!!b", "a-b"),
            ("--x--", "x"),
            ("", "main"),
            ("***", "main"),
            ("ok_id-1", "ok_id-1"),
        ] {
            assert_eq!(normalize_id(raw, "main"), want, "{raw:?}");
        }
        assert_eq!(normalize_id(&"a".repeat(100), "main").len(), 64);
    }
}
