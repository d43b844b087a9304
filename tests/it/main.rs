//! Integration tests: the server over real HTTP on loopback, real sled files in temporary
//! directories, and the real `turnstile` binary as a child process.
//!
//! # Layout
//! - `support` (`tests/support/`, shared by every test binary): servers (in-process and child
//!   process), the API client, the SSE reader, `eventually`, message builders, load;
//!   `support_checks` tests the helpers themselves.
//! - `http_api`: the message → transcript → reply path and the session endpoints; many
//!   sessions at once keep per-session order.
//! - `openai`: `POST /v1/chat/completions`, streaming and not, session by header or `user`.
//! - `openai_requests`: its request fields against a recording fake model server (system
//!   instructions, forwarded parameters, refused fields, client tools, idempotent retries,
//!   case-distinct users), and the official Python client.
//! - `agents`: two agents behind one server — bindings (channel, guild roles), `model`
//!   selecting an agent, each agent's prompt and model reaching a recording fake model, the
//!   agent shown by the session, transcript, dump, `/v1/stats` and `/v1/models` APIs.
//! - `bad_input`: every refusal is a clear 4xx and stores nothing.
//! - `bad_config`: `serve` refuses an out-of-range config value, or a Slack section it cannot
//!   start (a token missing or swapped), with a clear error.
//! - `channel_outage` (`#[ignore]`d, `benches/loadtest/channel_outage.sh`): a 30 s outage of
//!   the binary behind the fake Discord and the fake Slack, caught up, answered once each.
//! - `restart`: transcripts are identical across a graceful restart.
//! - `reload`: SIGHUP and `POST /v1/admin/reload` apply a new quota without a restart (a
//!   running turn finishes), refuse a broken file (the old rules stay), report a new
//!   `listen`/data dir as `restart_required`, and are audited.
//! - `import`: `turnstile import openclaw` history survives the first prune pass; bad keys are
//!   refused.
//! - `compaction`: manual compaction over HTTP.
//! - `delete`: `DELETE` of a session is final, even racing a burst still held by its lane.
//! - `group_memory`: chatter, speakers, summaries and recall of a group chat reach the model.
//! - `kill9`: nothing acknowledged is lost across `kill -9` of the binary.
//! - `shutdown`: SIGTERM stops the binary cleanly and loses nothing.
//! - `queue`: queue modes, admission (429), passivation under load, panicking turns.
//! - `loadtest`: the load driver and `turnstile loadtest`.
//! - `auth`, `callback`, `ops_cli`, `telegram`: bearer auth and limits, webhook callbacks,
//!   the operator CLI, the Telegram channel against a fake Bot API (streaming previews
//!   edited with `editMessageText` too).
//! - `http_edge`: the bounded edge over raw sockets (slow and idle clients closed, the
//!   connection cap with probes still answering, early `413` for `Expect: 100-continue`,
//!   every error in the JSON shape).
//! - `fake_model`: a fake OpenAI-compatible model server (window, overflow shapes, 429s);
//!   `fake_streaming_model`: one that streams, holds chunks at a gate and scripts failures.
//! - `small_window`: a 2,048-token model answers every turn of a long session; a stated
//!   1,000-token limit starves no session.
//! - `rate_limits`: 429 with `Retry-After` backs the model off for every session at once.
//! - `real_model`: a real llama-server (`TURNSTILE_REALMODEL_DIR`), skipped without it.
//! - `streaming`: real token streaming against `FakeStreamingModel` (first chunk before the
//!   model finished, `/v1/events` deltas, usage, finish reasons, 502 without URLs,
//!   `/v1/models`); `openai_client`: the same surface through the official Python client.
//! - `openai_requests`: request fields (instructions, forwarded parameters, refusals naming
//!   the param), client tools, idempotent retries, case-distinct `user` keys.
//! - `mcp`: MCP client tools against real MCP servers (the official Python SDK's, over stdio
//!   and streamable HTTP): a call's result reaches the model, a server killed mid-call, a
//!   slow `tools/list`, a 1 MB result cut to the limit.
//! - `schedules`: `/v1/schedules` (added, refused, run, deleted; a quiet heartbeat), and a
//!   job due while the binary was killed runs exactly once after the restart.
//! - `slack`: the Slack channel against a fake Slack (Web API and Socket Mode websocket):
//!   mentions answered in thread, DMs, threads as sessions, dedupe of redelivered envelopes,
//!   a disconnect mid-burst and restarts of the binary caught up exactly once, 429s backed
//!   off, broadcasts escaped, the HTTP Events API's signature; `slack_threads`: a thread's
//!   first message as its session's starter, through the binary and a recording fake model.
//! - `discord`: the Discord channel against a fake Discord (gateway and REST): the preflight
//!   matrix, replies, reconnects, resumes, catch-up, `kill -9`; `discord_threads`: thread
//!   starters in thread sessions; `discord_pluralkit`: PluralKit reposts against a fake
//!   PluralKit API (member attribution, originals held, restarts).
//! - `ui`: the operator console over plain HTTP (pages, CSP, key, rate limits, the overview's
//!   `/v1/stats` fields); the browser suite is `tests/browser.rs`.

mod agents;
mod auth;
mod bad_config;
mod bad_input;
mod callback;
mod channel_outage;
mod compaction;
mod delete;
mod discord;
mod discord_pluralkit;
mod discord_threads;
mod fake_model;
mod fake_streaming_model;
mod group_memory;
mod http_api;
mod http_edge;
mod import;
mod kill9;
mod loadtest;
mod mcp;
mod openai;
mod openai_client;
mod openai_requests;
mod ops_cli;
mod queue;
mod quotas;
mod rate_limits;
mod real_model;
mod reload;
mod restart;
mod schedules;
mod shutdown;
mod slack;
mod slack_threads;
mod small_window;
mod streaming;
#[path = "../support/mod.rs"]
mod support;
mod support_checks;
mod telegram;
mod ui;
