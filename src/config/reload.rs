//! Config reload (`SIGHUP`, `POST /v1/admin/reload`): which settings change at run time, in
//! one place.
//!
//! A reload reads the file `serve --config` named ([`ConfigFile`]), validates it as start-up
//! does, and compares it with the settings in force ([`plan`]): a changed setting in
//! [`RELOADABLE`] is applied (the runtime swaps what reads it: `runtime/reload.rs`), any other
//! changed setting is reported as needing a restart and left as it is. Settings are named
//! `section.key` (`server.listen`, `preflight.allow_from`), or by the section alone for the
//! array sections (`quotas`, `schedules`, `bindings`) and one level down for maps
//! (`agents.<id>`, `mcp_servers.<name>`, `channels.telegram`).
//!
//! Why these are the reloadable ones: each is read per message or per tick from a holder the
//! runtime can swap whole. Quota rules are matched per message (`quotas/`, their usage stays);
//! the preflight policy is consulted per message (`inbound/preflight/`, its dedupe and mention
//! memory stay); the config's `[[schedules]]` are synced into the stored jobs exactly as at
//! start (`schedules/`). Everything else is read once while the runtime is built (sockets,
//! sled, actors, models and their clients, channels, caches sized at start), so a change to it
//! needs a restart.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::Config;
use crate::error::ConfigError;

/// The settings a reload applies; every other changed setting needs a restart.
pub const RELOADABLE: &[&str] = &[
    "quotas",
    "schedules",
    "preflight.bot_user_ids",
    "preflight.require_mention",
    "preflight.allow_bots",
    "preflight.dm_policy",
    "preflight.group_policy",
    "preflight.allow_from",
    "preflight.group_allow_from",
    "preflight.group_member_allow_from",
    "preflight.mention_patterns",
    "preflight.ignore_other_mentions",
    "preflight.channels",
];

/// Sections whose keys are named one by one (`section.key`); the array sections are named
/// whole.
fn named_by_key(section: &str) -> bool {
    !matches!(section, "quotas" | "schedules" | "bindings")
}

/// Where the running config came from: the file `serve --config` read, and the command-line
/// options that override it (they keep overriding it at every reload).
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// The file.
    pub path: PathBuf,
    /// `--data-dir`, overriding `[storage] data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `--listen`, overriding `[server] listen`.
    pub listen: Option<SocketAddr>,
}

impl ConfigFile {
    /// Reads and validates the file ([`Config::load`]), then applies the overrides: what
    /// `serve` starts with, and what a reload compares with the settings in force.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let mut config = Config::load(&self.path)?;
        if let Some(dir) = &self.data_dir {
            config.storage.data_dir = dir.clone();
        }
        if let Some(addr) = self.listen {
            config.server.listen = addr;
        }
        Ok(config)
    }
}

/// What a reload would do (and, once applied, did).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadPlan {
    /// Changed settings applied now, in name order.
    pub applied: Vec<String>,
    /// Changed settings that take effect only at a restart, in name order.
    pub restart_required: Vec<String>,
}

impl ReloadPlan {
    /// Whether the file says what is in force.
    pub fn unchanged(&self) -> bool {
        self.applied.is_empty() && self.restart_required.is_empty()
    }

