//! Classifies the error answers of OpenAI-compatible servers into [`ModelError`]s.
//!
//! Servers disagree on the shape: OpenAI sends `{"error":{"message","type","code"}}` with a
//! string `code`; vLLM's older releases send a top-level `{"object":"error","message",
//! "code":400}`; llama.cpp sends `{"error":{"code":400,"type":"exceed_context_size_error",
//! "n_prompt_tokens":N,"n_ctx":M}}`; LM Studio sometimes sends `{"error":"text"}`. Overflow is
//! recognised by code, type or message text, and the real limits are picked out of the text
//! when it states them. Rate-limit and billing errors are checked first: they are never an
//! overflow, even when their message mentions tokens.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::error::ModelError;

/// Longest server message kept in an error, in characters (a server may send pages).
pub(crate) const MAX_ERROR_MESSAGE_CHARS: usize = 2_000;

/// What classification reads from an error object.
#[derive(Debug, Default)]
struct ErrorFields {
    message: String,
    kind: String,
    code: String,
    /// `code` when it is an HTTP status (vLLM, llama.cpp and proxies put one there).
    status_code: Option<u16>,
    n_ctx: Option<u32>,
    n_prompt_tokens: Option<u32>,
}

/// Classifies a non-2xx answer with status `status` and body `body`.
pub(crate) fn classify_http(status: u16, body: &[u8]) -> ModelError {
    let fields = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| error_fields(&v))
        .unwrap_or_else(|| ErrorFields {
            message: plain_message(status, body),
            ..ErrorFields::default()
        });
    classify(Some(status), fields)
}

/// Classifies an error object found inside a 200 answer or a stream (no HTTP status).
/// Returns `None` when `value` carries no error.
pub(crate) fn classify_embedded(value: &Value) -> Option<ModelError> {
    error_fields(value).map(|fields| classify(None, fields))
}

/// Classifies the payload of an SSE `error` event, which may be JSON or plain text.
pub(crate) fn classify_stream_payload(payload: &str) -> ModelError {
    let fields = serde_json::from_str::<Value>(payload)
        .ok()
        .and_then(|v| error_fields(&v).or_else(|| Some(fields_of_object(&v))))
        .unwrap_or_else(|| ErrorFields {
            message: truncate(payload.trim()),
            ..ErrorFields::default()
        });
    classify(None, fields)
}

fn plain_message(status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        format!("HTTP {status}")
    } else {
        truncate(text)
    }
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Finds the error in `value`: `{"error":{...}}`, `{"error":"text"}` or a top-level
/// `{"object":"error",...}`.
fn error_fields(value: &Value) -> Option<ErrorFields> {
    match value.get("error") {
        Some(object @ Value::Object(_)) => Some(fields_of_object(object)),
        Some(Value::String(text)) => Some(ErrorFields {
            message: truncate(text),
            ..ErrorFields::default()
        }),
        Some(Value::Null) | None
            if value.get("object").and_then(Value::as_str) == Some("error") =>
        {
            Some(fields_of_object(value))
        }
        _ => None,
    }
}

fn fields_of_object(object: &Value) -> ErrorFields {
    let text = |key: &str| match object.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let number = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_u64)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    let mut message = text("message");
    if message.is_empty() {
        message = text("detail");
    }
    let status_code = object
        .get("code")
        .and_then(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..=599).contains(c));
    ErrorFields {
        message: truncate(&message),
        kind: text("type"),
        code: text("code"),
        status_code,
        n_ctx: number("n_ctx"),
        n_prompt_tokens: number("n_prompt_tokens"),
    }
}

/// Codes and types that mean the account cannot pay for the request.
const BILLING_CODES: &[&str] = &[
    "insufficient_quota",
    "billing_hard_limit_reached",
    "billing_not_active",
    "insufficient_balance",
];

/// Message fragments (lowercase) of billing and quota errors.
const BILLING_TEXT: &[&str] = &[
    "insufficient_quota",
    "exceeded your current quota",
    "billing",
    "credit balance",
    "insufficient balance",
    "payment required",
];

/// Message fragments (lowercase) of rate-limit errors.
const RATE_LIMIT_TEXT: &[&str] = &[
    "rate limit",
    "rate-limit",
    "rate_limit",
    "too many requests",
    "tokens per min",
    "requests per min",
];

