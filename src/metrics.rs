//! Metrics and per-turn observability, behind small named functions so each call site is one
//! line (`metrics::inbound_accepted("api")`, `timer.assembled(..)`).
//!
//! Values go through the `metrics` facade: with no recorder installed every call is a cheap
//! no-op (an embedding application may install its own). The server installs a Prometheus
//! recorder once per process ([`install_prometheus`]) and renders it on `GET /metrics`; a second
//! runtime in the same process (tests) shares it, so counters are per process, not per runtime.
//!
//! A few figures the operator CLI shows (`turnstile stats`) and the console's overview are
//! also kept in process-wide atomics here, because a Prometheus recorder cannot be read back:
//! see [`process_stats`] and [`turn_latency`] (a histogram of atomic buckets, `latency.rs`).

mod latency;

pub use latency::{LatencyBuckets, LatencySnapshot};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use tracing::field::Empty;
use tracing::Span;

/// Histogram buckets for durations, in seconds: sub-millisecond assembly up to slow models.
pub const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0,
];
/// Histogram buckets for token counts.
pub const TOKEN_BUCKETS: &[f64] = &[
    64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0, 131072.0,
];
/// Histogram buckets for the share of the context budget a turn used.
pub const RATIO_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0];
/// A turn whose context uses more than this share of its budget is logged and counted.
pub const BUDGET_WARNING_RATIO: f64 = 0.9;
/// How often histogram samples are folded into their buckets when nobody scrapes. The
/// recorder buffers raw samples until then, so this bounds that buffer.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder for this process (once; later calls return the same
/// handle). Returns `None` when another recorder was installed first (by an embedding
/// application), in which case `/metrics` reports that it is not served here.
pub fn install_prometheus() -> Option<PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| {
            let handle = match build_recorder() {
                Ok(handle) => handle,
                Err(error) => {
                    tracing::warn!(%error, "Prometheus recorder not installed; /metrics is off");
                    return None;
                }
            };
            describe();
            let upkeep = handle.clone();
            let started = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(UPKEEP_INTERVAL);
                    upkeep.run_upkeep();
                });
            if let Err(error) = started {
                tracing::warn!(%error, "metrics upkeep thread not started; samples fold on scrape only");
            }
            Some(handle)
        })
        .clone()
}

fn build_recorder() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS_SECONDS)?
        .set_buckets_for_metric(Matcher::Suffix("_tokens".into()), TOKEN_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full("turnstile_context_budget_ratio".into()),
            RATIO_BUCKETS,
        )?
        .install_recorder()
}

/// The Prometheus text of every metric, or `None` when this process has no Prometheus
/// recorder.
pub fn render() -> Option<String> {
    PROMETHEUS.get().cloned().flatten().map(|h| h.render())
}

