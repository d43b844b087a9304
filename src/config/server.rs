//! `[server]`: the HTTP listener and its per-client rate limits.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{in_range, invalid, MAX_DURATION_MS};
use crate::error::ConfigError;

/// Largest `server.max_body_bytes`: 1 GiB (a body is buffered in memory).
pub(crate) const MAX_BODY_BYTES: usize = 1 << 30;

/// Largest `server.events_buffer`: the reply broadcast allocates that many slots up front (a
/// huge value aborted the process on allocation).
pub(crate) const MAX_EVENTS_BUFFER: usize = 1 << 16;

/// Largest `server.rate_limit.requests_per_second` and `burst`.
pub(crate) const MAX_RATE: u32 = 1_000_000;

/// Largest `server.max_connections` and `server.health_connections`.
pub(crate) const MAX_CONNECTIONS: usize = 1_000_000;

/// Shortest and longest `server.max_uri_bytes` (hyper itself refuses URIs past 64 KiB).
pub(crate) const URI_BYTES: std::ops::RangeInclusive<usize> = 256..=60_000;

/// Longest edge timeout (`header_read_timeout_ms`, `body_read_timeout_ms`, `idle_timeout_ms`):
/// one day.
pub(crate) const MAX_EDGE_TIMEOUT_MS: u64 = 86_400_000;

/// `server.listen_backlog`'s range (the kernel caps it further, at `net.core.somaxconn`).
pub(crate) const LISTEN_BACKLOG: std::ops::RangeInclusive<u32> = 1..=65_535;

/// Largest `server.rate_limit.max_clients`.
pub(crate) const MAX_RATE_CLIENTS: usize = 10_000_000;

/// `[server]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on. Default `127.0.0.1:7878`.
    pub listen: SocketAddr,
    /// Largest accepted request body in bytes. Default 256 KiB.
    pub max_body_bytes: usize,
    /// How long an OpenAI-compatible request waits for its reply, in ms. Default 600,000:
    /// longer than the default retry chain of one turn (2 turn tries × 4 model attempts ×
    /// the 60 s `[model] timeout_ms`, plus back-off, about 490 s), so a slow model is not
    /// answered 504 while it is still being retried. A client retry after a 504 joins the
    /// same turn (see `Idempotency-Key` in the README) instead of storing the message again.
    pub reply_timeout_ms: u64,
    /// Replies buffered for each `/v1/events` subscriber before a slow one misses some.
    /// Default 1,024.
    pub events_buffer: usize,
    /// How long graceful shutdown waits for running turns, in ms. Default 8,000.
    pub shutdown_grace_ms: u64,
    /// Name of the environment variable holding the API key (a bearer token). When it is set,
    /// every endpoint but `/healthz` and `/readyz` requires `Authorization: Bearer <key>`;
    /// when it is not, the server refuses to listen on anything but loopback. Default
    /// `TURNSTILE_API_KEY`.
    pub api_key_env: String,
    /// `[server.rate_limit]`: per-client request rate limits.
    pub rate_limit: RateLimitConfig,
    /// Time from the first byte of a request to the end of its head, in ms; past it the
    /// client gets `408` and the connection is closed (slow headers). Default 10,000.
    pub header_read_timeout_ms: u64,
    /// Time from the end of a request's head to the end of its body, in ms; past it the
    /// client gets `408` and the connection is closed (trickled or unfinished bodies).
    /// Default 30,000.
    pub body_read_timeout_ms: u64,
    /// How long a connection may wait for a request without sending a byte (new, or kept
    /// alive after a response), in ms; then it is closed. Default 60,000.
    pub idle_timeout_ms: u64,
    /// Connections served at once. Past it, new connections get one of the
    /// `health_connections` (or are closed at once): sized for a 1,024 file-descriptor limit,
    /// with room for the store's files. Default 768.
    pub max_connections: usize,
    /// Connections past `max_connections` that still answer `/healthz` and `/readyz` (every
    /// other path: `503`); when they are all taken the oldest is closed for the newcomer, so
    /// a flood of idle connections cannot starve the probes. Default 32.
    pub health_connections: usize,
    /// Longest request URI in bytes; longer gets `414`. At most 60,000. Default 8,192.
    pub max_uri_bytes: usize,
    /// Connections the kernel queues for the accept loop. A burst larger than the queue loses
    /// SYNs, and the client's retransmit adds a second to its request; tokio's default is
    /// 1,024. Default 4,096 (capped by the kernel's `net.core.somaxconn`).
    pub listen_backlog: u32,
}

