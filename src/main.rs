//! The `turnstile` binary: the CLI over the library. Subcommand bodies live in `cli/`; this
//! file parses and dispatches.

mod cli;

/// The server allocates many small, short-lived buffers from two threads at once; mimalloc's
/// per-thread heaps measured clearly cheaper than the system allocator on the turn path (see
/// BENCHMARKS.md). Only the binary sets it: embedders choose their own allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

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
        /// Serve a store whose ledger shows lost data (what is left), re-baselining the
        /// ledger; without it such a store is refused.
        #[arg(long)]
        accept_data_loss: bool,
    },
    /// Bounded load against a server (or an in-process runtime), with a latency report.
    Loadtest(cli::loadtest::LoadtestArgs),
    /// Check the store under a data dir (the server must not be running on it): schema,
    /// undecodable values, the inbox, the eviction index, orphan entries, counters. Exits 1
    /// when problems were found and not repaired.
    Doctor {
        /// Data directory. Default ./turnstile-data.
        #[arg(long, default_value = "./turnstile-data")]
        data_dir: PathBuf,
        /// Repair what is found: quarantine undecodable values, rebuild the index, delete
        /// orphan entries, recompute counters.
        #[arg(long)]
        repair: bool,
    },
    /// Import sessions from another system into a data dir (the server must not be running
    /// on it).
    Import {
        #[command(subcommand)]
        source: ImportSource,
    },
    /// Write one session as JSONL (a header line, then one line per transcript entry).
    Export {
        /// The session key.
        key: String,
        /// Data directory. Default ./turnstile-data.
        #[arg(long, default_value = "./turnstile-data")]
        data_dir: PathBuf,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
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
    /// Inspect a cluster of nodes on NATS JetStream (a build with the `cluster` feature).
    #[cfg(feature = "cluster")]
    Cluster {
        #[command(subcommand)]
        command: cli::cluster::ClusterCmd,
    },
}

#[derive(Subcommand)]
enum ImportSource {
    /// An OpenClaw sessions dir (`sessions.json` and `<sessionId>.jsonl` transcripts).
    Openclaw {
        /// The sessions dir, e.g. ~/.openclaw/agents/main/sessions.
        dir: PathBuf,
        /// Data directory. Default ./turnstile-data.
        #[arg(long, default_value = "./turnstile-data")]
        data_dir: PathBuf,
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
            accept_data_loss,
        } => runtime.block_on(cli::serve::serve(
            config,
            data_dir,
            listen,
            accept_data_loss,
        )),
        Command::Chat { url, session } => runtime.block_on(cli::chat::chat(url, session)),
        Command::Loadtest(args) => runtime.block_on(cli::loadtest::loadtest(args)),
        Command::Stats(target) => runtime.block_on(cli::ops::stats(target)),
        Command::Sessions { command } => runtime.block_on(cli::ops::sessions(command)),
        #[cfg(feature = "cluster")]
        Command::Cluster { command } => runtime.block_on(cli::cluster::cluster(command)),
        Command::Doctor { data_dir, repair } => {
            runtime.block_on(cli::doctor::doctor(data_dir, repair))
        }
        Command::Import {
            source: ImportSource::Openclaw { dir, data_dir },
        } => runtime.block_on(cli::data::import_openclaw(dir, data_dir)),
        Command::Export { key, data_dir, out } => {
            runtime.block_on(cli::data::export(key, data_dir, out))
        }
    }
}