fn describe() {
    describe_counter!(
        "turnstile_channel_reconnects_total",
        "Gateway connections lost and opened again (op 7, invalid sessions, closes), by channel"
    );
    describe_counter!(
        "turnstile_channel_resumes_total",
        "Gateway sessions resumed (no message missed), by channel"
    );
    describe_counter!(
        "turnstile_channel_caught_up_total",
        "Messages read back over REST after a lost session or a restart, by channel"
    );
    describe_counter!(
        "turnstile_channel_rate_limit_waits_total",
        "REST requests that waited out a 429, by channel"
    );
    describe_counter!(
        "turnstile_channel_skipped_total",
        "Platform messages a channel did not submit (its own, not allowed, other types), by channel and reason"
    );
    describe_gauge!(
        "turnstile_channel_connection",
        "1 for a channel's current connection state (connecting, connected, resuming, catching_up, stopped), else 0; a stop carries its reason"
    );
    describe_counter!(
        "turnstile_inbound_accepted_total",
        "Inbound messages accepted (durably queued), by channel"
    );
    describe_counter!(
        "turnstile_inbound_dropped_total",
        "Inbound messages not turned into a turn, by channel and reason"
    );
    describe_counter!("turnstile_turns_total", "Turns finished, by outcome");
    describe_counter!(
        "turnstile_schedule_runs_total",
        "Scheduled runs this node started or skipped, by schedule"
    );
    describe_counter!(
        "turnstile_quota_refused_total",
        "Messages refused over a [[quotas]] rule, by limit (messages, tokens)"
    );
    describe_histogram!(
        "turnstile_turn_phase_seconds",
        metrics::Unit::Seconds,
        "Turn latency split by phase: queue_wait, assembly, model, persist"
    );
    describe_histogram!(
        "turnstile_turn_seconds",
        metrics::Unit::Seconds,
        "Turn latency from start to published reply (without queue wait)"
    );
    describe_histogram!(
        "turnstile_turn_prompt_tokens",
        "Tokens of the assembled context sent to the model, per turn"
    );
    describe_histogram!(
        "turnstile_turn_completion_tokens",
        "Tokens of the model's answer, per turn"
    );
    describe_histogram!(
        "turnstile_context_budget_ratio",
        "Share of the context budget a turn used"
    );
    describe_counter!(
        "turnstile_context_budget_warnings_total",
        "Turns whose context used more than 90% of the budget"
    );
    describe_counter!("turnstile_compactions_total", "Compactions, by trigger");
    describe_counter!(
        "turnstile_compaction_freed_tokens_total",
        "Tokens removed from contexts by compaction"
    );
    describe_counter!("turnstile_evictions_total", "Sessions evicted, by reason");
    describe_counter!("turnstile_model_errors_total", "Model call errors, by kind");
    describe_counter!(
        "turnstile_assembly_cache_total",
        "Assembly cache lookups, by result (hit, miss)"
    );
    describe_counter!(
        "turnstile_channel_deliveries_total",
        "Replies delivered to a platform, by channel and outcome"
    );
    describe_counter!(
        "turnstile_channel_delivery_retries_total",
        "Delivery attempts that failed and were retried, by channel"
    );
    describe_counter!(
        "turnstile_http_rejected_total",
        "HTTP requests refused before reaching a handler, by reason"
    );
    describe_gauge!(
        "turnstile_disk_bytes",
        metrics::Unit::Bytes,
        "Bytes used under the data dir"
    );
    describe_gauge!("turnstile_sessions", "Stored sessions");
    describe_gauge!("turnstile_live_lanes", "Live session lanes");
    describe_gauge!(
        "turnstile_inbox_depth",
        "Messages accepted but not yet answered"
    );
    describe_gauge!(
        "turnstile_cluster_partition_owned",
        "In a cluster: 1 while this node owns the partition, else 0, by partition"
    );
    describe_gauge!(
        "turnstile_cluster_partition_held",
        "In a cluster: inbox messages admitted here and not yet answered, by partition"
    );
    describe_counter!(
        "turnstile_cluster_appends_total",
        "In a cluster: changelog appends by partition and outcome (ok, retried, fenced, failed)"
    );
    describe_counter!(
        "turnstile_cluster_applied_total",
        "In a cluster: other nodes' turns applied from the changelog, by partition"
    );
    describe_counter!(
        "turnstile_cluster_inbox_total",
        "In a cluster: inbox deliveries by partition and outcome (admitted, queued, answered, \
         dropped, refused, invalid)"
    );
    describe_gauge!(
        "turnstile_mcp_server_up",
        "1 while the MCP server is connected with its tools listed, else 0, by server"
    );
    describe_gauge!(
        "turnstile_mcp_tools",
        "Tools cached from the MCP server, by server"
    );
    describe_counter!(
        "turnstile_mcp_restarts_total",
        "Reconnections of an MCP server after it went down or failed to start, by server"
    );
    describe_counter!(
        "turnstile_mcp_calls_total",
        "MCP tool calls by server and outcome (ok, tool_error, failed, timeout, unavailable)"
    );
    // Counters that may stay at zero for a long time are registered so dashboards see them.
    counter!("turnstile_compactions_total", "trigger" => "manual").absolute(0);
    counter!("turnstile_evictions_total", "reason" => "disk_budget").absolute(0);
}

