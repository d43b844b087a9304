//! The `turnstile` binary: the CLI over the library. Subcommands live in `cli/`; this file
//! parses and dispatches.

mod cli;

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use turnstile::{Config, Runtime};

#[derive(Parser)]
#[command(
    name = "turnstile",
    version,
    about = "Hosts AI chat-agent sessions for many chats at once"
)]
struct Cli {
    /// Log format on stderr (`RUST_LOG` filters, default `info`).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "TURNSTILE_LOG_FORMAT"
    )]
    log_format: cli::logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server.
    Serve {
        /// A turnstile.toml file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Data directory (overrides the file). Default ./turnstile-data.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Listen address (overrides the file). Default 127.0.0.1:7878.
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Chat interactively with a running server.
    Chat {
        /// The server's base URL.
        #[arg(long, default_value = "http://127.0.0.1:7878")]
        url: String,
        /// The session to talk in.
        #[arg(long, default_value = "cli")]
        session: String,
    },
    /// Figures of a server or data dir: sessions, context tokens, compactions, disk use…
    Stats(cli::Target),
    /// Inspect and manage sessions.
    Sessions {
        #[command(subcommand)]
        command: cli::ops::SessionsCmd,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli::logging::init(cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    match cli.command {
        Command::Serve {
            config,
            data_dir,
            listen,
        } => runtime.block_on(serve(config, data_dir, listen)),
        Command::Chat { url, session } => runtime.block_on(chat(url, session)),
        Command::Stats(target) => runtime.block_on(cli::ops::stats(target)),
        Command::Sessions { command } => runtime.block_on(cli::ops::sessions(command)),
    }
}

async fn serve(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    listen: Option<SocketAddr>,
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
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding {}", config.server.listen))?;
    let addr = listener.local_addr()?;
    let runtime = Runtime::builder().config(config).build().await?;
    tracing::info!(%addr, "turnstile listening");
    turnstile::server::serve(listener, runtime, shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
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

async fn chat(url: String, session: String) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let endpoint = format!("{}/v1/chat/completions", url.trim_end_matches('/'));
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    write!(out, "you> ")?;
    out.flush()?;
    for line in stdin.lock().lines() {
        let line = line?;
        let text = line.trim();
        if text.is_empty() {
            write!(out, "you> ")?;
            out.flush()?;
            continue;
        }
        if text == "/quit" || text == "/exit" {
            break;
        }
        let body = serde_json::json!({
            "model": "turnstile",
            "user": session,
            "messages": [{"role": "user", "content": text}],
        });
        let response = client
            .post(&endpoint)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("is a server running at {url}?"))?;
        let status = response.status();
        let value: serde_json::Value = response.json().await.context("reading the reply")?;
        if status.is_success() {
            let reply = value["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or("");
            writeln!(out, "bot> {reply}")?;
        } else {
            writeln!(out, "error {status}: {}", value["error"]["message"])?;
        }
        write!(out, "you> ")?;
        out.flush()?;
    }
    Ok(())
}
