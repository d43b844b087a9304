//! Where an operator command acts: a running server over HTTP, or a data dir opened directly.
//! Both answer with the same JSON shapes, so printing does not care which.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;
use turnstile::secret::Secret;
use turnstile::{Config, Runtime};

/// Attempts to open a data dir whose lock is held (by a server that is stopping).
const LOCK_RETRIES: u32 = 10;
/// Pause between those attempts.
const LOCK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// The default server URL.
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:7878";

/// Where to act, and how to print.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// A running server's base URL (default http://127.0.0.1:7878 unless --data-dir is given).
    #[arg(long, conflicts_with = "data_dir")]
    url: Option<String>,
    /// Open this data dir directly instead (no server may be running on it).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A turnstile.toml, for --data-dir (budgets and other settings).
    #[arg(long, requires = "data_dir")]
    config: Option<PathBuf>,
    /// Environment variable holding the server's API key (sent as a bearer token).
    #[arg(long, default_value = "TURNSTILE_API_KEY")]
    api_key_env: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub(crate) json: bool,
}

/// An open connection to the target.
pub(crate) enum Conn {
    Http {
        client: reqwest::Client,
        base: String,
        key: Option<Secret>,
    },
    Local(Runtime),
}

fn segment(key: &str) -> String {
    utf8_percent_encode(key, NON_ALPHANUMERIC).to_string()
}

impl Target {
    pub(crate) async fn connect(&self) -> anyhow::Result<Conn> {
        if let Some(dir) = &self.data_dir {
            let mut config = match &self.config {
                Some(path) => Config::load(path)?,
                None => Config::default(),
            };
            config.storage.data_dir = dir.clone();
            // Channels are not started by an inspecting runtime, and it replays nothing. A
            // server that has just stopped may hold sled's file lock for a moment: retry briefly.
            let mut attempt = 0;
            let runtime = loop {
                attempt += 1;
                match Runtime::builder()
                    .config(config.clone())
                    .inspect_only()
                    .build()
                    .await
                {
                    Ok(rt) => break rt,
                    Err(e) if attempt < LOCK_RETRIES && e.to_string().contains("acquire lock") => {
                        tokio::time::sleep(LOCK_RETRY_PAUSE).await;
                    }
                    Err(e) => {
                        return Err(anyhow::Error::new(e).context(format!(
                            "cannot open the data dir {} (if a server runs on it, use --url)",
                            dir.display()
                        )))
                    }
                }
            };
            return Ok(Conn::Local(runtime));
        }
        let base = self
            .url
            .clone()
            .unwrap_or_else(|| DEFAULT_URL.to_string())
            .trim_end_matches('/')
            .to_string();
        Ok(Conn::Http {
            client: reqwest::Client::new(),
            base,
            key: Secret::from_env(&self.api_key_env),
        })
    }
}

impl Conn {
    async fn http(&self, method: reqwest::Method, path: &str) -> anyhow::Result<Value> {
        let Conn::Http { client, base, key } = self else {
            bail!("not connected over HTTP");
        };
        let mut request = client.request(method, format!("{base}{path}"));
        if let Some(key) = key {
            request = request.bearer_auth(key.expose());
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("is a server running at {base}? (or use --data-dir)"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .with_context(|| format!("reading the answer of {path}"))?;
        if !status.is_success() {
            let message = body["error"]["message"].as_str().unwrap_or("no details");
            bail!("the server answered {status}: {message}");
        }
        Ok(body)
    }

    pub(crate) async fn stats(&self) -> anyhow::Result<Value> {
        match self {
            Conn::Local(rt) => {
                let mut v = serde_json::to_value(rt.stats()?)?;
                // Turn figures belong to a running server's process, not to a data dir.
                for k in [
                    "turns",
                    "avg_context_tokens",
                    "max_context_tokens",
                    "assembly_cache_hit_rate",
                ] {
                    v[k] = Value::Null;
                }
                Ok(v)
            }
            Conn::Http { .. } => self.http(reqwest::Method::GET, "/v1/stats").await,
        }
    }

    pub(crate) async fn list(&self, after: Option<&str>, limit: usize) -> anyhow::Result<Value> {
        match self {
            Conn::Local(rt) => Ok(serde_json::to_value(rt.sessions(after, limit)?)?),
            Conn::Http { .. } => {
                let mut path = format!("/v1/sessions?limit={limit}");
                if let Some(a) = after {
                    path.push_str(&format!("&after={}", segment(a)));
                }
                self.http(reqwest::Method::GET, &path).await
            }
        }
    }

    pub(crate) async fn show(&self, key: &str) -> anyhow::Result<Value> {
        match self {
            Conn::Local(rt) => match rt.session(key)? {
                Some(s) => Ok(serde_json::to_value(s)?),
                None => bail!("no session {key:?}"),
            },
            Conn::Http { .. } => {
                let path = format!("/v1/sessions/{}", segment(key));
                self.http(reqwest::Method::GET, &path).await
            }
        }
    }

    pub(crate) async fn dump(&self, key: &str) -> anyhow::Result<Value> {
        match self {
            Conn::Local(rt) => match rt.context_dump(key)? {
                Some(a) => Ok(a.dump()),
                None => bail!("no session {key:?}"),
            },
            Conn::Http { .. } => {
                let path = format!("/v1/sessions/{}/context", segment(key));
                self.http(reqwest::Method::GET, &path).await
            }
        }
    }

    pub(crate) async fn compact(&self, key: &str) -> anyhow::Result<Value> {
        match self {
            Conn::Local(rt) => match rt.compact(key).await? {
                Some(c) => Ok(serde_json::to_value(c)?),
                None => bail!("no session {key:?}"),
            },
            Conn::Http { .. } => {
                let path = format!("/v1/sessions/{}/compact", segment(key));
                self.http(reqwest::Method::POST, &path).await
            }
        }
    }

    pub(crate) async fn remove(&self, key: &str) -> anyhow::Result<Value> {
        match self {
            Conn::Local(rt) => match rt.delete_session(key).await? {
                Some(d) => Ok(serde_json::to_value(d)?),
                None => bail!("no session {key:?}"),
            },
            Conn::Http { .. } => {
                let path = format!("/v1/sessions/{}", segment(key));
                self.http(reqwest::Method::DELETE, &path).await
            }
        }
    }

    /// Releases the data dir (flushing it) when it was opened directly.
    pub(crate) async fn close(self) -> anyhow::Result<()> {
        if let Conn::Local(rt) = self {
            rt.shutdown().await?;
        }
        Ok(())
    }
}
