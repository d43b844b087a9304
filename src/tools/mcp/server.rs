//! One configured MCP server: its state (up or down, the cached tools, the peer calls go
//! through) and the task that keeps it connected.
//!
//! The task connects (within `connect_timeout_ms`), lists the tools (within
//! `list_timeout_ms`), then waits for one of three things: the server says its tool list
//! changed (list again; a failed re-list keeps the old list), the connection ends (a stdio
//! child that exited, an HTTP session that broke), or shutdown. A connection that ended or
//! never came up is retried after the project's one back-off (`crate::backoff`), between
//! [`RESTART_BASE`] and [`RESTART_MAX`]. Nothing here runs on an actor: calls read the state
//! and talk to the peer directly, the task only keeps the state true.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rmcp::model::{ServerNotification, SubscriptionFilter, Tool};
use rmcp::service::Subscription;
use rmcp::{Peer, RoleClient};
use serde::Serialize;
use tokio::sync::watch;

use super::client::Listener;
use super::naming::namespaced;
use super::transport::{connect, Connection};
use crate::backoff::jittered;
use crate::config::McpServerConfig;
use crate::model::ToolSpec;

/// The first delay before a restart; doubles per failed attempt in a row.
pub(crate) const RESTART_BASE: Duration = Duration::from_millis(250);

/// The longest delay before a restart.
pub(crate) const RESTART_MAX: Duration = Duration::from_secs(30);

/// Most tools kept from one server: past it the rest are dropped with a warning (each tool
/// costs prompt tokens on every turn it is offered).
pub(crate) const MAX_TOOLS_PER_SERVER: usize = 512;

/// How long shutdown waits for a connection to close before dropping it (which kills a
/// child process).
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Where a server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpStatus {
    /// The first connection attempt has not ended yet.
    Starting,
    /// Connected, tools listed.
    Up,
    /// Not connected; being restarted.
    Down,
}

/// One tool of a server, as offered to the model.
#[derive(Debug, Clone)]
pub(crate) struct McpTool {
    /// Name (namespaced), description and schema.
    pub(crate) spec: ToolSpec,
    /// Its name on the server.
    pub(crate) remote: String,
}

/// What a server's health line says (`/readyz`, `/v1/stats`, the console).
#[derive(Debug, Clone, Serialize)]
pub struct McpServerHealth {
    /// The `[mcp_servers.<name>]` name.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// Starting, up or down.
    pub status: McpStatus,
    /// Tools cached (still offered while down: a call answers that the server is down).
    pub tools: usize,
    /// Why it is down (or why the last re-list failed).
    pub error: Option<String>,
    /// Since when (ms since the Unix epoch) it has had this status.
    pub since_ms: u64,
    /// Restarts since start.
    pub restarts: u64,
}

#[derive(Clone)]
struct State {
    status: McpStatus,
    error: Option<String>,
    since_ms: u64,
    peer: Option<Peer<RoleClient>>,
    tools: Arc<[McpTool]>,
}

/// One configured server.
pub(crate) struct Server {
    pub(crate) name: String,
    pub(crate) config: McpServerConfig,
    state: RwLock<State>,
    restarts: AtomicU64,
    /// Bumped on every status change (the hub's start-up wait watches it).
    changes: watch::Sender<u64>,
}

/// Why a connection is not usable.
type Failure = String;

impl Server {
    pub(crate) fn new(name: &str, config: McpServerConfig, changes: watch::Sender<u64>) -> Self {
        Self {
            name: name.to_string(),
            config,
            state: RwLock::new(State {
                status: McpStatus::Starting,
                error: None,
                since_ms: now_ms(),
                peer: None,
                tools: Arc::from(Vec::new()),
            }),
            restarts: AtomicU64::new(0),
            changes,
        }
    }

