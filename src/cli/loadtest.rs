//! `turnstile loadtest`: bounded load against a server or an in-process runtime, and the
//! `group-memory` scenario.

use std::path::PathBuf;

use anyhow::Context;
use turnstile::{Config, Runtime};

#[derive(clap::Args)]
pub(crate) struct LoadtestArgs {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    pub(crate) url: String,
    /// Load a runtime inside this process instead of a server.
    #[arg(long)]
    pub(crate) in_process: bool,
    /// Data dir for --in-process (default: a fresh temporary dir, removed afterwards).
    #[arg(long)]
    pub(crate) data_dir: Option<PathBuf>,
    /// Durability for --in-process: strict or batched (overrides the config file's).
    #[arg(long, default_value = "strict")]
    pub(crate) durability: String,
    /// Config file for --in-process (default: the embedded defaults).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Offered load in messages per second, spread over the senders (default: as fast as the
    /// target accepts).
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Distinct sessions.
    #[arg(long, default_value_t = 100)]
    pub(crate) sessions: usize,
    /// Messages per session.
    #[arg(long, default_value_t = 10)]
    pub(crate) messages: usize,
    /// Concurrent senders.
    #[arg(long, default_value_t = 32)]
    pub(crate) concurrency: usize,
    /// Mix in group chats (several senders, some messages not addressed to the bot).
    #[arg(long)]
    pub(crate) group_mix: bool,
    /// Stop sending after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub(crate) max_seconds: u64,
    /// Wait at most this many seconds for outstanding replies.
    #[arg(long, default_value_t = 30)]
    pub(crate) drain_seconds: u64,
    /// PID of a local server, to report its memory.
    #[arg(long)]
    pub(crate) server_pid: Option<u32>,
    /// Environment variable holding the server's bearer token, if it needs one.
    #[arg(long)]
    pub(crate) api_key_env: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Run a scenario instead of throughput load. `group-memory`: five people chat in one
    /// group, facts are planted, then probed; reports how many the context still carries and
    /// the prompt tokens per turn (in process, against a recording test model).
    #[arg(long, value_enum)]
    pub(crate) scenario: Option<Scenario>,
    /// --scenario group-memory: chat messages before the probes.
    #[arg(long, default_value_t = 500)]
    pub(crate) chat_messages: usize,
    /// --scenario group-memory: facts planted (one probe each).
    #[arg(long, default_value_t = 30)]
    pub(crate) facts: usize,
    /// --scenario group-memory: the bot is mentioned on every n-th message.
    #[arg(long, default_value_t = 20)]
    pub(crate) mention_every: usize,
    /// --scenario group-memory: the generator's seed.
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// --scenario locomo: LoCoMo conversation files (`conv-26.json`…, the public release's
    /// format), replayed in the order given.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub(crate) data: Vec<PathBuf>,
    /// --scenario locomo: write each question's model request (with its evidence, found or
    /// missing) into this directory, to read why a question was missed.
    #[arg(long, value_name = "DIR")]
    pub(crate) dump_requests: Option<PathBuf>,
    /// Also write an SVG plot: turn latency over time and a latency histogram.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// A long group chat with planted facts probed at the end.
    GroupMemory,
    /// Real long conversations (LoCoMo) replayed into group chats, then their questions.
    Locomo,
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

/// `loadtest --scenario locomo --data FILE…`: in process, on a throwaway data dir.
async fn locomo(args: &LoadtestArgs) -> anyhow::Result<()> {
    use turnstile::loadtest::locomo::{parse, run, CATEGORIES, MAX_CONVERSATIONS};
    if args.data.is_empty() || args.data.len() > MAX_CONVERSATIONS {
        anyhow::bail!("--data takes 1 to {MAX_CONVERSATIONS} LoCoMo conversation files");
    }
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let zone =
        jiff::tz::TimeZone::get(config.context.time_zone.trim()).unwrap_or(jiff::tz::TimeZone::UTC);
    let mut conversations = Vec::new();
    for path in &args.data {
        let json = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let name = path.file_stem().map_or_else(
            || "conversation".into(),
            |s| s.to_string_lossy().into_owned(),
        );
        conversations.push(parse(&name, &json, &zone).map_err(anyhow::Error::msg)?);
    }
    let temp = tempfile_dir()?;
    config.storage.data_dir = temp.clone();
    let report = run(&conversations, config, args.dump_requests.as_deref()).await;
    let _ = std::fs::remove_dir_all(&temp);
    let r = report?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let head: Vec<String> = CATEGORIES.iter().map(|(_, n)| format!("{n:>11}")).collect();
    println!(
        "{:<10} {:>5} {:>9} {} {:>7} {:>9} {:>9} {:>8} {:>8}",
        "locomo",
        "asked",
        "covered",
        head.join(" "),
        "dated",
        "tok p50",
        "tok max",
        "recency",
        "whole"
    );
    for f in r.conversations.iter().chain(std::iter::once(&r.total)) {
        let cats: Vec<String> = f
            .categories
            .iter()
            .map(|c| format!("{:>10.1}%", c.pct()))
            .collect();
        let temporal = f.categories.get(1).map_or(0, |c| c.covered);
        println!(
            "{:<10} {:>5} {:>8.1}% {} {:>3}/{:<3} {:>9} {:>9} {:>7.1}% {:>8}",
            f.name,
            f.questions,
            f.covered_pct(),
            cats.join(" "),
            f.temporal_dated,
            temporal,
            f.tokens_p50,
            f.tokens_max,
            f.recency_covered as f64 * 100.0 / f.questions.max(1) as f64,
            f.whole_tokens,
        );
    }
    println!(
        "assembly per question (uncached): p50 {} µs, p99 {} µs",
        r.total.assembly_us_p50, r.total.assembly_us_p99
    );
    println!(
        "budget {} tokens; summary retention of observations: {}/{} ({:.1}%); unresolved questions left out: {}",
        r.total.budget,
        r.total.observations_retained,
        r.total.observations,
        r.total.observations_retained as f64 * 100.0 / r.total.observations.max(1) as f64,
        r.total.unresolved
    );
    Ok(())
}

pub(crate) async fn loadtest(args: LoadtestArgs) -> anyhow::Result<()> {
    use turnstile::loadtest::{self, HttpTarget, InProcessTarget, LoadSpec};
    match args.scenario {
        Some(Scenario::GroupMemory) => return group_memory(&args).await,
        Some(Scenario::Locomo) => return locomo(&args).await,
        None => {}
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
        run_id: format!("lt{}", turnstile::clock::now_ms()),
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
