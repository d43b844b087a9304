//! The official `openai` Python client against Turnstile (`tests/openai_client/*.py`):
//! `/v1/models`, whole and streamed answers with usage, a failed model as a 502 with its
//! error type, and a failed stream as an error. Skipped, with a message, when `python3` or the
//! `openai` package is missing, unless `CI` is `true` (then it fails).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::fake_streaming_model::{use_model, FakeStreamingModel, Script, FAKE_MODEL};
use crate::support::{data_dir, start_server_with, PATIENCE};

/// Whether `python3 -c "import openai"` works; when not, fails under CI, else says why.
fn python_with_openai() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import openai"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true: python3 with the openai package is required (see .ci/run)"
        );
        println!("skipped: python3 with the `openai` package is not installed");
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_reads_our_replies() {
    if !python_with_openai() {
        return;
    }
    let script = Script {
        usage: Some((9, 4)),
        ..Script::text(&["Hello", " from", " the", " fake"])
    };
    let fake = FakeStreamingModel::start(script.clone()).await;
    let base = fake.base_url.clone();
    let server = start_server_with(data_dir(), move |c| use_model(c, &base)).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let dead = format!("http://{}/v1", closed.local_addr().expect("its address"));
    drop(closed);
    let failing = start_server_with(data_dir(), move |c| use_model(c, &dead)).await;

    let script_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/openai_client/check_surface.py"
    );
    let mut child = Command::new("python3")
        .arg(script_path)
        .env("TURNSTILE_BASE_URL", server.url("/v1"))
        .env("TURNSTILE_FAILING_BASE_URL", failing.url("/v1"))
        .env("TURNSTILE_MODEL", FAKE_MODEL)
        .env("TURNSTILE_EXPECTED_TEXT", script.whole())
        .env("TURNSTILE_EXPECTED_USAGE", "9,4")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting python3");
    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("polling python3") {
            break Some(status);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let output = child.wait_with_output().expect("the script's output");
    let report = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let status = status.unwrap_or_else(|| panic!("the script did not finish in time\n{report}"));
    assert!(
        status.success(),
        "the openai client checks failed\n{report}"
    );
    server.stop().await;
    failing.stop().await;
}