/// Codes and types that mean "context too long".
const OVERFLOW_CODES: &[&str] = &[
    "context_length_exceeded",
    "exceed_context_size_error",
    "context_window_exceeded",
    "model_context_window_exceeded",
];

/// Message fragments (lowercase) that mean "context too long".
const OVERFLOW_TEXT: &[&str] = &[
    "maximum context length",
    "context length exceeded",
    "context_length_exceeded",
    "context window exceeded",
    "exceeds the context window",
    "exceed the context window",
    "exceeds the available context size",
    "exceed_context_size",
    "context size has been exceeded",
    "context length of only",
    "too many tokens",
    "prompt is too long",
    "prompt too long",
    "input is too long",
    "reduce the length of the messages",
    "exceeds the maximum number of tokens",
    "maximum prompt length",
];

fn classify(status: Option<u16>, f: ErrorFields) -> ModelError {
    // Without an HTTP error status (an error inside a 200 or a stream), a status-like `code`
    // stands in for it.
    let status = status.or(f.status_code);
    let message_lc = f.message.to_lowercase();
    let code_lc = format!("{} {}", f.code, f.kind).to_lowercase();
    let has_code = |codes: &[&str]| codes.iter().any(|c| code_lc.contains(c));
    let has_text = |texts: &[&str]| texts.iter().any(|t| message_lc.contains(t));
    let message = if f.message.is_empty() {
        match status {
            Some(s) => format!("HTTP {s}"),
            None => "error without a message".to_string(),
        }
    } else {
        f.message.clone()
    };

    if status == Some(402) || has_code(BILLING_CODES) || has_text(BILLING_TEXT) {
        return ModelError::Billing { message };
    }
    if status == Some(429) || code_lc.contains("rate_limit") || has_text(RATE_LIMIT_TEXT) {
        return ModelError::RateLimited { message };
    }
    if has_code(OVERFLOW_CODES) || has_text(OVERFLOW_TEXT) {
        return ModelError::ContextOverflow {
            limit: f.n_ctx.or_else(|| stated_limit(&message_lc)),
            prompt_tokens: f.n_prompt_tokens.or_else(|| stated_prompt(&message_lc)),
            message,
        };
    }
    match status {
        Some(status) => ModelError::Status { status, message },
        None => ModelError::Server(message),
    }
}

/// Patterns (on the lowercased message) that state the model's context window.
static LIMIT_PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    compile(&[
        r"maximum context length is (?:about )?([\d,]+)",
        r"context length of only ([\d,]+)",
        r"context window of ([\d,]+)",
        r"context size \(([\d,]+)",
        r"maximum number of tokens allowed \(([\d,]+)\)",
        r"tokens? > ([\d,]+) maximum",
        r"([\d,]+)[- ]token context",
    ])
});

/// Patterns (on the lowercased message) that state the prompt's size in server tokens.
static PROMPT_PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    compile(&[
        r"resulted in ([\d,]+) tokens",
        r"\(([\d,]+) in the messages",
        r"has ([\d,]+) input tokens",
        r"prompt is too long: ([\d,]+) tokens",
        r"input token count \(([\d,]+)\)",
        r"prompt contains ([\d,]+) tokens",
        r"keep the first ([\d,]+) tokens",
        r"request \(([\d,]+) tokens\)",
    ])
});

fn compile(patterns: &[&str]) -> Vec<Regex> {
    // The patterns are constants; one that does not compile is left out (and caught by the
    // tests) rather than panicking at run time.
    patterns.iter().filter_map(|p| Regex::new(p).ok()).collect()
}

fn first_number(patterns: &[Regex], text: &str) -> Option<u32> {
    patterns.iter().find_map(|re| {
        let digits: String = re
            .captures(text)?
            .get(1)?
            .as_str()
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse::<u32>().ok().filter(|n| *n > 0)
    })
}

fn stated_limit(message_lc: &str) -> Option<u32> {
    first_number(&LIMIT_PATTERNS, message_lc)
}

