//! The real `turnstile` binary as a child process: started, waited for, killed, its log read.

use std::fs::File;
use std::io::Read;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tempfile::TempDir;

use super::api::Api;
use super::wait::PATIENCE;

/// `turnstile serve` as a child process. Dropping it kills the child: no process outlives
/// its test.
pub struct ServerProcess {
    pub api: Api,
    /// The base URL, `http://127.0.0.1:<port>`.
    pub url: String,
    /// The data dir it serves.
    pub data_dir: PathBuf,
    child: Child,
    log: PathBuf,
    /// Where the log lives when the test gave no config dir of its own.
    _log_dir: Option<Arc<TempDir>>,
}

impl Deref for ServerProcess {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

/// A port that was free a moment ago. Another process may take it before the child binds it;
/// [`spawn_binary`] then retries with a new one.
pub fn free_port() -> u16 {
    StdTcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("finding a free port")
}

/// Starts `turnstile serve --data-dir <data_dir> --listen 127.0.0.1:<free port>` on the
/// embedded defaults and waits until `/readyz` answers 200.
pub async fn spawn_binary(data_dir: &Path) -> ServerProcess {
    let log_dir = Arc::new(
        tempfile::Builder::new()
            .prefix("turnstile-it-log-")
            .tempdir()
            .expect("creating a log dir"),
    );
    let launch = Launch {
        data_dir,
        config: None,
        config_for: None,
        log_dir: log_dir.path(),
        rust_log: "info".into(),
    };
    launch.run(Some(Arc::clone(&log_dir))).await
}

/// One way of starting the binary; [`Launch::run`] retries on a port taken meanwhile.
struct Launch<'a> {
    data_dir: &'a Path,
    config: Option<PathBuf>,
    /// When set: the config file's text for the address of an attempt, written to `config`
    /// before it; the listen address and the data dir are then the file's alone (no
    /// `--listen`, no `--data-dir`).
    config_for: Option<&'a dyn Fn(SocketAddr) -> String>,
    log_dir: &'a Path,
    rust_log: String,
}

impl Launch<'_> {
    async fn run(self, owned_log_dir: Option<Arc<TempDir>>) -> ServerProcess {
        let mut failures = Vec::new();
        for attempt in 0..5 {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let log = self
                .log_dir
                .join(format!("server-{}-{attempt}.log", addr.port()));
            let stderr = File::create(&log).expect("creating the log file");
            let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
            command.arg("serve");
            if let Some(config) = &self.config {
                command.arg("--config").arg(config);
            }
            match (self.config_for, &self.config) {
                (Some(text_for), Some(path)) => {
                    std::fs::write(path, text_for(addr)).expect("writing the config")
                }
                _ => {
                    command
                        .arg("--data-dir")
                        .arg(self.data_dir)
                        .arg("--listen")
                        .arg(addr.to_string());
                }
            }
            let child = command
                .env("RUST_LOG", &self.rust_log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .expect("starting the turnstile binary");
            let url = format!("http://{addr}");
            let mut server = ServerProcess {
                api: Api::new(url.clone()),
                url,
                data_dir: self.data_dir.to_path_buf(),
                child,
                log,
                _log_dir: owned_log_dir.clone(),
            };
            match server.wait_ready().await {
                Ok(()) => return server,
                // Dropping `server` kills the child before the next attempt.
                Err(why) => {
                    failures.push(format!("attempt {attempt}: {why}\n{}", server.log_text()))
                }
            }
        }
        panic!(
            "the turnstile binary did not become ready:\n{}",
            failures.join("\n")
        );
    }
}

impl ServerProcess {
    /// Starts the binary on `data_dir` with the TOML `config`, written (with the log) into
    /// `config_dir` beside, not inside, the data dir. `TURNSTILE_SERVER_LOG` sets its
    /// `RUST_LOG` (default `warn`).
    pub async fn start(data_dir: &Path, config_dir: &Path, config: &str) -> ServerProcess {
        let config_path = config_dir.join("turnstile.toml");
        std::fs::write(&config_path, config).expect("writing the config");
        let launch = Launch {
            data_dir,
            config: Some(config_path),
            config_for: None,
            log_dir: config_dir,
            rust_log: std::env::var("TURNSTILE_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
        };
        launch.run(None).await
    }

    /// Starts the binary with only `--config <config_dir>/turnstile.toml`, the file being
    /// `config_for(address)`: its `[server] listen` and `[storage] data_dir` are the server's
    /// (as an operator's file would have them). `data_dir` must be the one the text names.
    pub async fn start_from_file(
        data_dir: &Path,
        config_dir: &Path,
        config_for: &dyn Fn(SocketAddr) -> String,
    ) -> ServerProcess {
        let launch = Launch {
            data_dir,
            config: Some(config_dir.join("turnstile.toml")),
            config_for: Some(config_for),
            log_dir: config_dir,
            rust_log: std::env::var("TURNSTILE_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
        };
        launch.run(None).await
    }

    /// SIGTERM, then waits for a graceful exit; SIGKILL if none comes within 20 s.
    pub async fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.sigterm();
        }
        if self.wait_exit(Duration::from_secs(20)).await.is_none() {
            self.kill9();
        }
    }

    /// Waits until `/readyz` answers 200; fails early if the child exits (e.g. its port was
    /// taken).
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        let mut why = String::from("no answer yet");
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("the server exited with {status}"));
            }
            match self
                .client
                .get(self.url("/readyz"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
            {
                Ok(r) if r.status() == StatusCode::OK => return Ok(()),
                Ok(r) => why = format!("/readyz answered {}", r.status()),
                Err(e) => why = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!("not ready within {PATIENCE:?}: {why}"))
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL (`kill -9`), then reaps the child.
    pub fn kill9(&mut self) {
        // `Child::kill` sends SIGKILL on unix; a child already reaped has nothing to kill.
        if let Ok(None) = self.child.try_wait() {
            self.child.kill().expect("sending SIGKILL");
        }
        self.child.wait().expect("reaping the child");
    }

    /// SIGTERM: asks the server to shut down gracefully.
    pub fn sigterm(&self) {
        self.signal(libc::SIGTERM, "SIGTERM");
    }

    /// SIGHUP: asks the server to reload its config file.
    pub fn sighup(&self) {
        self.signal(libc::SIGHUP, "SIGHUP");
    }

    fn signal(&self, signal: libc::c_int, name: &str) {
        let pid = libc::pid_t::try_from(self.pid()).expect("pid fits pid_t");
        // SAFETY: `kill` has no memory-safety preconditions; `pid` is our own child, which is
        // not yet reaped (we hold its `Child`), so the pid cannot have been reused.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({name}): {}", std::io::Error::last_os_error());
    }

    /// Whether the child is still running (not restarted, not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the child to exit, at most `timeout`; `None` if it is still running.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("polling the child") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the server logged so far.
    pub fn log_text(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            let text = self.log_text();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!(
                "--- last lines of the server log ({}) ---",
                self.log.display()
            );
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Runs `turnstile <args>` to completion: (success, stdout + stderr).
pub fn run_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(args)
        .output()
        .expect("running the turnstile binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Bytes allocated under `dir`, as the janitor measures them.
pub fn disk_bytes(dir: &Path) -> u64 {
    turnstile::store::dir_disk_bytes(dir).expect("measuring the data dir")
}