    /// One line for logs and the audit log: `applied: a, b; restart required: c`.
    pub fn summary(&self) -> String {
        if self.unchanged() {
            return "unchanged".into();
        }
        let list = |names: &[String]| {
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        format!(
            "applied: {}; restart required: {}",
            list(&self.applied),
            list(&self.restart_required)
        )
    }
}

/// Compares the settings in force (`running`) with the file's (`new`): which changed settings
/// a reload applies and which need a restart.
pub fn plan(running: &Config, new: &Config) -> Result<ReloadPlan, ConfigError> {
    let mut plan = ReloadPlan::default();
    for name in changed(running, new)? {
        if RELOADABLE.contains(&name.as_str()) {
            plan.applied.push(name);
        } else {
            plan.restart_required.push(name);
        }
    }
    Ok(plan)
}

/// `running` with the settings `plan` applies taken from `new`: the settings in force after
/// the reload (a setting that needs a restart keeps its running value).
pub fn merge(running: &Config, new: &Config, plan: &ReloadPlan) -> Config {
    let mut merged = running.clone();
    for name in &plan.applied {
        take_setting(&mut merged, new, name);
    }
    merged
}

/// Copies the reloadable setting `name` from `new` into `into`; false for a name not in
/// [`RELOADABLE`].
fn take_setting(into: &mut Config, new: &Config, name: &str) -> bool {
    let (p, n) = (&mut into.preflight, &new.preflight);
    match name {
        "quotas" => into.quotas = new.quotas.clone(),
        "schedules" => into.schedules = new.schedules.clone(),
        "preflight.bot_user_ids" => p.bot_user_ids = n.bot_user_ids.clone(),
        "preflight.require_mention" => p.require_mention = n.require_mention,
        "preflight.allow_bots" => p.allow_bots = n.allow_bots,
        "preflight.dm_policy" => p.dm_policy = n.dm_policy,
        "preflight.group_policy" => p.group_policy = n.group_policy,
        "preflight.allow_from" => p.allow_from = n.allow_from.clone(),
        "preflight.group_allow_from" => p.group_allow_from = n.group_allow_from.clone(),
        "preflight.group_member_allow_from" => {
            p.group_member_allow_from = n.group_member_allow_from.clone()
        }
        "preflight.mention_patterns" => p.mention_patterns = n.mention_patterns.clone(),
        "preflight.ignore_other_mentions" => p.ignore_other_mentions = n.ignore_other_mentions,
        "preflight.channels" => p.channels = n.channels.clone(),
        _ => return false,
    }
    true
}

/// The names of the settings that differ, in name order. Compared as serialised (the form the
/// file has), so every setting is covered without a list to keep up to date.
fn changed(a: &Config, b: &Config) -> Result<Vec<String>, ConfigError> {
    let (a, b) = (as_object(a)?, as_object(b)?);
    let mut names = Vec::new();
    for section in keys(&a, &b) {
        let (x, y) = (a.get(&section), b.get(&section));
        if x == y {
            continue;
        }
        match (x, y) {
            (Some(Value::Object(x)), Some(Value::Object(y))) if named_by_key(&section) => {
                for key in keys(x, y) {
                    if x.get(&key) != y.get(&key) {
                        names.push(format!("{section}.{key}"));
                    }
                }
            }
            _ => names.push(section),
        }
    }
    names.sort();
    Ok(names)
}

/// The config as a JSON object. It cannot fail for a config that was loaded (its maps have
/// string keys); if it did, comparing nothing would hide every change, so it is an error.
fn as_object(config: &Config) -> Result<serde_json::Map<String, Value>, ConfigError> {
    match serde_json::to_value(config) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ConfigError::Invalid(
            "the config did not serialise to a table".into(),
        )),
        Err(e) => Err(ConfigError::Invalid(format!(
            "the config could not be compared: {e}"
        ))),
    }
}