fn stated_prompt(message_lc: &str) -> Option<u32> {
    first_number(&PROMPT_PATTERNS, message_lc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overflow(e: &ModelError) -> (Option<u32>, Option<u32>) {
        match e {
            ModelError::ContextOverflow {
                limit,
                prompt_tokens,
                ..
            } => (*limit, *prompt_tokens),
            other => panic!("not an overflow: {other:?}"),
        }
    }

    #[test]
    fn all_patterns_compile() {
        assert_eq!(LIMIT_PATTERNS.len(), 7);
        assert_eq!(PROMPT_PATTERNS.len(), 8);
    }

    #[test]
    fn openai_overflow_states_limit_and_prompt() {
        let body = br#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9021 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let e = classify_http(400, body);
        assert_eq!(overflow(&e), (Some(8192), Some(9021)));
        assert!(e.is_overflow() && !e.is_retryable());
    }

    #[test]
    fn vllm_top_level_error_with_numeric_code() {
        let body = br#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(
            overflow(&classify_http(400, body)),
            (Some(4096), Some(4000))
        );
        let newer = br#"{"error":{"message":"This model's maximum context length is 2048 tokens. However, your request has 2056 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}"#;
        assert_eq!(
            overflow(&classify_http(400, newer)),
            (Some(2048), Some(2056))
        );
    }

    #[test]
    fn llama_cpp_overflow_carries_numbers_as_fields() {
        let body = br#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5120,"n_ctx":4096}}"#;
        assert_eq!(
            overflow(&classify_http(400, body)),
            (Some(4096), Some(5120))
        );
    }

    #[test]
    fn overflow_by_text_alone_and_error_as_string() {
        let lm_studio = br#"{"error":"Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with context length of only 4096 tokens, which is not enough."}"#;
        assert_eq!(
            overflow(&classify_http(400, lm_studio)),
            (Some(4096), Some(5000))
        );
        let anthropic_like = br#"{"error":{"type":"invalid_request_error","message":"prompt is too long: 210,000 tokens > 200,000 maximum"}}"#;
        assert_eq!(
            overflow(&classify_http(400, anthropic_like)),
            (Some(200_000), Some(210_000))
        );
        let bare = b"Input is too long for requested model.";
        assert_eq!(overflow(&classify_http(400, bare)), (None, None));
    }

    #[test]
    fn rate_limit_and_billing_are_not_overflow() {
        let tpm = br#"{"error":{"message":"Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000.","type":"tokens","code":"rate_limit_exceeded"}}"#;
        let e = classify_http(429, tpm);
        assert!(matches!(e, ModelError::RateLimited { .. }), "{e:?}");
        assert!(e.is_retryable());
        let quota = br#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        let e = classify_http(429, quota);
        assert!(matches!(e, ModelError::Billing { .. }), "{e:?}");
        assert!(!e.is_retryable());
        let text_only = br#"{"error":{"message":"Rate limit reached: too many tokens requested"}}"#;
        assert!(matches!(
            classify_http(400, text_only),
            ModelError::RateLimited { .. }
        ));
    }

    #[test]
    fn other_errors_keep_status_and_message() {
        let e = classify_http(503, b"upstream unavailable");
        match &e {
            ModelError::Status { status, message } => {
                assert_eq!(*status, 503);
                assert_eq!(message, "upstream unavailable");
            }
            other => panic!("{other:?}"),
        }
        assert!(e.is_retryable());
        assert!(
            !classify_http(401, br#"{"error":{"message":"bad key","code":401}}"#).is_retryable()
        );
        let e = classify_http(500, &[]);
        assert!(e.to_string().contains("HTTP 500"), "{e}");
        let long = "x".repeat(10_000);
        let e = classify_http(500, long.as_bytes());
        assert!(e.to_string().chars().count() < MAX_ERROR_MESSAGE_CHARS + 100);
    }

    #[test]
    fn embedded_and_stream_errors() {
        let v: Value =
            serde_json::json!({"error":{"message":"model overloaded","type":"server_error"}});
        assert!(matches!(classify_embedded(&v), Some(ModelError::Server(_))));
        let coded: Value = serde_json::json!({"error":{"message":"bad gateway","code":502}});
        assert!(matches!(
            classify_embedded(&coded),
            Some(ModelError::Status { status: 502, .. })
        ));
        let ok: Value = serde_json::json!({"choices":[]});
        assert!(classify_embedded(&ok).is_none());
        let e = classify_stream_payload(r#"{"message":"context length exceeded","code":400}"#);
        assert!(e.is_overflow(), "{e:?}");
        assert!(matches!(
            classify_stream_payload("boom"),
            ModelError::Server(m) if m == "boom"
        ));
    }
}