/// What a rate limit counts requests by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitBy {
    /// The client's IP address (as the TCP peer; behind a proxy that is the proxy).
    Ip,
    /// The bearer token presented (clients without one are counted by IP).
    Key,
}

/// `[server.rate_limit]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Sustained requests per second allowed per client; 0 turns rate limiting off. Over the
    /// limit a request gets 429 with `Retry-After`. Default 0 (off).
    pub requests_per_second: u32,
    /// Requests a client may send in a burst above the sustained rate. Default 50.
    pub burst: u32,
    /// `ip` (default) or `key`.
    pub by: RateLimitBy,
    /// Most clients tracked at once; past it idle clients are forgotten, and if none is idle new
    /// clients share one bucket. Default 10,000.
    pub max_clients: usize,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            requests_per_second: 0,
            burst: 50,
            by: RateLimitBy::Ip,
            max_clients: 10_000,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            max_body_bytes: 256 * 1024,
            reply_timeout_ms: 600_000,
            events_buffer: 1_024,
            shutdown_grace_ms: 8_000,
            api_key_env: "TURNSTILE_API_KEY".into(),
            rate_limit: RateLimitConfig::default(),
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_connections: 768,
            health_connections: 32,
            max_uri_bytes: 8_192,
            listen_backlog: 4_096,
        }
    }
}

impl ServerConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "server.max_body_bytes",
            self.max_body_bytes,
            1..=MAX_BODY_BYTES,
        )?;
        in_range(
            "server.reply_timeout_ms",
            self.reply_timeout_ms,
            1..=MAX_DURATION_MS,
        )?;
        in_range(
            "server.events_buffer",
            self.events_buffer,
            1..=MAX_EVENTS_BUFFER,
        )?;
        in_range(
            "server.shutdown_grace_ms",
            self.shutdown_grace_ms,
            0..=MAX_DURATION_MS,
        )?;
        for (key, ms) in [
            ("server.header_read_timeout_ms", self.header_read_timeout_ms),
            ("server.body_read_timeout_ms", self.body_read_timeout_ms),
            ("server.idle_timeout_ms", self.idle_timeout_ms),
        ] {
            in_range(key, ms, 1..=MAX_EDGE_TIMEOUT_MS)?;
        }
        in_range(
            "server.max_connections",
            self.max_connections,
            1..=MAX_CONNECTIONS,
        )?;
        in_range(
            "server.health_connections",
            self.health_connections,
            1..=MAX_CONNECTIONS,
        )?;
        in_range("server.max_uri_bytes", self.max_uri_bytes, URI_BYTES)?;
        in_range("server.listen_backlog", self.listen_backlog, LISTEN_BACKLOG)?;
        self.rate_limit.validate()
    }
}

impl RateLimitConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "server.rate_limit.requests_per_second",
            self.requests_per_second,
            0..=MAX_RATE,
        )?;
        in_range("server.rate_limit.burst", self.burst, 0..=MAX_RATE)?;
        in_range(
            "server.rate_limit.max_clients",
            self.max_clients,
            0..=MAX_RATE_CLIENTS,
        )?;
        if self.requests_per_second > 0 {
            if self.burst == 0 {
                return Err(invalid("server.rate_limit.burst", "must be at least 1"));
            }
            if self.max_clients == 0 {
                return Err(invalid(
                    "server.rate_limit.max_clients",
                    "must be at least 1",
                ));
            }
        }
        Ok(())
    }
}
