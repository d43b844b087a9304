//! Opening one MCP connection: a child process over its stdio, or a streamable-HTTP endpoint;
//! then the `initialize` handshake with the rmcp client.
//!
//! A child's stderr is read by a task of its own and logged line by line (each line cut to
//! [`MAX_STDERR_LINE_BYTES`]), so a chatty server can neither fill its pipe and stall nor
//! grow our memory.

use std::collections::HashMap;
use std::process::Stdio;

use rmcp::service::{RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::RoleClient;
use tokio::io::AsyncReadExt;

use super::client::Listener;
use crate::config::McpServerConfig;

/// Longest stderr line logged; the rest of a longer line is dropped.
pub(crate) const MAX_STDERR_LINE_BYTES: usize = 4_096;

/// A live connection: rmcp's service (the peer and its I/O task).
pub(crate) type Connection = RunningService<RoleClient, Listener>;

/// Starts the transport of `config` and runs the `initialize` handshake (without a timeout:
/// the caller bounds it with `connect_timeout_ms`).
pub(crate) async fn connect(
    server: &str,
    config: &McpServerConfig,
    listener: Listener,
) -> Result<Connection, String> {
    if let Some(url) = &config.url {
        // rmcp's HTTP client takes the process's default TLS provider; without one it panics.
        // Err: one was installed already (by us or the embedding application), which serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(headers(config)?),
        );
        return listener
            .serve(transport)
            .await
            .map_err(|e| format!("initialize failed: {e}"));
    }
    let Some(program) = &config.command else {
        return Err("neither `command` nor `url` is set".into());
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(&config.args)
        .envs(&config.env)
        // Dropped (restart, shutdown, a failed handshake): the child goes with it.
        .kill_on_drop(true);
    let (child, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start {program:?}: {e}"))?;
    if let Some(stderr) = stderr {
        tokio::spawn(log_stderr(server.to_string(), stderr));
    }
    listener
        .serve(child)
        .await
        .map_err(|e| format!("initialize failed: {e}"))
}

/// The headers of `headers_env`, their values read from the environment now (at each
/// connect, so a rotated token is picked up by the next restart).
fn headers(
    config: &McpServerConfig,
) -> Result<HashMap<http::HeaderName, http::HeaderValue>, String> {
    let mut out = HashMap::with_capacity(config.headers_env.len());
    for (name, var) in &config.headers_env {
        let value = std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("header {name}: environment variable {var} is not set"))?;
        let name =
            http::HeaderName::try_from(name.as_str()).map_err(|e| format!("header {name}: {e}"))?;
        let mut value = http::HeaderValue::try_from(value)
            .map_err(|_| format!("header {name}: the value in {var} is not a valid header"))?;
        value.set_sensitive(true);
        out.insert(name, value);
    }
    Ok(out)
}

/// Logs each line of a child's stderr until it closes.
async fn log_stderr(server: String, mut stderr: tokio::process::ChildStderr) {
    let mut buf = [0u8; 4_096];
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&server, &line, cut);
                line.clear();
                cut = false;
            } else if line.len() < MAX_STDERR_LINE_BYTES {
                line.push(b);
            } else {
                cut = true;
            }
        }
    }
    if !line.is_empty() {
        emit(&server, &line, cut);
    }
}

fn emit(server: &str, line: &[u8], cut: bool) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches('\r');
    if !text.is_empty() {
        tracing::info!(target: "turnstile::mcp::stderr", server, cut, "{text}");
    }
}
