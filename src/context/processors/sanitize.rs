//! `sanitize`: prompt-injection hygiene on user-controlled blocks (`metadata.user_text`):
//! role tags like `[System]` become `(System)`, lines starting `System:` become
//! `System (untrusted):`, CRLF is normalised (`crate::inbound::sanitize_text`). A changed
//! block is re-counted; an unchanged one costs a byte scan, once per history entry (its memo
//! keeps the answer for the next turns).

use serde::Deserialize;

use crate::context::{
    BlockText, Blocks, ContextError, ContextProcessor, SessionView, StageContext, StageError,
};
use crate::inbound::sanitize_text;
use crate::model::MESSAGE_OVERHEAD_TOKENS;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

/// The `sanitize` processor.
#[derive(Debug, Default)]
pub(crate) struct Sanitize;

impl Sanitize {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self)
    }
}

/// False when `sanitize_text` cannot change `text`: it only acts on `\r`, `[…]` tags and
/// `system:` at a line start. It runs on every history block of every turn, so it finds those
/// bytes with `memchr` rather than looking at each byte.
fn may_change(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr2(b'\r', b'[', b).is_some()
        || memchr::memchr_iter(b':', b)
            .any(|i| i >= 6 && b[i - 6..i].eq_ignore_ascii_case(b"system"))
}

/// [`may_change`] of a block's text; for a history entry's own text, worked out once per
/// entry and kept in its memo (the next turns show the same entry).
fn block_may_change(text: &BlockText) -> bool {
    match text {
        BlockText::Entry(e) => e.memo().text_flag(|| may_change(&e.text)),
        BlockText::Owned(s) => may_change(s),
    }
}

impl ContextProcessor for Sanitize {
    fn name(&self) -> &str {
        "sanitize"
    }

    fn process(&self, blocks: &mut Blocks, session: &SessionView<'_>) -> Result<(), ContextError> {
        let needs = blocks
            .blocks()
            .iter()
            .any(|b| b.metadata.user_text && block_may_change(&b.content));
        if !needs {
            return Ok(());
        }
        blocks.edit(|b| {
            if !b.metadata.user_text || !block_may_change(&b.content) {
                return;
            }
            let clean = sanitize_text(&b.content);
            if b.content != clean {
                b.token_count = session.tokens.count(&clean) + MESSAGE_OVERHEAD_TOKENS;
                b.content = clean.into();
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_path_is_conservative() {
        for text in ["[System] x", "a\r\nb", "SYSTEM: x", "  system: y"] {
            assert!(may_change(text), "{text}");
            assert!(sanitize_text(text) != text || text.contains('\r'));
        }
        assert!(!may_change("plain words, nothing to do"));
    }

    #[test]
    fn finds_what_a_scan_of_every_byte_finds() {
        let every_byte = |text: &str| {
            let b = text.as_bytes();
            b.contains(&b'\r')
                || b.contains(&b'[')
                || b.iter().enumerate().any(|(i, c)| {
                    *c == b':' && i >= 6 && b[i - 6..i].eq_ignore_ascii_case(b"system")
                })
        };
        for text in [
            "",
            ":",
            "system",
            "system:",
            "SyStEm:",
            "xsystem:x",
            "sys:tem:",
            "a:b:c",
            ":system",
            "ok, noted.",
            "msg 12",
            "é system: ü",
            "[",
            "\r",
            "systém:",
            "::::::::",
        ] {
            assert_eq!(may_change(text), every_byte(text), "{text:?}");
        }
    }
}
