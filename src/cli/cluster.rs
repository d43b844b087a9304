//! `turnstile cluster status`: the operator's view of a cluster (feature `cluster`) — nodes,
//! partitions per node, lease ages, inbox lag — read from NATS JetStream with only the config
//! file's `[cluster]` section. It joins nothing and writes nothing. `turnstile cluster
//! snapshot` asks every node to snapshot the partitions it owns now and purge the changelog.

use std::path::{Path, PathBuf};

use anyhow::Context;
use turnstile::cluster::{snapshots, status, ClusterStatus, PartitionStatus};
use turnstile::config::ClusterConfig;

use super::output::table;

/// Most partition rows the text output lists unasked (the unowned and lagging ones);
/// `--partitions` lists every partition.
pub(crate) const MAX_LISTED_PARTITIONS: usize = 50;

/// `turnstile cluster …`.
#[derive(clap::Subcommand)]
pub(crate) enum ClusterCmd {
    /// Nodes, partitions per node, lease ages and inbox lag, read from NATS JetStream.
    Status {
        /// A turnstile.toml with a [cluster] section (only that section is read).
        #[arg(long)]
        config: PathBuf,
        /// Print the whole status as JSON.
        #[arg(long)]
        json: bool,
        /// List every partition (otherwise only unowned and lagging ones are listed).
        #[arg(long)]
        partitions: bool,
    },
    /// Asks every live node to snapshot the partitions it owns now, then purge the changelog
    /// below what every partition's newest snapshot covers; prints each node's answer.
    Snapshot {
        /// A turnstile.toml with a [cluster] section (only that section is read).
        #[arg(long)]
        config: PathBuf,
        /// Print the answers as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// How long `turnstile cluster snapshot` waits for the nodes' answers.
const SNAPSHOT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

pub(crate) async fn cluster(command: ClusterCmd) -> anyhow::Result<()> {
    match command {
        ClusterCmd::Status {
            config,
            json,
            partitions,
        } => {
            let config = cluster_section(&config)?;
            let status = status::read(&config).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", render(&status, partitions));
            }
            Ok(())
        }
        ClusterCmd::Snapshot { config, json } => {
            let config = cluster_section(&config)?;
            let live = status::read(&config).await?.nodes.len();
            let reports = snapshots::ask(&config, live, SNAPSHOT_WAIT).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&reports)?);
            } else {
                for r in &reports {
                    println!(
                        "{}: {} partitions snapshotted, {} failed, changelog floor {}",
                        r.node,
                        r.taken.len(),
                        r.failed.len(),
                        r.floor
                            .map_or("none (a partition has no snapshot)".into(), |f| f
                                .to_string())
                    );
                    for (p, why) in &r.failed {
                        println!("  partition {p}: {why}");
                    }
                }
            }
            if reports.len() < live {
                anyhow::bail!("{} of {live} live nodes answered", reports.len());
            }
            Ok(())
        }
    }
}

/// The `[cluster]` section of the file at `path`; an error naming the file without one.
fn cluster_section(path: &Path) -> anyhow::Result<ClusterConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    ClusterConfig::from_config_text(&text)
        .with_context(|| format!("in {}", path.display()))?
        .with_context(|| {
            format!(
                "{} has no [cluster] section: `turnstile cluster status` needs its nats, \
                 partitions and lease_ms",
                path.display()
            )
        })
}