// ---- inbound ----

/// Most channels whose acceptance counter is kept looked up (they are the configured channel
/// actors, a handful); a channel past it is looked up on each message.
pub const MAX_CACHED_CHANNEL_COUNTERS: usize = 64;

/// A message was accepted through `channel` (the channel actor's name, e.g. `api`).
pub fn inbound_accepted(channel: &str) {
    static BY_CHANNEL: OnceLock<dashmap::DashMap<String, metrics::Counter>> = OnceLock::new();
    let accepted =
        || counter!("turnstile_inbound_accepted_total", "channel" => channel.to_string());
    if !recorder_installed() {
        // Handles taken before this process's recorder is installed would stay no-ops.
        accepted().increment(1);
        return;
    }
    let cached = BY_CHANNEL.get_or_init(dashmap::DashMap::new);
    if let Some(counter) = cached.get(channel) {
        counter.increment(1);
        return;
    }
    let counter = accepted();
    counter.increment(1);
    if cached.len() < MAX_CACHED_CHANNEL_COUNTERS {
        cached.insert(channel.to_string(), counter);
    }
}

/// A message through `channel` did not become a turn: dropped by preflight (`duplicate`,
/// `no_mention`…) or refused (`invalid`, `overloaded`, `shutting_down`, `storage`).
pub fn inbound_dropped(channel: &str, reason: &'static str) {
    counter!(
        "turnstile_inbound_dropped_total",
        "channel" => channel.to_string(),
        "reason" => reason
    )
    .increment(1);
}

/// A message refused over a quota (`limit`: `messages` or `tokens`).
pub fn quota_refused(limit: &'static str) {
    counter!("turnstile_quota_refused_total", "limit" => limit).increment(1);
}

/// The quota's top offenders as Prometheus text, appended to `/metrics` at each scrape:
/// `turnstile_quota_offender_refused{subject}` for the subjects `/v1/stats` lists (at most
/// `quotas::MAX_TOP_OFFENDERS`). Written per scrape rather than registered, because the
/// registry keeps every label set it has seen: subjects that left the top would stay in it,
/// and its cardinality would grow with every sender ever refused.
pub fn quota_offenders_text(top: &[(&str, u64)]) -> String {
    if top.is_empty() {
        return String::new();
    }
    let mut text = String::from(
        "# HELP turnstile_quota_offender_refused Messages refused over a [[quotas]] rule for \
         each of the subjects refused most (sender:, chat:, account:, agent:), since its last \
         reset\n# TYPE turnstile_quota_offender_refused gauge\n",
    );
    for (subject, refused) in top {
        text.push_str("turnstile_quota_offender_refused{subject=\"");
        for c in subject.chars() {
            match c {
                '\\' => text.push_str("\\\\"),
                '"' => text.push_str("\\\""),
                '\n' => text.push_str("\\n"),
                c => text.push(c),
            }
        }
        text.push_str(&format!("\"}} {refused}\n"));
    }
    text
}

// ---- turns ----

/// The tracing span of one turn. Its timing fields are filled in as the turn goes
/// ([`TurnTimer`]), so a log line emitted inside the turn carries the key and the split.
pub fn turn_span(session_key: &str, items: usize) -> Span {
    tracing::info_span!(
        "turn",
        session_key = %session_key,
        items,
        queue_wait_ms = Empty,
        assembly_ms = Empty,
        model_ms = Empty,
        persist_ms = Empty,
        prompt_tokens = Empty,
        completion_tokens = Empty,
    )
}

/// Times the phases of one turn and reports them (metrics, the current span, the
/// context-budget warning). Create it when the turn starts, call the phase methods in order.
#[derive(Debug)]
pub struct TurnTimer {
    started: Instant,
    phase: Instant,
    queue_wait: Duration,
    assembly: Duration,
    model: Duration,
    prompt_tokens: u32,
    completion_tokens: u32,
}