/// The keys of either map, in order, once each.
fn keys(
    a: &serde_json::Map<String, Value>,
    b: &serde_json::Map<String, Value>,
) -> std::collections::BTreeSet<String> {
    a.keys().chain(b.keys()).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(text).expect("a valid config")
    }

    const QUOTA: &str = "[[quotas]]\nmatch = { sender = \"*\" }\nmessages_per_minute = 5\n";

    #[test]
    fn the_same_file_is_unchanged() {
        let a = parse(QUOTA);
        let plan = plan(&a, &a.clone()).unwrap();
        assert!(plan.unchanged(), "{plan:?}");
        assert_eq!(plan.summary(), "unchanged");
    }

    #[test]
    fn a_quota_change_is_applied() {
        let a = parse(QUOTA);
        let b = parse(&QUOTA.replace("= 5", "= 1"));
        let p = plan(&a, &b).unwrap();
        assert_eq!(p.applied, ["quotas"]);
        assert!(p.restart_required.is_empty());
        let merged = merge(&a, &b, &p);
        assert_eq!(merged.quotas[0].messages_per_minute, Some(1));
        assert!(plan(&merged, &b).unwrap().unchanged());
    }

    #[test]
    fn listen_and_data_dir_need_a_restart_and_stay_as_they_run() {
        let a = parse("[server]\nlisten = \"127.0.0.1:7000\"\n[storage]\ndata_dir = \"a\"\n");
        let b = parse(&format!(
            "[server]\nlisten = \"127.0.0.1:7001\"\n[storage]\ndata_dir = \"b\"\n\
             [preflight]\nallow_from = [\"telegram:1\"]\n{QUOTA}"
        ));
        let p = plan(&a, &b).unwrap();
        assert_eq!(p.applied, ["preflight.allow_from", "quotas"]);
        assert_eq!(p.restart_required, ["server.listen", "storage.data_dir"]);
        let merged = merge(&a, &b, &p);
        assert_eq!(merged.server.listen, a.server.listen);
        assert_eq!(merged.storage.data_dir, a.storage.data_dir);
        assert_eq!(merged.preflight.allow_from, ["telegram:1"]);
        // Still pending at the next reload of the same file: the restart has not happened.
        let again = plan(&merged, &b).unwrap();
        assert!(again.applied.is_empty());
        assert_eq!(
            again.restart_required,
            ["server.listen", "storage.data_dir"]
        );
        assert_eq!(
            again.summary(),
            "applied: none; restart required: server.listen, storage.data_dir"
        );
    }

    #[test]
    fn maps_and_optional_sections_are_named_one_level_down() {
        let a = parse("");
        let b = parse(
            "[model]\nmodel = \"other\"\n[agents.helper]\n\
             [[schedules]]\nid = \"daily\"\nevery_ms = 60000\nmessage = \"hi\"\n\
             [preflight]\ndedupe_ttl_ms = 60000\n",
        );
        let p = plan(&a, &b).unwrap();
        assert_eq!(p.applied, ["schedules"]);
        assert_eq!(
            p.restart_required,
            ["agents", "model.model", "preflight.dedupe_ttl_ms"],
            "a map section absent before is named whole"
        );
    }

    #[test]
    fn every_reloadable_setting_is_taken_by_merge() {
        let new = parse(
            "[preflight]\nbot_user_ids = [\"telegram:9\"]\nrequire_mention = false\n\
             allow_bots = \"mentions\"\ndm_policy = \"allowlist\"\ngroup_policy = \"allowlist\"\n\
             allow_from = [\"telegram:1\"]\ngroup_allow_from = [\"telegram:-5\"]\n\
             group_member_allow_from = [\"telegram:2\"]\nmention_patterns = [\"bot\"]\n\
             ignore_other_mentions = true\n[preflight.channels.telegram]\nrequire_mention = true\n\
             [[schedules]]\nid = \"daily\"\nevery_ms = 60000\nmessage = \"hi\"\n",
        );
        let new = Config {
            quotas: parse(QUOTA).quotas,
            ..new
        };
        let running = Config::default();
        let p = plan(&running, &new).unwrap();
        let mut expected: Vec<&str> = RELOADABLE.to_vec();
        expected.sort_unstable();
        assert_eq!(p.applied, expected, "the test config changes every setting");
        assert!(p.restart_required.is_empty(), "{p:?}");
        assert!(plan(&merge(&running, &new, &p), &new).unwrap().unchanged());
        for name in RELOADABLE {
            assert!(take_setting(&mut Config::default(), &new, name), "{name}");
        }
        assert!(!take_setting(&mut Config::default(), &new, "server.listen"));
    }

    #[test]
    fn the_overrides_win_over_the_file() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("turnstile.toml");
        std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:7000\"\n").expect("writing");
        let file = ConfigFile {
            path: path.clone(),
            data_dir: Some("cli-dir".into()),
            listen: Some("127.0.0.1:7100".parse().expect("an address")),
        };
        let config = file.load().expect("a valid file");
        assert_eq!(config.server.listen.port(), 7100);
        assert_eq!(config.storage.data_dir, PathBuf::from("cli-dir"));
        std::fs::write(&path, "[server]\nlisten = 7\n").expect("writing");
        assert!(matches!(file.load(), Err(ConfigError::Parse(_))));
    }
}
