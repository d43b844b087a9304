//! `turnstile serve`: the HTTP server until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use turnstile::store::Store;
use turnstile::{Config, Runtime};

pub(crate) async fn serve(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    listen: Option<SocketAddr>,
    accept_data_loss: bool,
) -> anyhow::Result<()> {
    let mut config = match config {
        Some(path) => Config::load(&path)?,
        None => Config::default(),
    };
    if let Some(dir) = data_dir {
        config.storage.data_dir = dir;
    }
    if let Some(addr) = listen {
        config.server.listen = addr;
    }
    let auth = turnstile::server::Auth::from_config(&config.server);
    turnstile::server::check_exposure(config.server.listen, &auth, &config.server.api_key_env)?;
    let needed = turnstile::server::socket::fds_needed(&config.server);
    match turnstile::server::socket::raise_fd_limit(needed) {
        Ok(turnstile::server::socket::FdLimit::Short { limit, needed }) => tracing::warn!(
            limit,
            needed,
            "the file-descriptor limit is below what [server] max_connections + \
             health_connections need: connections past it fail to be accepted; raise the \
             hard limit (ulimit -Hn, LimitNOFILE=) or lower max_connections"
        ),
        Ok(turnstile::server::socket::FdLimit::Raised { from, to }) => {
            tracing::info!(
                from,
                to,
                "raised the file-descriptor limit for the connection settings"
            )
        }
        Ok(turnstile::server::socket::FdLimit::Enough { .. }) => {}
        Err(e) => tracing::warn!(error = %e, "could not read or raise the file-descriptor limit"),
    }
    let listener = turnstile::server::socket::bind(config.server.listen, &config.server)
        .await
        .with_context(|| format!("binding {}", config.server.listen))?;
    let addr = listener.local_addr()?;
    if accept_data_loss && Store::exists(&config.storage.data_dir) {
        if let Some(loss) = Store::accept_data_loss(&config.storage).await? {
            tracing::warn!(loss = %loss.describe(), "serving what is left (--accept-data-loss)");
        }
    }
    let runtime = Runtime::builder().config(config).build().await?;
    #[cfg(feature = "cluster")]
    let node = match runtime.config().cluster.clone() {
        Some(cluster) => match turnstile::cluster::ClusterNode::start(&runtime, &cluster).await {
            Ok(node) => Some(node),
            Err(e) => {
                let _ = runtime.shutdown().await;
                return Err(e).context("joining the cluster");
            }
        },
        None => None,
    };
    tracing::info!(%addr, "turnstile listening");
    let report = turnstile::server::serve(listener, runtime, shutdown_signal()).await?;
    // After the runtime's shutdown: its last turns could still append to the changelog.
    #[cfg(feature = "cluster")]
    if let Some(node) = node {
        if let Err(e) = node.stop().await {
            tracing::warn!(error = %e, "leaving the cluster: the leases expire instead");
        }
    }
    tracing::info!("stopped");
    if report.left_running > 0 {
        // Turns were cut off (they are replayed at the next start): a supervisor that
        // restarts on failure should know the drain did not finish its work.
        std::process::exit(DRAIN_INCOMPLETE_EXIT);
    }
    Ok(())
}

/// The exit status when the drain left running turns (EX_TEMPFAIL: retry later).
const DRAIN_INCOMPLETE_EXIT: i32 = 75;

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