impl TurnTimer {
    /// Starts timing a turn whose oldest item was accepted at `oldest_accepted_ms` (ms since
    /// the epoch; `now_ms` is the current time on the same clock).
    pub fn start(oldest_accepted_ms: u64, now_ms: u64) -> Self {
        let now = Instant::now();
        Self {
            started: now,
            phase: now,
            queue_wait: Duration::from_millis(now_ms.saturating_sub(oldest_accepted_ms)),
            assembly: Duration::ZERO,
            model: Duration::ZERO,
            prompt_tokens: 0,
            completion_tokens: 0,
        }
    }

    fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let d = now.duration_since(self.phase);
        self.phase = now;
        d
    }

    /// The context is assembled: `used` of `total` budget tokens. Warns (log and counter) when
    /// it is over [`BUDGET_WARNING_RATIO`].
    pub fn assembled(&mut self, session_key: &str, used: u32, total: u32) {
        self.assembly = self.lap();
        self.prompt_tokens = used;
        let ratio = if total == 0 {
            1.0
        } else {
            f64::from(used) / f64::from(total)
        };
        match turn_handles() {
            Some(h) => h.budget_ratio.record(ratio),
            None => histogram!("turnstile_context_budget_ratio").record(ratio),
        }
        if ratio > BUDGET_WARNING_RATIO {
            counter!("turnstile_context_budget_warnings_total").increment(1);
            tracing::warn!(
                session_key,
                used,
                total,
                "context uses more than 90% of its token budget"
            );
        }
    }

    /// The model answered.
    pub fn model_done(&mut self) {
        self.model = self.lap();
    }

    /// The turn is committed and its reply (of `completion_tokens` tokens) published: records
    /// every phase.
    pub fn finished(mut self, completion_tokens: u32) {
        let persist = self.lap();
        self.completion_tokens = completion_tokens;
        let total = self.started.elapsed();
        let phases = [self.queue_wait, self.assembly, self.model, persist];
        let handles;
        let h = match turn_handles() {
            Some(h) => h,
            None => {
                handles = TurnHandles::register();
                &handles
            }
        };
        for (histogram, d) in h.phases.iter().zip(phases) {
            histogram.record(d.as_secs_f64());
        }
        h.turn.record(total.as_secs_f64());
        h.prompt_tokens.record(f64::from(self.prompt_tokens));
        h.completion_tokens
            .record(f64::from(self.completion_tokens));
        h.turns_ok.increment(1);
        STATS.record_turn(self.prompt_tokens);
        TURN_LATENCY.record(total);
        let span = Span::current();
        span.record("queue_wait_ms", millis(self.queue_wait));
        span.record("assembly_ms", millis(self.assembly));
        span.record("model_ms", millis(self.model));
        span.record("persist_ms", millis(persist));
        span.record("prompt_tokens", self.prompt_tokens);
        span.record("completion_tokens", self.completion_tokens);
        tracing::debug!("turn finished");
    }
}

/// The metrics every finished turn records, looked up once: each `histogram!` call builds its
/// key and finds it in the recorder's registry, a measurable share of a turn over HTTP.
struct TurnHandles {
    /// queue_wait, assembly, model, persist.
    phases: [metrics::Histogram; 4],
    turn: metrics::Histogram,
    prompt_tokens: metrics::Histogram,
    completion_tokens: metrics::Histogram,
    turns_ok: metrics::Counter,
    budget_ratio: metrics::Histogram,
}

impl TurnHandles {
    fn register() -> Self {
        Self {
            phases: ["queue_wait", "assembly", "model", "persist"]
                .map(|phase| histogram!("turnstile_turn_phase_seconds", "phase" => phase)),
            turn: histogram!("turnstile_turn_seconds"),
            prompt_tokens: histogram!("turnstile_turn_prompt_tokens"),
            completion_tokens: histogram!("turnstile_turn_completion_tokens"),
            turns_ok: counter!("turnstile_turns_total", "outcome" => "ok"),
            budget_ratio: histogram!("turnstile_context_budget_ratio"),
        }
    }
}

