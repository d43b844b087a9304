//! MCP client tools: the `[mcp_servers.<name>]` servers, connected with the official Rust SDK
//! (`rmcp`), their tools offered to the model as `<server>__<tool>` and called through them.
//!
//! Layout: `server.rs` keeps one server connected (a task per server: connect, list, re-list
//! on `notifications/tools/list_changed`, restart with back-off) and holds its state;
//! `transport.rs` opens a connection (a child's stdio or streamable HTTP; a child's stderr
//! logged); `client.rs` is what rmcp calls back; `naming.rs` the namespaced names;
//! `result.rs` a call's result as text.
//!
//! [`McpTools`] is a cheap handle, shared by the turn engine and the server's health routes.
//! A turn reads the cached tools ([`McpTools::specs_for`]) and calls a server's peer
//! directly ([`McpTools::call`]): no actor mailbox or server task is on a call's path, and a
//! server that is down answers at once with an error the model can read.

mod client;
mod naming;
mod result;
mod server;
mod transport;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::Value;
use tokio::sync::watch;

use crate::config::McpServerConfig;
use crate::model::ToolSpec;

pub use server::{McpServerHealth, McpStatus};
use server::{McpTool, Server};

/// The MCP servers of a runtime (none when `[mcp_servers]` is empty). Cloning shares them.
#[derive(Clone, Default)]
pub struct McpTools {
    inner: Arc<Hub>,
}

#[derive(Default)]
struct Hub {
    servers: BTreeMap<String, Arc<Server>>,
    /// Bumped on every status change of any server.
    changes: Option<watch::Receiver<u64>>,
    shutdown: Option<watch::Sender<bool>>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(s) = &self.shutdown {
            let _ = s.send(true);
        }
    }
}

impl McpTools {
    /// Starts a task per configured server (each connects in the background).
    pub(crate) fn start(configs: &BTreeMap<String, McpServerConfig>) -> Self {
        if configs.is_empty() {
            return Self::default();
        }
        let (changes_tx, changes) = watch::channel(0u64);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let servers: BTreeMap<String, Arc<Server>> = configs
            .iter()
            .map(|(name, config)| {
                let server = Arc::new(Server::new(name, config.clone(), changes_tx.clone()));
                (name.clone(), server)
            })
            .collect();
        for server in servers.values() {
            tokio::spawn(Arc::clone(server).run(shutdown_rx.clone()));
        }
        Self {
            inner: Arc::new(Hub {
                servers,
                changes: Some(changes),
                shutdown: Some(shutdown),
            }),
        }
    }

    /// Waits until every server's first connection attempt has ended (up or down), at most
    /// the longest `connect_timeout_ms + list_timeout_ms` among them: tools listed at start
    /// are offered from the first turn on.
    pub(crate) async fn started(&self) {
        let Some(mut changes) = self.inner.changes.clone() else {
            return;
        };
        let limit = self
            .inner
            .servers
            .values()
            .map(|s| s.config.connect_timeout_ms + s.config.list_timeout_ms)
            .max()
            .unwrap_or(0);
        let all_started = async {
            loop {
                let starting = self
                    .inner
                    .servers
                    .values()
                    .any(|s| s.status() == McpStatus::Starting);
                if !starting || changes.changed().await.is_err() {
                    return;
                }
            }
        };
        // Plus a little for the timeouts' own wake-ups.
        let limit = Duration::from_millis(limit).saturating_add(Duration::from_millis(500));
        if tokio::time::timeout(limit, all_started).await.is_err() {
            tracing::warn!("MCP servers still starting; their tools are offered once listed");
        }
    }

    /// Stops every server's task (closing connections, ending child processes).
    pub(crate) fn stop(&self) {
        if let Some(s) = &self.inner.shutdown {
            let _ = s.send(true);
        }
    }

    /// Whether any server is configured.
    pub fn is_empty(&self) -> bool {
        self.inner.servers.is_empty()
    }

    /// The tools to offer: those of `servers` (every configured server when `None`; unknown
    /// names are skipped), less those whose namespaced name is in `deny`, and only those in
    /// `allow` when it is not empty. Names in `allow` and `deny` are namespaced
    /// (`<server>__<tool>`) or a whole server (`<server>__*`). Tools of a server that is down
    /// stay offered from its last list: calling one answers that the server is down.
    pub fn specs_for(
        &self,
        servers: Option<&[String]>,
        allow: &[String],
        deny: &[String],
    ) -> Vec<ToolSpec> {
        let mut out = Vec::new();
        for (name, server) in &self.inner.servers {
            if servers.is_some_and(|wanted| !wanted.iter().any(|w| w == name)) {
                continue;
            }
            for tool in server.tools().iter() {
                let listed = |list: &[String]| {
                    list.iter()
                        .any(|p| p == &tool.spec.name || matches_server(p, name))
                };
                if listed(deny) || (!allow.is_empty() && !listed(allow)) {
                    continue;
                }
                out.push(tool.spec.clone());
            }
        }
        out
    }

