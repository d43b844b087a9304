//! The `turnstile` binary: the CLI over the library. Subcommands live in `cli/`; this file
//! parses and dispatches.

mod cli;

/// The server allocates many small, short-lived buffers from two threads at once; mimalloc's
/// per-thread heaps measured clearly cheaper than the system allocator on the turn path (see
/// BENCHMARKS.md). Only the binary sets it: embedders choose their own allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use turnstile::model::{Encoding, TokenCounter};
use turnstile::store::Store;
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
        /// Serve a store whose ledger shows lost data (what is left), re-baselining the
        /// ledger; without it such a store is refused.
        #[arg(long)]
        accept_data_loss: bool,
    },
    /// Bounded load against a server (or an in-process runtime), with a latency report.
    Loadtest(LoadtestArgs),
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
}

#[derive(clap::Args)]
struct LoadtestArgs {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    url: String,
    /// Load a runtime inside this process instead of a server.
    #[arg(long)]
    in_process: bool,
    /// Data dir for --in-process (default: a fresh temporary dir, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Durability for --in-process: strict or batched (overrides the config file's).
    #[arg(long, default_value = "strict")]
    durability: String,
    /// Config file for --in-process (default: the embedded defaults).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Offered load in messages per second, spread over the senders (default: as fast as the
    /// target accepts).
    #[arg(long)]
    rate: Option<f64>,
    /// Distinct sessions.
    #[arg(long, default_value_t = 100)]
    sessions: usize,
    /// Messages per session.
    #[arg(long, default_value_t = 10)]
    messages: usize,
    /// Concurrent senders.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Mix in group chats (several senders, some messages not addressed to the bot).
    #[arg(long)]
    group_mix: bool,
    /// Stop sending after this many seconds.
    #[arg(long, default_value_t = 120)]
    max_seconds: u64,
    /// Wait at most this many seconds for outstanding replies.
    #[arg(long, default_value_t = 30)]
    drain_seconds: u64,
    /// PID of a local server, to report its memory.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Environment variable holding the server's bearer token, if it needs one.
    #[arg(long)]
    api_key_env: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Run a scenario instead of throughput load. `group-memory`: five people chat in one
    /// group, facts are planted, then probed; reports how many the context still carries and
    /// the prompt tokens per turn (in process, against a recording test model).
    #[arg(long, value_enum)]
    scenario: Option<Scenario>,
    /// --scenario group-memory: chat messages before the probes.
    #[arg(long, default_value_t = 500)]
    chat_messages: usize,
    /// --scenario group-memory: facts planted (one probe each).
    #[arg(long, default_value_t = 30)]
    facts: usize,
    /// --scenario group-memory: the bot is mentioned on every n-th message.
    #[arg(long, default_value_t = 20)]
    mention_every: usize,
    /// --scenario group-memory: the generator's seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write an SVG plot: turn latency over time and a latency histogram.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Scenario {
    /// A long group chat with planted facts probed at the end.
    GroupMemory,
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
        } => runtime.block_on(serve(config, data_dir, listen, accept_data_loss)),
        Command::Chat { url, session } => runtime.block_on(chat(url, session)),
        Command::Loadtest(args) => runtime.block_on(loadtest(args)),
        Command::Stats(target) => runtime.block_on(cli::ops::stats(target)),
        Command::Sessions { command } => runtime.block_on(cli::ops::sessions(command)),
        Command::Doctor { data_dir, repair } => {
            runtime.block_on(cli::doctor::doctor(data_dir, repair))
        }
        Command::Import {
            source: ImportSource::Openclaw { dir, data_dir },
        } => runtime.block_on(import_openclaw(dir, data_dir)),
        Command::Export { key, data_dir, out } => runtime.block_on(export(key, data_dir, out)),
    }
}

fn storage_config(data_dir: PathBuf) -> turnstile::config::StorageConfig {
    turnstile::config::StorageConfig {
        data_dir,
        ..Default::default()
    }
}

async fn import_openclaw(dir: PathBuf, data_dir: PathBuf) -> anyhow::Result<()> {
    let store = Store::open(&storage_config(data_dir))?;
    let tokens = TokenCounter::new(Encoding::for_model(&Config::default().model.model));
    let report = turnstile::store::import_openclaw(&store, &dir, &|t| tokens.count(t))
        .with_context(|| format!("importing {}", dir.display()))?;
    print!("{report}");
    store.close().await?;
    Ok(())
}

async fn export(key: String, data_dir: PathBuf, out: Option<PathBuf>) -> anyhow::Result<()> {
    if !Store::exists(&data_dir) {
        anyhow::bail!("no store under {}", data_dir.display());
    }
    let store = Store::open(&storage_config(data_dir))?;
    let key = turnstile::inbound::normalize_session_key(&key);
    let written = match &out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            let mut w = std::io::BufWriter::new(file);
            store.export_session(&key, &mut w)?
        }
        None => {
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            store.export_session(&key, &mut w)?
        }
    };
    store.close().await?;
    match written {
        Some(n) => {
            eprintln!("exported {n} entries of {key}");
            Ok(())
        }
        None => anyhow::bail!("no session {key:?}"),
    }
}