/// The cached handles, once this process's Prometheus recorder is installed (handles taken
/// before that would stay no-ops; another application's recorder gets a lookup per turn).
fn turn_handles() -> Option<&'static TurnHandles> {
    static HANDLES: OnceLock<TurnHandles> = OnceLock::new();
    if HANDLES.get().is_none() && !recorder_installed() {
        return None;
    }
    Some(HANDLES.get_or_init(TurnHandles::register))
}

/// Whether this process's Prometheus recorder is installed: metric handles taken before it
/// would stay no-ops, so they are cached only after.
fn recorder_installed() -> bool {
    matches!(PROMETHEUS.get(), Some(Some(_)))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A turn attempt failed (it may be retried).
pub fn turn_failed() {
    counter!("turnstile_turns_total", "outcome" => "failed").increment(1);
}

/// A turn was given up after its retries and answered with an error notice.
pub fn turn_abandoned() {
    counter!("turnstile_turns_total", "outcome" => "abandoned").increment(1);
}

/// A model call failed; `kind` is [`crate::error::ModelError::kind`].
pub fn model_error(kind: &'static str) {
    counter!("turnstile_model_errors_total", "kind" => kind).increment(1);
    STATS.model_errors.fetch_add(1, Ordering::Relaxed);
}

// ---- MCP servers ----

/// `server` is up (connected, tools listed) or not, with `tools` cached.
pub fn mcp_server(server: &str, up: bool, tools: usize) {
    gauge!("turnstile_mcp_server_up", "server" => server.to_string()).set(if up {
        1.0
    } else {
        0.0
    });
    gauge!("turnstile_mcp_tools", "server" => server.to_string()).set(tools as f64);
}

/// `server` is being reconnected.
pub fn mcp_restart(server: &str) {
    counter!("turnstile_mcp_restarts_total", "server" => server.to_string()).increment(1);
}

/// A call of one of `server`'s tools ended with `outcome`.
pub fn mcp_call(server: &str, outcome: &'static str) {
    counter!("turnstile_mcp_calls_total", "server" => server.to_string(), "outcome" => outcome)
        .increment(1);
}

// ---- cluster ----

/// This node gained (`true`) or lost a partition.
pub fn cluster_partition_owned(partition: u32, owned: bool) {
    gauge!("turnstile_cluster_partition_owned", "partition" => partition.to_string())
        .set(if owned { 1.0 } else { 0.0 });
}

/// Inbox messages of `partition` admitted here and not yet answered.
pub fn cluster_partition_held(partition: u32, held: usize) {
    gauge!("turnstile_cluster_partition_held", "partition" => partition.to_string())
        .set(held as f64);
}

/// A changelog append of `partition` ended (`ok`, `fenced`, `failed`) or was `retried`.
pub fn cluster_append(partition: u32, outcome: &'static str) {
    counter!("turnstile_cluster_appends_total", "partition" => partition.to_string(), "outcome" => outcome)
        .increment(1);
}

/// This node recorded a run of schedule `id`: `started` (its turn submitted) or skipped.
/// Counted only where the run was decided, so in a cluster it shows which node ran a job.
/// At most `MAX_SCHEDULES` ids.
pub fn schedule_run(id: &str, started: bool) {
    let outcome = if started { "started" } else { "skipped" };
    counter!("turnstile_schedule_runs_total", "schedule" => id.to_string(), "outcome" => outcome)
        .increment(1);
}

/// Another node's turn of `partition` was applied here.
pub fn cluster_applied(partition: u32) {
    counter!("turnstile_cluster_applied_total", "partition" => partition.to_string()).increment(1);
}

/// A final reply of this node's turn was not sent to the other cluster nodes: their queue
/// was full (a waiter on a node without the partition waits out its timeout).
pub fn cluster_reply_dropped() {
    counter!("turnstile_cluster_replies_dropped_total").increment(1);
}

/// A streaming delta of this node's turn was not sent to the other cluster nodes: their
/// queue was full (their waiters still get the whole reply at the end).
pub fn cluster_delta_dropped() {
    counter!("turnstile_cluster_deltas_dropped_total").increment(1);
}

/// An inbox delivery of `partition` was handled (`admitted`, `queued`, `answered`,
/// `refused`, `invalid`).
pub fn cluster_inbox(partition: u32, outcome: &'static str) {
    counter!("turnstile_cluster_inbox_total", "partition" => partition.to_string(), "outcome" => outcome)
        .increment(1);
}

// ---- context, compaction, disk ----

/// One lookup in the assembly cache.
pub fn assembly_cache(hit: bool) {
    let result = if hit { "hit" } else { "miss" };
    counter!("turnstile_assembly_cache_total", "result" => result).increment(1);
    if hit {
        STATS.cache_hits.fetch_add(1, Ordering::Relaxed);
    } else {
        STATS.cache_misses.fetch_add(1, Ordering::Relaxed);
    }
}

/// A compaction finished (`trigger`: `threshold`, `overflow`, `manual`, `ttl`), shrinking the
/// session's history from `before` to `after` tokens.
pub fn compaction(trigger: &'static str, before: u64, after: u64) {
    counter!("turnstile_compactions_total", "trigger" => trigger).increment(1);
    counter!("turnstile_compaction_freed_tokens_total").increment(before.saturating_sub(after));
    STATS.compactions.fetch_add(1, Ordering::Relaxed);
}

/// A session was evicted (`reason`: `disk_budget`, `prune_after`, `max_sessions`, `empty`).
pub fn eviction(reason: &'static str) {
    counter!("turnstile_evictions_total", "reason" => reason).increment(1);
}

/// Gauges sampled when `/metrics` is scraped.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimeGauges {
    /// Bytes under the data dir.
    pub disk_bytes: u64,
    /// Stored sessions.
    pub sessions: u64,
    /// Live lanes.
    pub live_lanes: u64,
    /// Unanswered messages.
    pub inbox_depth: u64,
}

