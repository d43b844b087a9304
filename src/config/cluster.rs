//! `[cluster]`: several nodes over NATS JetStream (the `cluster` cargo feature). Absent, the
//! node runs alone, as it always has.

use serde::{Deserialize, Serialize};

use super::{in_range, invalid};
use crate::error::ConfigError;

/// Most `cluster.partitions`: every node renews a lease per partition it owns each
/// `lease_ms / 3`, so the count bounds that work.
pub(crate) const MAX_PARTITIONS: u32 = 4096;

/// Shortest `cluster.lease_ms`: a lease is renewed every third of it, and a renewal is a
/// replicated write that must fit in that time.
pub(crate) const MIN_LEASE_MS: u64 = 500;

/// Longest `cluster.lease_ms` (10 minutes): a dead node's partitions wait this long.
pub(crate) const MAX_LEASE_MS: u64 = 600_000;

/// Longest `cluster.node_id`: it is a key in the nodes bucket and a value in every lease.
pub(crate) const MAX_NODE_ID_CHARS: usize = 64;

/// Most `cluster.nats` URLs.
pub(crate) const MAX_NATS_URLS: usize = 32;

/// Most `cluster.replicas`: each replica of a partition applies its whole changelog, so more
/// copies than this buy no safety worth their work (the changelog itself is replicated).
pub(crate) const MAX_REPLICAS: u32 = 16;

/// `cluster.replicas` when the file does not say: the owner and one standby.
const DEFAULT_REPLICAS: u32 = 2;

fn default_replicas() -> u32 {
    DEFAULT_REPLICAS
}

/// `cluster.snapshot_interval_ms` when the file does not say (5 minutes): how much changelog
/// a partition keeps beyond its snapshot, and how often each owner rewrites a changed one.
const DEFAULT_SNAPSHOT_INTERVAL_MS: u64 = 300_000;

/// Shortest `cluster.snapshot_interval_ms`: each round appends a marker record per owned
/// partition and reads every partition's snapshot head.
pub(crate) const MIN_SNAPSHOT_INTERVAL_MS: u64 = 500;

/// Longest `cluster.snapshot_interval_ms` (a day).
pub(crate) const MAX_SNAPSHOT_INTERVAL_MS: u64 = 86_400_000;

fn default_snapshot_interval_ms() -> u64 {
    DEFAULT_SNAPSHOT_INTERVAL_MS
}

/// `[cluster]`. Every key but `replicas` and `snapshot_interval_ms` is required: a node that joins a cluster must say
/// which and as whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The NATS servers to connect to (`nats://host:port`); the client fails over between
    /// them.
    pub nats: Vec<String>,
    /// This node's name, unique in the cluster: ASCII letters, digits, `_` and `-`.
    pub node_id: String,
    /// How many partitions the session keys hash into; the same on every node.
    pub partitions: u32,
    /// How long a partition lease (and a node's heartbeat) lives unrenewed, in ms; the same
    /// on every node. A dead node's partitions move after at most this long.
    pub lease_ms: u64,
    /// How many nodes keep a copy of each partition's sessions: its owner and `replicas - 1`
    /// standbys (1: the owner alone, the changelog being the other copy). Default 2; the
    /// same on every node. More than the live nodes means every node.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// How often each node snapshots the partitions it owns, in ms (then the changelog is
    /// purged below what every partition's newest snapshot covers). Default 300,000;
    /// 500–86,400,000.
    #[serde(default = "default_snapshot_interval_ms")]
    pub snapshot_interval_ms: u64,
}

impl ClusterConfig {
    /// Reads and validates only the `[cluster]` section of a config file's text, `None` if it
    /// has none: tools that talk to the cluster (`turnstile cluster status`) need nothing
    /// else, and run where the other sections' paths and secrets may not exist.
    pub fn from_config_text(text: &str) -> Result<Option<ClusterConfig>, ConfigError> {
        let mut file: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let Some(section) = file.remove("cluster") else {
            return Ok(None);
        };
        let config: ClusterConfig = section
            .try_into()
            .map_err(|e| ConfigError::Parse(format!("[cluster]: {e}")))?;
        config.validate()?;
        Ok(Some(config))
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range("cluster.partitions", self.partitions, 1..=MAX_PARTITIONS)?;
        in_range(
            "cluster.lease_ms",
            self.lease_ms,
            MIN_LEASE_MS..=MAX_LEASE_MS,
        )?;
        in_range("cluster.replicas", self.replicas, 1..=MAX_REPLICAS)?;
        in_range(
            "cluster.snapshot_interval_ms",
            self.snapshot_interval_ms,
            MIN_SNAPSHOT_INTERVAL_MS..=MAX_SNAPSHOT_INTERVAL_MS,
        )?;
        validate_node_id(&self.node_id)?;
        if self.nats.is_empty() {
            return Err(invalid("cluster.nats", "name at least one nats:// URL"));
        }
        if self.nats.len() > MAX_NATS_URLS {
            return Err(invalid(
                "cluster.nats",
                format!(
                    "{} URLs is too many (at most {MAX_NATS_URLS})",
                    self.nats.len()
                ),
            ));
        }
        for url in &self.nats {
            validate_nats_url(url)?;
        }
        Ok(())
    }
}

