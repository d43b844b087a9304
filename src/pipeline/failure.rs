//! What a failed turn tells the outside: the kind of failure (the HTTP status a waiting client
//! gets) and its text without URLs (the model's endpoint is internal; error texts reach
//! transcripts and clients).

use crate::error::{Error, ModelError};
use crate::replies::ReplyErrorKind;

/// What replaces a URL in an error text.
pub(crate) const URL_PLACEHOLDER: &str = "<url>";

/// The kind of `error`, for the notice answering the turn.
pub(crate) fn failure_kind(error: &Error) -> ReplyErrorKind {
    match error {
        Error::Model(ModelError::Transport(text)) if text.starts_with("timed out") => {
            ReplyErrorKind::Timeout
        }
        Error::Model(_) => ReplyErrorKind::Model,
        Error::Timeout(_) => ReplyErrorKind::Timeout,
        _ => ReplyErrorKind::Internal,
    }
}

/// `text` with every `http://…` and `https://…` replaced by [`URL_PLACEHOLDER`]; a URL ends at
/// whitespace, a quote, a bracket or a closing parenthesis.
pub(crate) fn strip_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = find_url(rest) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | ')' | ']'))
            .unwrap_or(tail.len());
        out.push_str(URL_PLACEHOLDER);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Byte offset of the first `http://` or `https://` (any case) in `text`.
fn find_url(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    [lower.find("http://"), lower.find("https://")]
        .into_iter()
        .flatten()
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_stripped_and_the_rest_kept() {
        assert_eq!(
            strip_urls(
                "turn failed: model transport error: connection failed: error sending request \
                 for url (http://127.0.0.1:8091/v1/chat/completions)"
            ),
            "turn failed: model transport error: connection failed: error sending request \
             for url (<url>)"
        );
        assert_eq!(
            strip_urls("a HTTPS://x.example/y?z=1 b https://q"),
            "a <url> b <url>"
        );
        assert_eq!(strip_urls("no links: http:/ here"), "no links: http:/ here");
        assert_eq!(
            strip_urls("ünïcode https://ä.example/ö é"),
            "ünïcode <url> é"
        );
    }

    #[test]
    fn kinds_follow_the_error() {
        let model = |e| Error::Model(e);
        assert_eq!(
            failure_kind(&model(ModelError::Transport("timed out: x".into()))),
            ReplyErrorKind::Timeout
        );
        assert_eq!(
            failure_kind(&model(ModelError::Transport("connection failed".into()))),
            ReplyErrorKind::Model
        );
        assert_eq!(
            failure_kind(&model(ModelError::Server("boom".into()))),
            ReplyErrorKind::Model
        );
        assert_eq!(failure_kind(&Error::ShuttingDown), ReplyErrorKind::Internal);
    }
}