/// Sets the sampled gauges.
pub fn runtime_gauges(g: RuntimeGauges) {
    // Gauges are f64; these counts stay far below 2^53.
    gauge!("turnstile_disk_bytes").set(g.disk_bytes as f64);
    gauge!("turnstile_sessions").set(g.sessions as f64);
    gauge!("turnstile_live_lanes").set(g.live_lanes as f64);
    gauge!("turnstile_inbox_depth").set(g.inbox_depth as f64);
}

// ---- channels and HTTP ----

/// A reply was handed to the platform (`ok`) or given up after its retries.
pub fn delivery(channel: &str, ok: bool) {
    let outcome = if ok { "delivered" } else { "failed" };
    counter!(
        "turnstile_channel_deliveries_total",
        "channel" => channel.to_string(),
        "outcome" => outcome
    )
    .increment(1);
}

/// A gateway connection was lost and is being opened again.
pub fn channel_reconnect(channel: &str) {
    counter!("turnstile_channel_reconnects_total", "channel" => channel.to_string()).increment(1);
}

/// A gateway session was resumed.
pub fn channel_resume(channel: &str) {
    counter!("turnstile_channel_resumes_total", "channel" => channel.to_string()).increment(1);
}

/// `n` messages were read back by a catch-up.
pub fn channel_caught_up(channel: &str, n: u64) {
    counter!("turnstile_channel_caught_up_total", "channel" => channel.to_string()).increment(n);
}

/// A REST request waited out a rate limit.
pub fn channel_rate_limit_wait(channel: &str) {
    counter!("turnstile_channel_rate_limit_waits_total", "channel" => channel.to_string())
        .increment(1);
}

/// A platform message was not submitted, for `reason`.
pub fn channel_skipped(channel: &str, reason: &'static str) {
    counter!("turnstile_channel_skipped_total", "channel" => channel.to_string(), "reason" => reason)
        .increment(1);
}

/// The connection states [`channel_connection`] reports.
pub const CONNECTION_STATES: [&str; 5] = [
    "connecting",
    "connected",
    "resuming",
    "catching_up",
    "stopped",
];