fn validate_node_id(id: &str) -> Result<(), ConfigError> {
    if id.is_empty() {
        return Err(invalid("cluster.node_id", "must not be empty"));
    }
    if id.len() > MAX_NODE_ID_CHARS {
        return Err(invalid(
            "cluster.node_id",
            format!(
                "{} characters is too long (at most {MAX_NODE_ID_CHARS})",
                id.len()
            ),
        ));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(invalid(
            "cluster.node_id",
            format!("{id:?} has {bad:?}; use ASCII letters, digits, '_' and '-'"),
        ));
    }
    Ok(())
}

/// `nats://host` or `nats://host:port`, nothing more (no path, no credentials: secrets never
/// go in the config file).
fn validate_nats_url(url: &str) -> Result<(), ConfigError> {
    let bad = |why: &str| invalid("cluster.nats", format!("{url:?}: {why}"));
    let Some(authority) = url.strip_prefix("nats://") else {
        return Err(bad("must start with nats://"));
    };
    if authority.contains(['/', '@', '?', '#']) || authority.chars().any(char::is_whitespace) {
        return Err(bad("must be nats://host:port (no path, user or query)"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, _)) if !host.ends_with(']') && host.contains(':') => (authority, None),
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(bad("has no valid port (1..=65535)")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClusterConfig {
        ClusterConfig {
            nats: vec!["nats://127.0.0.1:4222".into()],
            node_id: "n1".into(),
            partitions: 64,
            lease_ms: 5000,
            replicas: 2,
            snapshot_interval_ms: DEFAULT_SNAPSHOT_INTERVAL_MS,
        }
    }

    fn refused(change: impl FnOnce(&mut ClusterConfig)) -> String {
        let mut c = config();
        change(&mut c);
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn the_example_is_valid() {
        config().validate().unwrap();
    }

    #[test]
    fn the_section_is_read_alone() {
        let text = "[model]\nprovider = \"nonsense\"\n[cluster]\n\
                    nats = [\"nats://127.0.0.1:4222\"]\nnode_id = \"n1\"\n\
                    partitions = 64\nlease_ms = 5000\n";
        assert_eq!(
            ClusterConfig::from_config_text(text).unwrap(),
            Some(config())
        );
        assert_eq!(ClusterConfig::from_config_text("[model]\n").unwrap(), None);
        let bad = ClusterConfig::from_config_text("[cluster]\nnats = []\n").unwrap_err();
        assert!(bad.to_string().contains("[cluster]"), "{bad}");
        let out = text.replace("partitions = 64", "partitions = 0");
        let refused = ClusterConfig::from_config_text(&out).unwrap_err();
        assert!(
            refused.to_string().contains("cluster.partitions"),
            "{refused}"
        );
        assert!(ClusterConfig::from_config_text("not toml [").is_err());
    }

    #[test]
    fn numbers_are_range_checked() {
        for p in [0, MAX_PARTITIONS + 1] {
            assert!(refused(|c| c.partitions = p).contains("cluster.partitions"));
        }
        for ms in [MIN_LEASE_MS - 1, MAX_LEASE_MS + 1] {
            assert!(refused(|c| c.lease_ms = ms).contains("cluster.lease_ms"));
        }
        for r in [0, MAX_REPLICAS + 1] {
            assert!(refused(|c| c.replicas = r).contains("cluster.replicas"));
        }
        for ms in [MIN_SNAPSHOT_INTERVAL_MS - 1, MAX_SNAPSHOT_INTERVAL_MS + 1] {
            assert!(
                refused(|c| c.snapshot_interval_ms = ms).contains("cluster.snapshot_interval_ms")
            );
        }
        let mut edge = config();
        edge.partitions = MAX_PARTITIONS;
        edge.lease_ms = MIN_LEASE_MS;
        edge.replicas = 1;
        edge.validate().unwrap();
    }

    #[test]
    fn node_ids_are_short_plain_ascii() {
        assert!(refused(|c| c.node_id.clear()).contains("must not be empty"));
        assert!(refused(|c| c.node_id = "a".repeat(65)).contains("too long"));
        for bad in ["n 1", "n.1", "n/1", "nö", "n*"] {
            assert!(
                refused(|c| c.node_id = bad.into()).contains("cluster.node_id"),
                "{bad}"
            );
        }
        let mut ok = config();
        ok.node_id = format!("Node_1-{}", "x".repeat(57));
        ok.validate().unwrap();
    }

    #[test]
    fn nats_urls_are_checked() {
        assert!(refused(|c| c.nats.clear()).contains("at least one"));
        assert!(refused(|c| c.nats = vec!["nats://h:1".into(); 33]).contains("too many"));
        for bad in [
            "127.0.0.1:4222",
            "tls://h:4222",
            "nats://",
            "nats://:4222",
            "nats://h:0",
            "nats://h:99999",
            "nats://h:x",
            "nats://u:p@h:4222",
            "nats://h:4222/path",
            "nats://h :4222",
        ] {
            assert!(
                refused(|c| c.nats = vec![bad.into()]).contains("cluster.nats"),
                "{bad}"
            );
        }
        let mut ok = config();
        ok.nats = vec![
            "nats://localhost".into(),
            "nats://[::1]:4222".into(),
            "nats://nats-1.internal:4222".into(),
        ];
        ok.validate().unwrap();
    }
}