    fn read(&self) -> State {
        match self.state.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn write(&self, edit: impl FnOnce(&mut State)) {
        match self.state.write() {
            Ok(mut s) => edit(&mut s),
            Err(poisoned) => edit(&mut poisoned.into_inner()),
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(crate) fn status(&self) -> McpStatus {
        self.read().status
    }

    /// The cached tools.
    pub(crate) fn tools(&self) -> Arc<[McpTool]> {
        self.read().tools
    }

    /// The peer to call, or why there is none.
    pub(crate) fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let s = self.read();
        match (s.status, s.peer) {
            (McpStatus::Up, Some(peer)) => Ok(peer),
            (McpStatus::Starting, _) => Err(format!(
                "MCP server {:?} is still starting; try again shortly",
                self.name
            )),
            (_, _) => Err(format!(
                "MCP server {:?} is down ({}); it is being restarted",
                self.name,
                s.error.as_deref().unwrap_or("not connected")
            )),
        }
    }

    pub(crate) fn health(&self) -> McpServerHealth {
        let s = self.read();
        McpServerHealth {
            name: self.name.clone(),
            transport: self.config.transport(),
            status: s.status,
            tools: s.tools.len(),
            error: s.error,
            since_ms: s.since_ms,
            restarts: self.restarts.load(Ordering::Relaxed),
        }
    }

    fn set_up(&self, peer: Peer<RoleClient>, tools: Vec<McpTool>) {
        let n = tools.len();
        self.write(|s| {
            s.status = McpStatus::Up;
            s.error = None;
            s.since_ms = now_ms();
            s.peer = Some(peer);
            s.tools = Arc::from(tools);
        });
        crate::metrics::mcp_server(&self.name, true, n);
        tracing::info!(server = %self.name, tools = n, "MCP server up");
    }

    fn set_tools(&self, tools: Vec<McpTool>) {
        let n = tools.len();
        self.write(|s| {
            s.tools = Arc::from(tools);
            s.error = None;
        });
        crate::metrics::mcp_server(&self.name, true, n);
        tracing::info!(server = %self.name, tools = n, "MCP server's tools listed again");
    }

    fn set_down(&self, error: Failure) {
        tracing::warn!(server = %self.name, %error, "MCP server down");
        let mut tools = 0;
        self.write(|s| {
            s.status = McpStatus::Down;
            s.error = Some(error);
            s.since_ms = now_ms();
            s.peer = None;
            tools = s.tools.len();
        });
        crate::metrics::mcp_server(&self.name, false, tools);
    }

    /// Keeps the server connected until `shutdown` turns true.
    pub(crate) async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut failures: u32 = 0;
        loop {
            let started = Instant::now();
            // On shutdown the connection's future is dropped: its `Live` cancels the
            // connection, and a child process is killed with it.
            // A panic inside the SDK or a transport must not leave the server "starting"
            // forever with no task behind it: it counts as a failed connection.
            let attempt = std::panic::AssertUnwindSafe(self.connect_and_serve()).catch_unwind();
            let error = tokio::select! {
                ended = attempt => ended.unwrap_or_else(|_| "the MCP client panicked (see the log)".to_string()),
                _ = shutdown.wait_for(|s| *s) => return,
            };
            self.set_down(error);
            // A connection that lived longer than the longest delay starts the back-off over.
            if started.elapsed() > RESTART_MAX {
                failures = 0;
            }
            let delay = jittered(RESTART_BASE, RESTART_MAX, failures);
            failures = failures.saturating_add(1);
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            self.restarts.fetch_add(1, Ordering::Relaxed);
            crate::metrics::mcp_restart(&self.name);
            tracing::info!(server = %self.name, attempt = failures, "restarting MCP server");
        }
    }

    /// One connection's life: connect, list, serve until it ends; why it ended (or never
    /// came up).
    async fn connect_and_serve(&self) -> Failure {
        let listener = Listener::new(&self.name);
        let changed = Arc::clone(&listener.tools_changed);
        let connect_timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let connection = match tokio::time::timeout(
            connect_timeout,
            connect(&self.name, &self.config, listener),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return e,
            Err(_) => {
                return format!(
                    "did not connect within connect_timeout_ms ({} ms)",
                    self.config.connect_timeout_ms
                )
            }
        };
        let peer = connection.peer().clone();
        let mut live = Live::new(connection);
        let tools = match self.list(&peer).await {
            Ok(tools) => tools,
            Err(e) => {
                live.close().await;
                return e;
            }
        };
        self.set_up(peer.clone(), tools);
        let mut subscription = subscribe(&peer).await;
        let ended = loop {
            tokio::select! {
                () = changed.notified() => self.relist(&peer).await,
                heard = next_change(&mut subscription) => {
                    if heard {
                        self.relist(&peer).await;
                    } else {
                        subscription = None;
                    }
                }
                () = live.ended() => {
                    break "the connection closed (the server exited or hung up)".to_string()
                }
            }
        };
        live.close().await;
        ended
    }

    /// Lists again after a change; a failure keeps the old list (the connection's end, if
    /// that is why, is seen by the loop).
    async fn relist(&self, peer: &Peer<RoleClient>) {
        match self.list(peer).await {
            Ok(tools) => self.set_tools(tools),
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "re-listing an MCP server's tools failed; keeping the old list");
                self.write(|s| s.error = Some(error));
            }
        }
    }

    /// `tools/list`, every page, within `list_timeout_ms`, as namespaced tools.
    async fn list(&self, peer: &Peer<RoleClient>) -> Result<Vec<McpTool>, Failure> {
        let limit = Duration::from_millis(self.config.list_timeout_ms);
        let listed = match tokio::time::timeout(limit, peer.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => return Err(format!("tools/list failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "tools/list did not answer within list_timeout_ms ({} ms)",
                    self.config.list_timeout_ms
                ))
            }
        };
        Ok(self.namespace(listed))
    }

    /// The listed tools under their namespaced names; a second tool mapping to a name
    /// already taken, and tools past [`MAX_TOOLS_PER_SERVER`], are dropped with a warning.
    fn namespace(&self, listed: Vec<Tool>) -> Vec<McpTool> {
        let mut out: Vec<McpTool> = Vec::with_capacity(listed.len().min(MAX_TOOLS_PER_SERVER));
        let total = listed.len();
        for tool in listed {
            if out.len() == MAX_TOOLS_PER_SERVER {
                tracing::warn!(server = %self.name, total, kept = MAX_TOOLS_PER_SERVER, "MCP server lists more tools than are kept");
                break;
            }
            let name = namespaced(&self.name, &tool.name);
            if out.iter().any(|t| t.spec.name == name) {
                tracing::warn!(server = %self.name, tool = %tool.name, %name, "two MCP tools map to one name; the second is not offered");
                continue;
            }
            out.push(McpTool {
                spec: ToolSpec {
                    name,
                    description: tool.description.as_deref().unwrap_or_default().to_string(),
                    parameters: serde_json::Value::Object((*tool.input_schema).clone()),
                },
                remote: tool.name.to_string(),
            });
        }
        out
    }
}