/// Most channels whose connection state is kept for [`channel_connections`]: channels are few
/// and configured; past it a new name is not kept (its gauges still are).
const MAX_CONNECTION_CHANNELS: usize = 64;

/// A channel's connection as `/v1/stats` and the console show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChannelConnection {
    /// The channel (`discord`, `slack`).
    pub channel: String,
    /// One of [`CONNECTION_STATES`].
    pub state: String,
    /// Why it stopped (empty unless `stopped`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Since when, ms since the epoch.
    pub since_ms: u64,
}

/// The newest connection state of each channel, as [`channel_connection`] reported it (the
/// gauges' own values cannot be read back). Process-wide, as the metrics are.
fn connections() -> &'static std::sync::Mutex<Vec<ChannelConnection>> {
    static STATES: OnceLock<std::sync::Mutex<Vec<ChannelConnection>>> = OnceLock::new();
    STATES.get_or_init(Default::default)
}

/// Every channel's connection state, by channel name.
pub fn channel_connections() -> Vec<ChannelConnection> {
    let mut all = connections()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    all.sort_by(|a, b| a.channel.cmp(&b.channel));
    all
}

/// `channel`'s connection is now in `state` (one of [`CONNECTION_STATES`]); a stop carries
/// its `reason` (e.g. `authentication failed (4004)`), empty otherwise.
pub fn channel_connection(channel: &str, state: &str, reason: &str) {
    {
        let mut all = connections()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = crate::clock::now_ms();
        let full = all.len() >= MAX_CONNECTION_CHANNELS;
        match all.iter_mut().find(|c| c.channel == channel) {
            Some(c) if c.state == state && c.reason == reason => {}
            Some(c) => {
                c.state = state.to_string();
                c.reason = reason.to_string();
                c.since_ms = now;
            }
            None if !full => all.push(ChannelConnection {
                channel: channel.to_string(),
                state: state.to_string(),
                reason: reason.to_string(),
                since_ms: now,
            }),
            None => {}
        }
    }
    for s in CONNECTION_STATES {
        let on = if s == state { 1.0 } else { 0.0 };
        if s == "stopped" {
            if on > 0.0 {
                gauge!("turnstile_channel_connection", "channel" => channel.to_string(), "state" => s, "reason" => reason.to_string()).set(on);
            }
            continue;
        }
        gauge!("turnstile_channel_connection", "channel" => channel.to_string(), "state" => s)
            .set(on);
    }
}

/// A delivery attempt failed and will be retried.
pub fn delivery_retry(channel: &str) {
    counter!("turnstile_channel_delivery_retries_total", "channel" => channel.to_string())
        .increment(1);
}

/// An HTTP request was refused before its handler (`unauthorized`, `rate_limited`).
pub fn http_rejected(reason: &'static str) {
    counter!("turnstile_http_rejected_total", "reason" => reason).increment(1);
}

/// A refused authentication left out of the audit log (over its per-second bound).
pub fn audit_suppressed() {
    counter!("turnstile_audit_suppressed_total").increment(1);
}

// ---- process-wide figures for `turnstile stats` ----

struct ProcessStats {
    turns: AtomicU64,
    context_tokens_sum: AtomicU64,
    context_tokens_max: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    model_errors: AtomicU64,
    compactions: AtomicU64,
}

static STATS: ProcessStats = ProcessStats {
    turns: AtomicU64::new(0),
    context_tokens_sum: AtomicU64::new(0),
    context_tokens_max: AtomicU64::new(0),
    cache_hits: AtomicU64::new(0),
    cache_misses: AtomicU64::new(0),
    model_errors: AtomicU64::new(0),
    compactions: AtomicU64::new(0),
};

/// Latency of every finished turn of this process (as `turnstile_turn_seconds`).
static TURN_LATENCY: LatencyBuckets = LatencyBuckets::new();

/// The turn latencies of this process so far (subtract an older snapshot for an interval).
pub fn turn_latency() -> LatencySnapshot {
    TURN_LATENCY.snapshot()
}

