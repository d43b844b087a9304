//! Bearer-token auth. The key comes from the environment variable `[server] api_key_env`
//! (default `TURNSTILE_API_KEY`). With a key, every endpoint but `/healthz` and `/readyz`
//! requires `Authorization: Bearer <key>`, compared in constant time. Without one the server
//! refuses to listen on anything but loopback ([`check_exposure`]). The key is never logged.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap};

use crate::config::ServerConfig;
use crate::error::ConfigError;
use crate::secret::Secret;

/// Paths answered without auth (probes).
pub(crate) const PUBLIC_PATHS: &[&str] = &["/healthz", "/readyz"];

/// The server's credentials.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    key: Option<Secret>,
}

impl Auth {
    /// No key: every request passes (allowed on loopback only).
    pub fn none() -> Self {
        Self { key: None }
    }

    /// Requires `key`.
    pub fn with_key(key: Secret) -> Self {
        Self { key: Some(key) }
    }

    /// The key named by `config.api_key_env`, if that variable is set.
    pub fn from_config(config: &ServerConfig) -> Self {
        Self {
            key: Secret::from_env(&config.api_key_env),
        }
    }

    /// True when requests must carry the key.
    pub fn is_required(&self) -> bool {
        self.key.is_some()
    }

    /// True when `headers` carry the key (or none is required).
    pub fn permits(&self, headers: &HeaderMap) -> bool {
        let Some(key) = &self.key else { return true };
        bearer(headers).is_some_and(|token| key.matches(token.as_bytes()))
    }
}

/// The bearer token of a request, if it has one.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Refuses to serve on a non-loopback address without a key: anyone who can reach it could
/// read every conversation.
pub fn check_exposure(listen: SocketAddr, auth: &Auth, key_env: &str) -> Result<(), ConfigError> {
    if listen.ip().is_loopback() || auth.is_required() {
        return Ok(());
    }
    Err(ConfigError::Invalid(format!(
        "refusing to listen on {listen} without an API key: set the environment variable \
         {key_env} (clients then send `Authorization: Bearer <key>`), or listen on a loopback \
         address such as 127.0.0.1"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    #[test]
    fn bearer_tokens_are_checked() {
        let auth = Auth::with_key(Secret::new("s3cret"));
        assert!(auth.permits(&headers("Bearer s3cret")));
        assert!(auth.permits(&headers("bearer  s3cret ")));
        assert!(!auth.permits(&headers("Bearer s3cre")));
        assert!(!auth.permits(&headers("Basic s3cret")));
        assert!(!auth.permits(&HeaderMap::new()));
        assert!(Auth::none().permits(&HeaderMap::new()));
    }

    #[test]
    fn exposure_needs_a_key_off_loopback() {
        let lo: SocketAddr = "127.0.0.1:7878".parse().unwrap();
        let lo6: SocketAddr = "[::1]:7878".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7878".parse().unwrap();
        assert!(check_exposure(lo, &Auth::none(), "K").is_ok());
        assert!(check_exposure(lo6, &Auth::none(), "K").is_ok());
        let err = check_exposure(any, &Auth::none(), "MY_KEY").unwrap_err();
        assert!(err.to_string().contains("MY_KEY"), "{err}");
        assert!(check_exposure(any, &Auth::with_key(Secret::new("k")), "K").is_ok());
    }
}
