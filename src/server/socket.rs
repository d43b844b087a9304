//! The listening socket and the file descriptors it will need: a backlog sized for bursts
//! (`server.listen_backlog`), and the process's descriptor limit raised to what the connection
//! settings need, or a clear warning at start when it cannot be — a server out of
//! descriptors fails `accept` and its clients wait on retransmits, which looks like a slow
//! server rather than a misconfigured one.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

use crate::config::{Config, ServerConfig};

/// Descriptors the process holds besides its connections: the store's files (sled's, the
/// cold packs it keeps open, the ledger), the model client's connections, logs and the
/// runtime's own.
pub const FD_RESERVE: u64 = 256;

/// Binds `addr` with the configured backlog.
pub async fn bind(addr: SocketAddr, config: &ServerConfig) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(config.listen_backlog)
}

/// Descriptors `config`'s connection settings can hold at once, with [`FD_RESERVE`]: the
/// server's connections, and the model client's. Each model call in flight holds one
/// connection to the model server: at most `lanes.max_concurrent_turns` at once, and at most
/// `model.max_connections` per model (the primary and each fallback); a burst of slow turns
/// fills them all, so they are counted whole rather than left to the reserve.
pub fn fds_needed(config: &Config) -> u64 {
    let server = &config.server;
    let serving =
        (server.max_connections + server.health_connections + super::conn_io::MAX_LINGERING) as u64;
    let models = 1 + config.model.fallbacks.len() as u64;
    let to_models = (config.lanes.max_concurrent_turns as u64)
        .min(u64::from(config.model.max_connections).saturating_mul(models));
    serving + to_models + FD_RESERVE
}

/// What [`raise_fd_limit`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdLimit {
    /// The soft limit already covered the need.
    Enough {
        /// The soft limit.
        soft: u64,
    },
    /// The soft limit was raised (up to the hard limit) and now covers the need.
    Raised {
        /// The soft limit before.
        from: u64,
        /// The soft limit now.
        to: u64,
    },
    /// Even the hard limit is below the need: the server will refuse connections early.
    Short {
        /// The limit now (the hard one).
        limit: u64,
        /// What the connection settings need.
        needed: u64,
    },
}

/// Raises the soft `RLIMIT_NOFILE` toward `needed` (never past the hard limit), as servers
/// commonly do at start: the soft default of 1,024 is a shell convention, not a system bound.
pub fn raise_fd_limit(needed: u64) -> io::Result<FdLimit> {
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    if soft >= needed {
        return Ok(FdLimit::Enough { soft });
    }
    let target = needed.min(hard);
    if target > soft {
        rlimit::setrlimit(rlimit::Resource::NOFILE, target, hard)?;
    }
    if target >= needed {
        Ok(FdLimit::Raised {
            from: soft,
            to: target,
        })
    } else {
        Ok(FdLimit::Short {
            limit: target.max(soft),
            needed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_need_counts_every_connection_kind_and_the_reserve() {
        let mut config = Config::default();
        let serving = (768 + 32 + super::super::conn_io::MAX_LINGERING) as u64;
        // 1,024 turns at once, each holding one connection to the model.
        assert_eq!(fds_needed(&config), serving + 1_024 + FD_RESERVE);
        // 10,000 turns at once against one model that takes 1,024 connections...
        config.lanes.max_concurrent_turns = 10_000;
        assert_eq!(fds_needed(&config), serving + 1_024 + FD_RESERVE);
        // ...or two models (a fallback), 1,024 each.
        config.model.fallbacks = vec!["backup".into()];
        assert_eq!(fds_needed(&config), serving + 2_048 + FD_RESERVE);
    }

    #[test]
    fn a_need_below_the_soft_limit_changes_nothing() {
        assert!(matches!(raise_fd_limit(1), Ok(FdLimit::Enough { .. })));
    }

    #[tokio::test]
    async fn binds_with_the_configured_backlog() {
        let config = ServerConfig {
            listen_backlog: 16,
            ..ServerConfig::default()
        };
        let listener = bind("127.0.0.1:0".parse().unwrap(), &config).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert_eq!(accepted.peer_addr().unwrap(), client.local_addr().unwrap());
    }
}