async fn serve(
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
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding {}", config.server.listen))?;
    let addr = listener.local_addr()?;
    if accept_data_loss && Store::exists(&config.storage.data_dir) {
        if let Some(loss) = Store::accept_data_loss(&config.storage).await? {
            tracing::warn!(loss = %loss.describe(), "serving what is left (--accept-data-loss)");
        }
    }
    let runtime = Runtime::builder().config(config).build().await?;
    tracing::info!(%addr, "turnstile listening");
    turnstile::server::serve(listener, runtime, shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// `loadtest --scenario group-memory`: in process, on a throwaway data dir.
async fn group_memory(args: &LoadtestArgs) -> anyhow::Result<()> {
    use turnstile::loadtest::group_memory::{run, GroupMemorySpec, MAX_MESSAGES};
    if args.chat_messages == 0 || args.chat_messages > MAX_MESSAGES {
        anyhow::bail!("--chat-messages must be between 1 and {MAX_MESSAGES}");
    }
    let spec = GroupMemorySpec {
        messages: args.chat_messages,
        facts: args.facts,
        mention_every: args.mention_every,
        seed: args.seed,
    };
    let temp = tempfile_dir()?;
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    config.storage.data_dir = temp.clone();
    let report = run(&spec, config).await;
    let _ = std::fs::remove_dir_all(&temp);
    let r = report?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "group memory: {} messages, {} probes, seed {}",
            r.messages, r.probes, args.seed
        );
        println!(
            "  answerable         {}/{} ({:.1}%)",
            r.answerable, r.probes, r.answerable_pct
        );
        println!(
            "  prompt tokens      p50 {}  max {}  (budget {})",
            r.prompt_tokens_p50, r.prompt_tokens_max, r.budget
        );
        println!(
            "  found in           summary {}, recalled message {}, conversation {}",
            r.via_summary, r.via_recall, r.via_history
        );
        println!("  send-everything    {} tokens", r.baseline_tokens);
        println!("  turns {}, compactions {}", r.turns, r.compactions);
        if !r.missed.is_empty() {
            println!("  missed: {}", r.missed.join(", "));
        }
    }
    Ok(())
}

async fn loadtest(args: LoadtestArgs) -> anyhow::Result<()> {
    use turnstile::loadtest::{self, HttpTarget, InProcessTarget, LoadSpec};
    if let Some(Scenario::GroupMemory) = args.scenario {
        return group_memory(&args).await;
    }
    let spec = LoadSpec {
        sessions: args.sessions,
        messages: args.messages,
        concurrency: args.concurrency,
        group_mix: args.group_mix,
        rate: args.rate.filter(|r| *r > 0.0),
        max_duration: std::time::Duration::from_secs(args.max_seconds),
        drain: std::time::Duration::from_secs(args.drain_seconds),
        progress: !args.json,
        run_id: format!(
            "lt{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        ),
    };
    let report = if args.in_process {
        let temp = match &args.data_dir {
            Some(_) => None,
            None => Some(tempfile_dir()?),
        };
        let dir = args
            .data_dir
            .clone()
            .or_else(|| temp.clone())
            .context("no data dir")?;
        let mut config = match &args.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        config.storage.data_dir = dir.clone();
        config.storage.durability = match args.durability.as_str() {
            "strict" => turnstile::config::Durability::Strict,
            "batched" => turnstile::config::Durability::Batched,
            other => anyhow::bail!("--durability must be strict or batched, not {other:?}"),
        };
        // The report counts every reply; a small per-subscriber buffer would drop some.
        config.server.events_buffer = 1 << 16;
        let runtime = Runtime::builder().config(config).build().await?;
        let report = loadtest::run_with_timeline(InProcessTarget::new(runtime.clone()), spec).await;
        runtime.shutdown().await?;
        drop(runtime);
        if let Some(dir) = temp {
            let _ = std::fs::remove_dir_all(dir);
        }
        report
    } else {
        let token = match &args.api_key_env {
            Some(var) => Some(std::env::var(var).with_context(|| format!("${var} is not set"))?),
            None => None,
        };
        let target = HttpTarget::new(&args.url, args.server_pid, token)?;
        loadtest::run_with_timeline(std::sync::Arc::new(target), spec).await
    };
    let (report, timeline) = report;
    if let Some(path) = &args.plot {
        loadtest::plot::write_svg(path, &report, &timeline)?;
        eprintln!("plot written to {}", path.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}

/// A fresh directory under the system temp dir for a throwaway data dir.
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "turnstile-loadtest-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
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
