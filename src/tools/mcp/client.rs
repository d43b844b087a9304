//! What the rmcp client hears from a server: `notifications/tools/list_changed` wakes the
//! server's task (which lists again). The handler only signals: it runs on rmcp's I/O task
//! and must not wait on anything.

use std::sync::Arc;

use rmcp::model::{ClientConfig, Implementation};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::Notify;

/// The client side of one connection.
#[derive(Clone)]
pub(crate) struct Listener {
    server: Arc<str>,
    /// Notified when the server says its tool list changed.
    pub(crate) tools_changed: Arc<Notify>,
}

impl Listener {
    pub(crate) fn new(server: &str) -> Self {
        Self {
            server: server.into(),
            tools_changed: Arc::new(Notify::new()),
        }
    }
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::debug!(server = %self.server, "MCP server's tool list changed");
        self.tools_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info = Implementation::new("turnstile", env!("CARGO_PKG_VERSION"));
        info
    }
}
