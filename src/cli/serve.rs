//! `turnstile serve`: the HTTP server until SIGTERM or Ctrl-C; SIGHUP reloads the config
//! file (`config/reload.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use turnstile::config::ConfigFile;
use turnstile::store::Store;
use turnstile::{Config, Runtime};

pub(crate) async fn serve(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    listen: Option<SocketAddr>,
    accept_data_loss: bool,
) -> anyhow::Result<()> {
    let hangups = listen_for_sighup();
    // The overrides are kept with the file, so a reload applies them again.
    let file = config.map(|path| ConfigFile {
        path,
        data_dir: data_dir.clone(),
        listen,
    });
    let config = match &file {
        Some(file) => file.load()?,
        None => {
            let mut config = Config::default();
            if let Some(dir) = data_dir {
                config.storage.data_dir = dir;
            }
            if let Some(addr) = listen {
                config.server.listen = addr;
            }
            config
        }
    };
    let auth = turnstile::server::Auth::from_config(&config.server);
    turnstile::server::check_exposure(config.server.listen, &auth, &config.server.api_key_env)?;
    let needed = turnstile::server::socket::fds_needed(&config);
    match turnstile::server::socket::raise_fd_limit(needed) {
        Ok(turnstile::server::socket::FdLimit::Short { limit, needed }) => tracing::warn!(
            limit,
            needed,
            "the file-descriptor limit is below what [server] max_connections + \
             health_connections and the model connections ([lanes] max_concurrent_turns, at \
             most [model] max_connections per model) need: connections past it fail; raise \
             the hard limit (ulimit -Hn, LimitNOFILE=) or lower those settings"
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
    let mut builder = Runtime::builder().config(config);
    if let Some(file) = file {
        builder = builder.config_file(file);
    }
    let runtime = builder.build().await?;
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
    let reloads = tokio::spawn(reload_on_sighup(runtime.clone(), hangups));
    let report = turnstile::server::serve(listener, runtime, shutdown_signal()).await?;
    reloads.abort();
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

/// SIGHUP, taken over before anything slow starts: from here on it no longer ends the
/// process (its default), and one that arrives before the runtime is up is reloaded after.
#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = Option<()>;

fn listen_for_sighup() -> Hangups {
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(hup) => Some(hup),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: reload with POST /v1/admin/reload");
            None
        }
    }
    #[cfg(not(unix))]
    None
}

/// Reloads the config file at each SIGHUP (one at a time; a SIGHUP during a reload is taken
/// after it), until the task is aborted at shutdown.
async fn reload_on_sighup(runtime: Runtime, hangups: Hangups) {
    #[cfg(unix)]
    if let Some(mut hup) = hangups {
        while hup.recv().await.is_some() {
            turnstile::server::reload_on_signal(&runtime, "SIGHUP").await;
        }
    }
    #[cfg(not(unix))]
    let _ = (runtime, hangups);
}

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