/// A connection whose I/O task runs on a task of its own, so that its end can be awaited
/// while its peer is in use. Dropped without [`Live::close`] (the server's task aborted), it
/// still cancels the connection, which ends a child process.
struct Live {
    cancel: Option<rmcp::service::RunningServiceCancellationToken>,
    done: tokio::task::JoinHandle<Result<rmcp::service::QuitReason, tokio::task::JoinError>>,
    ended: bool,
}

impl Live {
    fn new(connection: Connection) -> Self {
        Self {
            cancel: Some(connection.cancellation_token()),
            done: tokio::spawn(connection.waiting()),
            ended: false,
        }
    }

    /// Resolves when the connection has ended by itself.
    async fn ended(&mut self) {
        if self.ended {
            return std::future::pending().await;
        }
        let _ = (&mut self.done).await;
        self.ended = true;
    }

    /// Cancels the connection and waits at most [`CLOSE_GRACE`] for it to wind down.
    async fn close(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
        if !self.ended {
            let _ = tokio::time::timeout(CLOSE_GRACE, &mut self.done).await;
            self.ended = true;
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
    }
}

/// On protocol `2026-07-28` and later, list-changed notifications come on a listen stream the
/// client opens; earlier servers send them unasked (the [`Listener`] hears those).
async fn subscribe(peer: &Peer<RoleClient>) -> Option<Subscription> {
    let info = peer.peer_info()?;
    let announces = info
        .capabilities
        .tools
        .as_ref()
        .and_then(|t| t.list_changed)
        .unwrap_or(false);
    if !announces || info.protocol_version.as_str() < "2026-07-28" {
        return None;
    }
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    match tokio::time::timeout(Duration::from_secs(10), peer.listen(filter)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(error)) => {
            tracing::debug!(%error, "the MCP server refused a listen stream");
            None
        }
        Err(_) => None,
    }
}

/// The next tool-list change on `subscription`: `true` for one, `false` when the stream
/// ended (the caller drops it); never resolves without a stream.
async fn next_change(subscription: &mut Option<Subscription>) -> bool {
    let Some(s) = subscription.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match s.next().await {
            Ok(Some(ServerNotification::ToolListChangedNotification(_))) => return true,
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return false,
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