impl ProcessStats {
    fn record_turn(&self, prompt_tokens: u32) {
        let t = u64::from(prompt_tokens);
        self.turns.fetch_add(1, Ordering::Relaxed);
        self.context_tokens_sum.fetch_add(t, Ordering::Relaxed);
        self.context_tokens_max.fetch_max(t, Ordering::Relaxed);
    }
}

/// Turn figures of this process since it started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ProcessTurnStats {
    /// Turns finished.
    pub turns: u64,
    /// Average context (prompt) tokens per turn.
    pub avg_context_tokens: f64,
    /// Largest context of a turn.
    pub max_context_tokens: u64,
    /// Assembly cache hits / lookups; `None` before any lookup.
    pub assembly_cache_hit_rate: Option<f64>,
    /// Failed model calls.
    pub model_errors: u64,
    /// Compactions that replaced transcript entries.
    pub compactions: u64,
}

/// The process-wide turn figures.
pub fn process_stats() -> ProcessTurnStats {
    let turns = STATS.turns.load(Ordering::Relaxed);
    let sum = STATS.context_tokens_sum.load(Ordering::Relaxed);
    let hits = STATS.cache_hits.load(Ordering::Relaxed);
    let lookups = hits + STATS.cache_misses.load(Ordering::Relaxed);
    ProcessTurnStats {
        turns,
        avg_context_tokens: if turns == 0 {
            0.0
        } else {
            sum as f64 / turns as f64
        },
        max_context_tokens: STATS.context_tokens_max.load(Ordering::Relaxed),
        assembly_cache_hit_rate: (lookups > 0).then(|| hits as f64 / lookups as f64),
        model_errors: STATS.model_errors.load(Ordering::Relaxed),
        compactions: STATS.compactions.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_channel_keeps_its_newest_connection_state() {
        let mine = |all: Vec<ChannelConnection>| -> Vec<(String, String, String)> {
            all.into_iter()
                .filter(|c| c.channel.starts_with("unit-conn-"))
                .map(|c| (c.channel, c.state, c.reason))
                .collect()
        };
        channel_connection("unit-conn-b", "connecting", "");
        channel_connection("unit-conn-a", "connected", "");
        channel_connection("unit-conn-b", "stopped", "authentication failed (4004)");
        assert_eq!(
            mine(channel_connections()),
            [
                ("unit-conn-a".into(), "connected".into(), String::new()),
                (
                    "unit-conn-b".into(),
                    "stopped".into(),
                    "authentication failed (4004)".into()
                ),
            ]
        );
    }

    #[test]
    fn the_recorder_renders_turn_metrics() {
        let handle = install_prometheus().expect("first recorder in this test process");
        assert!(
            install_prometheus().is_some(),
            "a second install shares the handle"
        );
        inbound_accepted("unit");
        let mut t = TurnTimer::start(1_000, 1_250);
        t.assembled("k", 95, 100);
        t.model_done();
        t.finished(7);
        let text = handle.render();
        assert!(
            text.contains("turnstile_inbound_accepted_total{channel=\"unit\"}"),
            "{text}"
        );
        assert!(
            text.contains("turnstile_turn_phase_seconds_bucket{phase=\"queue_wait\""),
            "{text}"
        );
        assert!(text.contains("turnstile_context_budget_warnings_total"));
        assert!(process_stats().turns >= 1);
        assert!(process_stats().max_context_tokens >= 95);
        assert!(
            turn_latency().count() >= 1,
            "the turn's latency is readable back"
        );
    }

    #[test]
    fn top_offenders_are_escaped_label_values() {
        assert_eq!(quota_offenders_text(&[]), "");
        let text = quota_offenders_text(&[("sender:slack:U1", 7), ("chat:a\"b\\c\nd", 2)]);
        assert!(
            text.contains("turnstile_quota_offender_refused{subject=\"sender:slack:U1\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("{subject=\"chat:a\\\"b\\\\c\\nd\"} 2\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 4, "HELP, TYPE and one line each");
    }
}
