//! `turnstile stats` and `turnstile sessions list|show|dump|compact|rm`.

use clap::Subcommand;
use serde_json::Value;

use super::output::{bytes, cell, table, utc};
use super::target::{Conn, Target};

/// Most sessions one `sessions list` prints.
pub(crate) const MAX_LIST: usize = 1_000;

/// `turnstile sessions …`
#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCmd {
    /// List sessions in key order.
    List {
        /// Start after this session key (paging).
        #[arg(long)]
        after: Option<String>,
        /// How many (at most 1,000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[command(flatten)]
        target: Target,
    },
    /// Show one session.
    Show {
        /// The session key.
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Show the context the session's next turn would send: blocks, dropped blocks and why.
    Dump {
        /// The session key.
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Compact the session now.
    Compact {
        /// The session key.
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Delete the session: record, transcript and unanswered messages.
    Rm {
        /// The session key.
        key: String,
        #[command(flatten)]
        target: Target,
    },
}

/// Runs `f` on a connection to `target`, prints its answer, and closes the connection even
/// when `f` failed.
async fn with_conn<F>(target: &Target, f: F, human: fn(&Value) -> String) -> anyhow::Result<()>
where
    F: for<'c> FnOnce(&'c Conn) -> futures_util::future::BoxFuture<'c, anyhow::Result<Value>>,
{
    let conn = target.connect().await?;
    let result = f(&conn).await;
    conn.close().await?;
    let value = result?;
    if target.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", human(&value));
    }
    Ok(())
}

/// `turnstile stats`.
pub(crate) async fn stats(target: Target) -> anyhow::Result<()> {
    with_conn(&target, |c| Box::pin(c.stats()), human_stats).await
}

/// `turnstile sessions …`.
pub(crate) async fn sessions(cmd: SessionsCmd) -> anyhow::Result<()> {
    match cmd {
        SessionsCmd::List {
            after,
            limit,
            target,
        } => {
            let limit = limit.clamp(1, MAX_LIST);
            with_conn(
                &target,
                move |c| Box::pin(async move { c.list(after.as_deref(), limit).await }),
                human_list,
            )
            .await
        }
        SessionsCmd::Show { key, target } => {
            with_conn(
                &target,
                move |c| Box::pin(async move { c.show(&key).await }),
                human_show,
            )
            .await
        }
        SessionsCmd::Dump { key, target } => {
            with_conn(
                &target,
                move |c| Box::pin(async move { c.dump(&key).await }),
                human_dump,
            )
            .await
        }
        SessionsCmd::Compact { key, target } => {
            with_conn(
                &target,
                move |c| Box::pin(async move { c.compact(&key).await }),
                |v| {
                    format!(
                        "compacted {}: {} → {} tokens\n",
                        cell(&v["session_key"]),
                        cell(&v["tokens_before"]),
                        cell(&v["tokens_after"])
                    )
                },
            )
            .await
        }
        SessionsCmd::Rm { key, target } => {
            with_conn(
                &target,
                move |c| Box::pin(async move { c.remove(&key).await }),
                |v| {
                    format!(
                        "deleted {}: {} transcript entries, {} unanswered messages\n",
                        cell(&v["session_key"]),
                        cell(&v["entries"]),
                        cell(&v["pending_messages"])
                    )
                },
            )
            .await
        }
    }
}

fn human_stats(v: &Value) -> String {
    let rate = v["assembly_cache_hit_rate"]
        .as_f64()
        .map_or_else(|| "-".to_string(), |r| format!("{:.1}%", r * 100.0));
    let rows = vec![
        vec!["sessions".into(), cell(&v["sessions"])],
        vec!["transcript entries".into(), cell(&v["transcript_entries"])],
        vec!["avg session tokens".into(), cell(&v["avg_session_tokens"])],
        vec!["max session tokens".into(), cell(&v["max_session_tokens"])],
        vec!["turns (this server)".into(), cell(&v["turns"])],
        vec!["avg context tokens".into(), cell(&v["avg_context_tokens"])],
        vec!["max context tokens".into(), cell(&v["max_context_tokens"])],
        vec!["compactions".into(), cell(&v["compactions"])],
        vec!["assembly cache hit rate".into(), rate],
        vec![
            "disk use".into(),
            v["disk_bytes"].as_u64().map_or_else(|| "-".into(), bytes),
        ],
        vec!["live lanes".into(), cell(&v["live_lanes"])],
        vec!["queued messages".into(), cell(&v["queued_messages"])],
    ];
    table(&["FIGURE", "VALUE"], &rows)
}

fn session_row(s: &Value) -> Vec<String> {
    vec![
        cell(&s["session_key"]),
        cell(&s["entries"]),
        cell(&s["tokens"]),
        s["bytes"].as_u64().map_or_else(|| "-".into(), bytes),
        cell(&s["compaction_count"]),
        s["updated_at_ms"].as_u64().map_or_else(|| "-".into(), utc),
    ]
}

const SESSION_HEADERS: [&str; 6] = [
    "SESSION",
    "ENTRIES",
    "TOKENS",
    "SIZE",
    "COMPACTIONS",
    "UPDATED",
];

fn human_list(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .map(|a| a.iter().map(session_row).collect())
        .unwrap_or_default();
    if rows.is_empty() {
        return "no sessions\n".into();
    }
    table(&SESSION_HEADERS, &rows)
}

fn human_show(v: &Value) -> String {
    let mut rows = Vec::new();
    if let Some(map) = v.as_object() {
        for (k, value) in map {
            let shown = match (k.as_str(), value.as_u64()) {
                ("updated_at_ms", Some(ms)) => utc(ms),
                ("bytes", Some(n)) => bytes(n),
                _ => cell(value),
            };
            rows.push(vec![k.clone(), shown]);
        }
    }
    table(&["FIELD", "VALUE"], &rows)
}

fn human_dump(v: &Value) -> String {
    let blocks: Vec<Vec<String>> = v["blocks"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|b| {
                    vec![
                        cell(&b["source"]),
                        cell(&b["role"]),
                        cell(&b["priority"]),
                        cell(&b["token_count"]),
                        cell(&b["content"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    let dropped: Vec<Vec<String>> = v["dropped"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| {
                    vec![
                        cell(&d["source"]),
                        cell(&d["seq"]),
                        cell(&d["token_count"]),
                        cell(&d["dropped_by"]),
                        cell(&d["reason"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    let budget = &v["budget"];
    let mut out = format!(
        "context of {}: {} of {} tokens ({} reserved for the answer)\n\n",
        cell(&v["session_key"]),
        cell(&budget["used"]),
        cell(&budget["total"]),
        cell(&budget["reserved"]),
    );
    out.push_str("kept blocks, in order:\n");
    out.push_str(&table(
        &["SOURCE", "ROLE", "PRIORITY", "TOKENS", "CONTENT"],
        &blocks,
    ));
    if !dropped.is_empty() {
        out.push_str("\ndropped:\n");
        out.push_str(&table(
            &["SOURCE", "SEQ", "TOKENS", "DROPPED BY", "REASON"],
            &dropped,
        ));
    }
    if let Some(n) = v["older_entries_not_loaded"].as_u64().filter(|n| *n > 0) {
        out.push_str(&format!(
            "\n{n} older transcript entries not loaded (budget full)\n"
        ));
    }
    out
}
