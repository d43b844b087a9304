//! Secrets (API keys, bot tokens, HMAC keys): read from the environment, never printed.
//! `Debug` and `Display` show `[redacted]`, so a secret inside a logged struct stays hidden.

use crate::error::ConfigError;

/// A secret string. Compare it with [`Secret::matches`] (constant time), never with `==`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value` (e.g. in tests or when an embedding application has the key).
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value of the environment variable `var`, or `None` when it is unset or blank.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .map(Self)
    }

    /// Like [`Secret::from_env`], but a missing value is a configuration error naming what
    /// needs it.
    pub fn require_env(var: &str, needed_by: &str) -> Result<Self, ConfigError> {
        Self::from_env(var).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "{needed_by} needs a secret in the environment variable {var}, which is not set"
            ))
        })
    }

    /// The secret's bytes, for the code that must use it (signing, comparing, URLs).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares with `candidate` in time independent of where they differ.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        // Lengths are not secret-dependent in a way that helps an attacker guess the key
        // byte by byte; the contents are compared in constant time.
        self.0.len() == candidate.len() && bool::from(self.0.as_bytes().ct_eq(candidate))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_and_never_print() {
        let s = Secret::new("hunter2");
        assert!(s.matches(b"hunter2"));
        assert!(!s.matches(b"hunter3"));
        assert!(!s.matches(b"hunter22"));
        assert_eq!(format!("{s} {s:?}"), "[redacted] [redacted]");
        assert!(Secret::from_env("TURNSTILE_TEST_SURELY_UNSET_VAR").is_none());
        let err = Secret::require_env("TURNSTILE_TEST_SURELY_UNSET_VAR", "the test").unwrap_err();
        assert!(err.to_string().contains("TURNSTILE_TEST_SURELY_UNSET_VAR"));
    }
}