    /// Whether `name` belongs to one of `servers` (all configured ones when `None`), listed or
    /// not: a call of a down server's tool is answered with why it is down.
    pub(crate) fn owns_within(&self, name: &str, servers: Option<&[String]>) -> bool {
        naming::server_of(name).is_some_and(|s| {
            self.inner.servers.contains_key(s)
                && servers.is_none_or(|wanted| wanted.iter().any(|w| w == s))
        })
    }

    /// Calls the tool the model knows as `name` with `arguments`, within the server's
    /// `call_timeout_ms`. `Err` is a message for the model (a down server, a timeout, a
    /// failed call, or a result the server flagged as an error).
    pub(crate) async fn call(&self, name: &str, arguments: Value) -> Result<String, String> {
        let Some(server) = naming::server_of(name).and_then(|s| self.inner.servers.get(s)) else {
            return Err(format!("there is no tool named {name:?}"));
        };
        let peer = match server.peer() {
            Ok(peer) => peer,
            Err(down) => {
                crate::metrics::mcp_call(&server.name, "unavailable");
                return Err(down);
            }
        };
        let remote = find(&server.tools(), name).map(|t| t.remote.clone());
        let Some(remote) = remote else {
            return Err(format!(
                "the MCP server {:?} lists no tool named {name:?}",
                server.name
            ));
        };
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => return Err("the arguments must be a JSON object".into()),
        };
        let mut params = CallToolRequestParams::new(remote);
        params.arguments = arguments;
        let limit = Duration::from_millis(server.config.call_timeout_ms);
        let (outcome, answer) = match tokio::time::timeout(limit, peer.call_tool(params)).await {
            Err(_) => (
                "timeout",
                Err(format!(
                    "the MCP server {:?} did not answer within call_timeout_ms ({} ms)",
                    server.name, server.config.call_timeout_ms
                )),
            ),
            Ok(Err(e)) => (
                "failed",
                Err(format!(
                    "the MCP server {:?} failed the call: {e}",
                    server.name
                )),
            ),
            Ok(Ok(result)) => match result::result_text(&result) {
                (text, false) => ("ok", Ok(text)),
                (text, true) => ("tool_error", Err(text)),
            },
        };
        crate::metrics::mcp_call(&server.name, outcome);
        answer
    }

    /// Each server's health line, by name.
    pub fn health(&self) -> Vec<McpServerHealth> {
        self.inner.servers.values().map(|s| s.health()).collect()
    }
}

/// Whether the allow/deny entry `pattern` names all of `server`'s tools (`<server>__*`).
fn matches_server(pattern: &str, server: &str) -> bool {
    pattern
        .strip_suffix('*')
        .and_then(|p| p.strip_suffix(naming::SEPARATOR))
        .is_some_and(|p| p == server)
}

fn find<'a>(tools: &'a [McpTool], name: &str) -> Option<&'a McpTool> {
    tools.iter().find(|t| t.spec.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_patterns_match_only_their_server() {
        assert!(matches_server("files__*", "files"));
        assert!(!matches_server("files__*", "file"));
        assert!(!matches_server("files*", "files"));
        assert!(!matches_server("files__read", "files"));
    }

    #[tokio::test]
    async fn no_servers_offer_nothing_and_calls_fail_clearly() {
        let mcp = McpTools::start(&BTreeMap::new());
        mcp.started().await;
        assert!(mcp.is_empty());
        assert!(mcp.specs_for(None, &[], &[]).is_empty());
        assert!(!mcp.owns_within("files__read", None));
        let err = mcp.call("files__read", Value::Null).await.unwrap_err();
        assert!(err.contains("no tool named"), "{err}");
    }

    #[tokio::test]
    async fn a_server_that_cannot_start_is_down_with_the_reason() {
        let mut configs = BTreeMap::new();
        configs.insert(
            "gone".to_string(),
            McpServerConfig {
                command: Some("/nonexistent/turnstile-mcp-test".into()),
                ..McpServerConfig::default()
            },
        );
        let mcp = McpTools::start(&configs);
        mcp.started().await;
        let health = mcp.health();
        assert_eq!(health.len(), 1);
        assert_eq!(health[0].status, McpStatus::Down);
        assert!(
            health[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("could not start")),
            "{health:?}"
        );
        assert!(mcp.owns_within("gone__anything", None));
        let err = mcp.call("gone__anything", Value::Null).await.unwrap_err();
        assert!(
            err.contains("is down") && err.contains("could not start"),
            "{err}"
        );
        mcp.stop();
    }
}
