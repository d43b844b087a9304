//! `[mcp_servers.<name>]`: MCP servers whose tools the model may call (`src/tools/mcp/`).
//!
//! A server is either a child process speaking MCP over its stdio (`command`, `args`, `env`)
//! or a streamable-HTTP endpoint (`url`, with headers whose values come from environment
//! variables, `headers_env`). Its tools reach the model as `<name>__<tool>`, so the server's
//! name must be a plain identifier without `__`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{in_range, invalid, MAX_DURATION_MS};
use crate::error::ConfigError;

/// Most `[mcp_servers.*]` sections: each is a task and maybe a child process.
pub const MAX_MCP_SERVERS: usize = 64;

/// Longest server name: with `__` and the tool it leaves room in a 64-character tool name.
pub const MAX_MCP_SERVER_NAME_CHARS: usize = 24;

/// `[mcp_servers.<name>]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio: the program to start (looked up on `PATH`). Exactly one of `command` and `url`.
    pub command: Option<String>,
    /// stdio: its arguments.
    pub args: Vec<String>,
    /// stdio: environment variables set for it (on top of Turnstile's own environment).
    pub env: BTreeMap<String, String>,
    /// Streamable HTTP: the endpoint, `http://` or `https://` (e.g. `http://127.0.0.1:8000/mcp`).
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request, by header name, each naming the
    /// environment variable that holds its value (e.g. `{ Authorization = "GITHUB_MCP_AUTH" }`
    /// with `GITHUB_MCP_AUTH="Bearer …"`). A variable that is unset or empty makes the
    /// connection fail with an error naming it (the server shows as down).
    pub headers_env: BTreeMap<String, String>,
    /// How long starting the process (or reaching the URL) and the MCP `initialize` handshake
    /// may take, in ms. Default 10,000.
    pub connect_timeout_ms: u64,
    /// How long one `tools/list` (all its pages) may take, in ms. Default 30,000: servers with
    /// hundreds of tools answer slowly, and the list is fetched off the turn's path (at
    /// connect and on `notifications/tools/list_changed`), so waiting costs no turn.
    pub list_timeout_ms: u64,
    /// How long one `tools/call` may take, in ms. Default 60,000; `tools.timeout_ms` bounds
    /// every tool call too, so the smaller of the two applies.
    pub call_timeout_ms: u64,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            headers_env: BTreeMap::new(),
            connect_timeout_ms: 10_000,
            list_timeout_ms: 30_000,
            call_timeout_ms: 60_000,
        }
    }
}

/// Whether `name` is usable as a server name (and so as a tool-name prefix).
fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_MCP_SERVER_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains("__")
        && !name.ends_with('_')
}

/// Checks every `[mcp_servers.*]` section.
pub(super) fn validate(servers: &BTreeMap<String, McpServerConfig>) -> Result<(), ConfigError> {
    if servers.len() > MAX_MCP_SERVERS {
        return Err(invalid(
            "mcp_servers",
            format!(
                "{} servers; at most {MAX_MCP_SERVERS} are allowed",
                servers.len()
            ),
        ));
    }
    for (name, server) in servers {
        if !valid_server_name(name) {
            return Err(invalid(
                &format!("mcp_servers.{name}"),
                format!(
                    "a server name is 1–{MAX_MCP_SERVER_NAME_CHARS} characters of A-Z a-z 0-9 _ -, \
                     without `__` and not ending in `_` (its tools are named `<server>__<tool>`)"
                ),
            ));
        }
        server.validate(name)?;
    }
    Ok(())
}

