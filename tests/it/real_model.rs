//! A real model: `serve.sh` of the directory `TURNSTILE_REALMODEL_DIR` names (a llama-server
//! build with SmolLM2) started on a free loopback port with a 2,048-token window, and a long
//! session through Turnstile in front of it, every turn answered. Skipped, with a message,
//! when the variable is unset.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::small_window::{chat, long_message, openai_model};
use crate::support::{data_dir, http_client, start_server_with, Api};

/// The real model's window (`-c`).
const CONTEXT: u32 = 2_048;
/// Turns of the long session: enough to fill the window several times over.
const TURNS: usize = 20;
/// Longest wait for one turn: a real small model on a shared CPU takes tens of seconds.
const TURN_PATIENCE: Duration = Duration::from_secs(600);
/// Longest wait for llama-server to load the model.
const STARTUP: Duration = Duration::from_secs(180);

/// `serve.sh` in its own process group; dropping it kills the group (the script and the
/// llama-server it starts).
struct RealServer {
    child: Child,
}

impl Drop for RealServer {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: `kill` has no memory-safety preconditions; the group is our own child's,
            // not yet reaped (we hold its `Child`).
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn start_real(dir: &PathBuf, port: u16) -> RealServer {
    use std::os::unix::process::CommandExt;
    let child = Command::new("sh")
        .arg(dir.join("serve.sh"))
        .arg(port.to_string())
        .arg(CONTEXT.to_string())
        .env("PORT", port.to_string())
        .env("HOST", "127.0.0.1")
        .env("CTX", CONTEXT.to_string())
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("starting serve.sh");
    RealServer { child }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_2048_token_model_answers_every_turn() {
    let Some(dir) = std::env::var_os("TURNSTILE_REALMODEL_DIR").map(PathBuf::from) else {
        println!("skipped: set TURNSTILE_REALMODEL_DIR to a directory with serve.sh");
        return;
    };
    assert!(dir.join("serve.sh").is_file(), "no serve.sh in {dir:?}");
    let port = free_port();
    let _real = start_real(&dir, port);
    let base = format!("http://127.0.0.1:{port}");
    let client = http_client();
    let started = Instant::now();
    loop {
        let ok = client
            .get(format!("{base}/health"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            break;
        }
        assert!(started.elapsed() < STARTUP, "llama-server did not start");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let server = start_server_with(data_dir(), |c| {
        openai_model(c, &format!("{base}/v1"), "smollm2-135m");
        c.model.timeout_ms = 300_000;
        c.server.reply_timeout_ms = TURN_PATIENCE.as_millis() as u64;
    })
    .await;
    let patient = Api {
        base: server.api.base.clone(),
        client: reqwest::Client::builder()
            .no_proxy()
            .timeout(TURN_PATIENCE)
            .build()
            .expect("building the HTTP client"),
    };
    for turn in 0..TURNS {
        let began = Instant::now();
        let (status, reply) = chat(&patient, "real-long", &long_message(turn)).await;
        assert_eq!(status, StatusCode::OK, "turn {turn}: {reply}");
        assert!(
            !reply.trim().is_empty() && !reply.contains("too long for the model"),
            "turn {turn} unanswered: {reply:?}"
        );
        println!(
            "turn {turn}: answered in {:.1} s, {} chars",
            began.elapsed().as_secs_f64(),
            reply.len()
        );
    }
    server.stop().await;
}