/// The text report: the nodes, a summary, then the partitions when `all` is asked for or
/// some are unowned or lagging (those only, at most [`MAX_LISTED_PARTITIONS`]).
fn render(status: &ClusterStatus, all: bool) -> String {
    let mut out = String::new();
    if status.nodes.is_empty() {
        out.push_str("no live nodes\n");
    } else {
        let rows: Vec<Vec<String>> = status
            .nodes
            .iter()
            .map(|n| {
                vec![
                    n.node_id.clone(),
                    n.heartbeat_age_ms
                        .map(age)
                        .unwrap_or_else(|| "none (stopped?)".into()),
                    n.partitions.to_string(),
                ]
            })
            .collect();
        out.push_str(&table(&["NODE", "HEARTBEAT AGE", "PARTITIONS"], &rows));
    }
    let lag = match status.total_lag() {
        0 => "none".to_string(),
        n => format!(
            "{} in {}",
            counted(n, "inbox message"),
            counted(status.lagging() as u64, "partition")
        ),
    };
    out.push_str(&format!(
        "\npartitions: {} owned, {} unowned (of {}); lag: {lag}\n",
        status.owned(),
        status.unowned,
        status.partitions.len(),
    ));
    let notable = |p: &&PartitionStatus| all || p.owner.is_none() || p.inbox_pending > 0;
    let shown: Vec<&PartitionStatus> = status.partitions.iter().filter(notable).collect();
    if shown.is_empty() {
        return out;
    }
    let limit = if all {
        shown.len()
    } else {
        MAX_LISTED_PARTITIONS
    };
    let rows: Vec<Vec<String>> = shown
        .iter()
        .take(limit)
        .map(|p| {
            vec![
                p.partition.to_string(),
                p.owner.clone().unwrap_or_else(|| "-".into()),
                p.lease_age_ms.map(age).unwrap_or_else(|| "-".into()),
                p.inbox_pending.to_string(),
                p.log_last_seq.to_string(),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&table(
        &[
            "PARTITION",
            "OWNER",
            "LEASE AGE",
            "INBOX PENDING",
            "LOG SEQ",
        ],
        &rows,
    ));
    if shown.len() > limit {
        out.push_str(&format!(
            "… and {} more (--partitions lists every partition)\n",
            shown.len() - limit
        ));
    }
    out
}

/// `n` and `noun`, plural unless one.
fn counted(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// An age in milliseconds, for people.
fn age(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1_000.0)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn partition(p: u32, owner: Option<&str>, pending: u64) -> PartitionStatus {
        PartitionStatus {
            partition: p,
            owner: owner.map(str::to_string),
            lease_age_ms: owner.map(|_| 1_400),
            inbox_pending: pending,
            log_last_seq: 9,
        }
    }

    fn status(partitions: Vec<PartitionStatus>) -> ClusterStatus {
        let heartbeats = BTreeMap::from([("a".to_string(), 300), ("b".to_string(), 2_000)]);
        ClusterStatus::assemble(heartbeats, partitions)
    }

    #[test]
    fn a_healthy_cluster_shows_nodes_and_a_summary_only() {
        let text = render(
            &status(vec![partition(0, Some("a"), 0), partition(1, Some("b"), 0)]),
            false,
        );
        assert_eq!(
            text,
            "NODE  HEARTBEAT AGE  PARTITIONS\n\
             a     300 ms         1\n\
             b     2.0 s          1\n\
             \n\
             partitions: 2 owned, 0 unowned (of 2); lag: none\n"
        );
        let all = render(
            &status(vec![partition(0, Some("a"), 0), partition(1, Some("b"), 0)]),
            true,
        );
        assert!(all.contains("PARTITION  OWNER"), "{all}");
        assert!(all.contains("\n1          b      1.4 s"), "{all}");
    }

    #[test]
    fn unowned_and_lagging_partitions_are_listed_and_bounded() {
        let text = render(
            &status(vec![
                partition(0, Some("a"), 0),
                partition(1, None, 0),
                partition(2, Some("b"), 4),
            ]),
            false,
        );
        assert!(
            text.contains("lag: 4 inbox messages in 1 partition\n"),
            "{text}"
        );
        let rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("PARTITION"))
            .collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[1].starts_with("1  ") && rows[2].starts_with("2  "),
            "{text}"
        );
        let many = (0..MAX_LISTED_PARTITIONS as u32 + 7)
            .map(|p| partition(p, None, 0))
            .collect();
        let text = render(&ClusterStatus::assemble(BTreeMap::new(), many), false);
        assert!(text.starts_with("no live nodes\n"), "{text}");
        assert!(text.ends_with("… and 7 more (--partitions lists every partition)\n"));
    }

    #[test]
    fn a_config_without_the_section_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("turnstile.toml");
        std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:7878\"\n").unwrap();
        let e = cluster_section(&path).unwrap_err().to_string();
        assert!(e.contains("no [cluster] section"), "{e}");
        let missing = cluster_section(&dir.path().join("absent.toml")).unwrap_err();
        assert!(
            missing.to_string().contains("cannot read config"),
            "{missing}"
        );
    }
}