impl McpServerConfig {
    fn validate(&self, name: &str) -> Result<(), ConfigError> {
        let key = |k: &str| format!("mcp_servers.{name}.{k}");
        match (&self.command, &self.url) {
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(invalid(&key("command"), "must not be empty"));
                }
                if !self.headers_env.is_empty() {
                    return Err(invalid(
                        &key("headers_env"),
                        "only for a streamable-HTTP server (`url`)",
                    ));
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(&key("url"), "an http(s) URL"));
                }
                if !self.args.is_empty() || !self.env.is_empty() {
                    return Err(invalid(
                        &key("args"),
                        "`args` and `env` are only for a stdio server (`command`)",
                    ));
                }
                for (header, var) in &self.headers_env {
                    let name_ok = !header.is_empty()
                        && header
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
                    if !name_ok {
                        return Err(invalid(
                            &key("headers_env"),
                            format!("{header:?} is not an HTTP header name"),
                        ));
                    }
                    if var.is_empty() {
                        return Err(invalid(
                            &key("headers_env"),
                            format!("{header}: name the environment variable holding its value"),
                        ));
                    }
                }
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    &format!("mcp_servers.{name}"),
                    "set either `command` (stdio) or `url` (streamable HTTP), not both",
                ))
            }
            (None, None) => {
                return Err(invalid(
                    &format!("mcp_servers.{name}"),
                    "set `command` (a stdio server) or `url` (a streamable-HTTP server)",
                ))
            }
        }
        for (k, v) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("list_timeout_ms", self.list_timeout_ms),
            ("call_timeout_ms", self.call_timeout_ms),
        ] {
            in_range(&key(k), v, 1..=MAX_DURATION_MS)?;
        }
        Ok(())
    }

    /// `stdio` or `http`, for health lines and metrics.
    pub fn transport(&self) -> &'static str {
        if self.url.is_some() {
            "http"
        } else {
            "stdio"
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn check(toml: &str) -> Result<Config, String> {
        Config::parse(toml).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_both_transports_with_defaults() {
        let c = check(
            r#"
            [mcp_servers.files]
            command = "python3"
            args = ["server.py"]
            env = { ROOT = "/tmp" }

            [mcp_servers.github]
            url = "https://example.invalid/mcp"
            headers_env = { Authorization = "GITHUB_MCP_AUTH" }
            list_timeout_ms = 120000
            "#,
        )
        .unwrap();
        let files = &c.mcp_servers["files"];
        assert_eq!(files.transport(), "stdio");
        assert_eq!(files.connect_timeout_ms, 10_000);
        assert_eq!(files.call_timeout_ms, 60_000);
        let github = &c.mcp_servers["github"];
        assert_eq!(github.transport(), "http");
        assert_eq!(github.list_timeout_ms, 120_000);
        assert_eq!(github.headers_env["Authorization"], "GITHUB_MCP_AUTH");
    }

    #[test]
    fn refuses_bad_sections_naming_the_key() {
        let cases = [
            ("[mcp_servers.a]\n", "mcp_servers.a"),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n",
                "not both",
            ),
            ("[mcp_servers.a]\nurl = \"ftp://h\"\n", "mcp_servers.a.url"),
            (
                "[mcp_servers.a]\ncommand = \" \"\n",
                "mcp_servers.a.command",
            ),
            ("[mcp_servers.\"a__b\"]\ncommand = \"x\"\n", "__"),
            (
                "[mcp_servers.\"a b\"]\ncommand = \"x\"\n",
                "mcp_servers.a b",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nlist_timeout_ms = 0\n",
                "mcp_servers.a.list_timeout_ms",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nheaders_env = { A = \"B\" }\n",
                "mcp_servers.a.headers_env",
            ),
            (
                "[mcp_servers.a]\nurl = \"http://h\"\nheaders_env = { \"A B\" = \"V\" }\n",
                "not an HTTP header name",
            ),
            (
                "[mcp_servers.a]\nurl = \"http://h\"\nargs = [\"x\"]\n",
                "mcp_servers.a.args",
            ),
            ("[mcp_servers.a]\ncommand = \"x\"\ntypo = 1\n", "typo"),
        ];
        for (toml, needle) in cases {
            let err = check(toml).expect_err(toml);
            assert!(err.contains(needle), "{toml}: {err}");
        }
    }
}
