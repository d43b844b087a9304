//! Webhook callbacks: each reply is POSTed as JSON to a configured URL, signed with
//! HMAC-SHA256, retried with capped exponential back-off. A reply whose delivery fails for good
//! is counted and logged; it stays readable in the transcript and on `/v1/events`.
//!
//! The request carries `X-Turnstile-Signature: t=<unix seconds>,v1=<hex>` where `<hex>` is
//! HMAC-SHA256 with the shared secret over `"<t>." + body`. Receivers recompute it (see
//! [`verify_signature`]) and reject stale timestamps to stop replays. The body is the reply as
//! `/v1/events` shows it; `(session_key, seq)` identifies a reply, so a receiver can drop the
//! duplicate a retry after a lost response produces.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use sha2::Sha256;
use turnstile_actors::Channel;

use crate::config::CallbackConfig;
use crate::error::{ConfigError, Error};
use crate::metrics;
use crate::replies::Reply;
use crate::replies::Serves;
use crate::runtime::Runtime;
use crate::secret::Secret;

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-turnstile-signature";
/// The channel's name (metrics, logs).
pub(super) const CALLBACK_CHANNEL: &str = "callback";

type HmacSha256 = Hmac<Sha256>;

/// The signature header value for `body` sent at `timestamp` (unix seconds).
pub(crate) fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let digest = mac(secret, timestamp, body).finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={timestamp},v1={hex}")
}

fn mac(secret: &[u8], timestamp: u64, body: &[u8]) -> HmacSha256 {
    #[allow(clippy::expect_used)]
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Checks a signature header against `body` in constant time; the timestamp must lie within
/// `tolerance_secs` of `now_secs`.
pub fn verify_signature(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now_secs: u64,
    tolerance_secs: u64,
) -> bool {
    let mut timestamp = None;
    let mut signature = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => timestamp = v.parse::<u64>().ok(),
            Some(("v1", v)) => signature = decode_hex(v),
            _ => {}
        }
    }
    let (Some(t), Some(sig)) = (timestamp, signature) else {
        return false;
    };
    if t.abs_diff(now_secs) > tolerance_secs {
        return false;
    }
    mac(secret, t, body).verify_slice(&sig).is_ok()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The callback channel.
pub(crate) struct CallbackChannel {
    client: reqwest::Client,
    config: CallbackConfig,
    secret: Secret,
}

impl std::fmt::Debug for CallbackChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackChannel").finish_non_exhaustive()
    }
}

impl CallbackChannel {
    /// A channel posting to `config.url`, signing with `secret`.
    pub(crate) fn new(config: CallbackConfig, secret: Secret) -> Result<Self, ConfigError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .build()
            .map_err(|e| ConfigError::Invalid(format!("channels.callback: {e}")))?;
        Ok(Self {
            client,
            config,
            secret,
        })
    }

    /// One attempt. `Ok` on a 2xx; otherwise the error and the receiver's `Retry-After`.
    async fn attempt(&self, body: &[u8]) -> Result<(), (String, Option<Duration>)> {
        let signature = sign(self.secret.expose().as_bytes(), unix_secs(), body);
        let response = self
            .client
            .post(&self.config.url)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(SIGNATURE_HEADER, signature)
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| (e.without_url().to_string(), None))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = crate::backoff::retry_after(response.headers());
        Err((format!("receiver answered {status}"), retry_after))
    }
}

impl Channel for CallbackChannel {
    type Reply = Arc<Reply>;

    fn name(&self) -> &str {
        CALLBACK_CHANNEL
    }

    async fn deliver(&self, reply: Arc<Reply>) {
        let body = match serde_json::to_vec(&*reply) {
            Ok(b) => b,
            Err(error) => {
                metrics::delivery(CALLBACK_CHANNEL, false);
                tracing::error!(%error, "reply not serialisable for the callback");
                return;
            }
        };
        let initial = Duration::from_millis(self.config.initial_backoff_ms);
        let max = Duration::from_millis(self.config.max_backoff_ms);
        for attempt in 1..=self.config.max_attempts {
            let (error, retry_after) = match self.attempt(&body).await {
                Ok(()) => {
                    metrics::delivery(CALLBACK_CHANNEL, true);
                    return;
                }
                Err(e) => e,
            };
            if attempt == self.config.max_attempts {
                metrics::delivery(CALLBACK_CHANNEL, false);
                tracing::error!(
                    session_key = %reply.session_key,
                    seq = reply.seq,
                    attempts = attempt,
                    %error,
                    "callback delivery gave up; the reply stays readable through the API"
                );
                return;
            }
            metrics::delivery_retry(CALLBACK_CHANNEL);
            tracing::warn!(session_key = %reply.session_key, attempt, %error, "callback delivery failed; retrying");
            let pause = retry_after.map_or_else(
                || crate::backoff::jittered(initial, max, attempt - 1),
                |r| r.min(max),
            );
            tokio::time::sleep(pause).await;
        }
    }
}

/// Starts the callback channel from `[channels.callback]`.
pub(crate) async fn start(runtime: &Runtime, config: CallbackConfig) -> Result<(), Error> {
    let secret = Secret::require_env(&config.secret_env, "channels.callback")?;
    let serves = if config.channels.is_empty() {
        Serves::Unclaimed
    } else {
        Serves::Channels(config.channels.clone())
    };
    // Only the host is logged: callback URLs often carry a token in their path or query.
    let host = reqwest::Url::parse(&config.url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_default();
    let channel = CallbackChannel::new(config, secret)?;
    runtime.add_channel(Arc::new(channel), serves).await?;
    tracing::info!(%host, "callback channel started");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_and_reject_tampering() {
        let body = br#"{"text":"hi"}"#;
        let header = sign(b"secret", 1_000, body);
        assert!(header.starts_with("t=1000,v1="));
        assert!(verify_signature(b"secret", &header, body, 1_010, 300));
        assert!(!verify_signature(b"secret", &header, b"{}", 1_010, 300));
        assert!(!verify_signature(b"other", &header, body, 1_010, 300));
        assert!(
            !verify_signature(b"secret", &header, body, 2_000, 300),
            "stale"
        );
        assert!(!verify_signature(b"secret", "garbage", body, 1_000, 300));
        assert!(!verify_signature(
            b"secret",
            "t=1000,v1=zz",
            body,
            1_000,
            300
        ));
    }
}
