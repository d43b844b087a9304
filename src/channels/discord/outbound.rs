//! What a reply looks like on Discord: the JSON body of each `POST /channels/{id}/messages`.
//!
//! - `allowed_mentions` parses nothing: whatever the model writes (`@everyone`, `@here`,
//!   `<@&role>`, `<@user>`), nobody is pinged — except the author of the message answered,
//!   through the reply itself (`replied_user`, `[channels.discord]` has no switch for more).
//! - The first chunk replies to the message answered (`message_reference`, sent even if that
//!   message was deleted meanwhile: `fail_if_not_exists = false`).
//! - Each chunk carries a nonce derived from the reply and the chunk's index, with
//!   `enforce_nonce`: a send retried after a timeout (or after a restart that re-delivers the
//!   reply) within Discord's nonce window returns the message already posted instead of
//!   posting twice.

use serde_json::{json, Value};

/// Longest nonce Discord takes, in characters.
const MAX_NONCE_CHARS: usize = 25;

/// The nonce of chunk `index` of the reply `seq` of `session_key`: the same for every try.
pub(crate) fn nonce(session_key: &str, seq: u64, index: usize) -> String {
    // FNV-1a, 64 bits: stable across builds and processes (std's hasher is randomised).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in session_key
        .bytes()
        .chain(seq.to_le_bytes())
        .chain((index as u64).to_le_bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let n = format!("t{h:x}");
    debug_assert!(n.len() <= MAX_NONCE_CHARS);
    n
}

/// The body of one chunk: `text`, replying to `reply_to` when given.
pub(crate) fn message_body(text: &str, reply_to: Option<u64>, nonce: &str) -> Value {
    let mut body = json!({
        "content": text,
        "allowed_mentions": {"parse": [], "replied_user": reply_to.is_some()},
        "nonce": nonce,
        "enforce_nonce": true,
    });
    if let Some(id) = reply_to {
        body["message_reference"] =
            json!({"message_id": id.to_string(), "fail_if_not_exists": false});
    }
    body
}

/// The body of an edit of a reply's message to `text` (a streaming preview): the same
/// mentions rule as a send.
pub(crate) fn edit_body(text: &str, replying: bool) -> Value {
    json!({
        "content": text,
        "allowed_mentions": {"parse": [], "replied_user": replying},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nobody_is_pinged_but_the_author_answered() {
        let b = message_body("@everyone look <@&5> <@6>", Some(42), "n");
        assert_eq!(
            b["allowed_mentions"],
            json!({"parse": [], "replied_user": true})
        );
        assert_eq!(b["message_reference"]["message_id"], json!("42"));
        assert_eq!(b["enforce_nonce"], json!(true));
        let rest = message_body("more", None, "n");
        assert_eq!(
            rest["allowed_mentions"],
            json!({"parse": [], "replied_user": false})
        );
        assert!(rest.get("message_reference").is_none());
    }

    #[test]
    fn nonces_are_stable_short_and_distinct() {
        let a = nonce("agent:main:discord:channel:1", 7, 0);
        assert_eq!(a, nonce("agent:main:discord:channel:1", 7, 0));
        assert!(a.len() <= MAX_NONCE_CHARS);
        assert_ne!(a, nonce("agent:main:discord:channel:1", 7, 1));
        assert_ne!(a, nonce("agent:main:discord:channel:1", 8, 0));
        assert_ne!(a, nonce("agent:main:discord:channel:2", 7, 0));
    }
}
