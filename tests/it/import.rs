//! `turnstile import openclaw` through the real binary: imported history older than
//! `prune_after_days` survives the first start (age counts from the import), and keys the
//! HTTP API refuses are refused with a clear message.

use std::path::Path;
use std::process::Command;

use crate::support::{eventually, spawn_binary, PATIENCE};

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openclaw")
}

/// Runs `turnstile import openclaw <dir> --data-dir <data_dir>`: (success, stdout, stderr).
fn import(dir: &Path, data_dir: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["import", "openclaw"])
        .arg(dir)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("running turnstile import");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_old_sessions_survive_the_first_prune_pass() {
    let data = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = import(&fixtures(), data.path());
    assert!(ok, "{stderr}");
    assert!(stdout.contains("imported 2 sessions"), "{stdout}");

    // The fixture's sessions were last updated in 2025, beyond the default 30 days.
    let mut server = spawn_binary(data.path()).await;
    eventually(PATIENCE, "a janitor pass", || async {
        let (_, stats) = server.get("/v1/stats").await;
        match stats["janitor"]["passes"].as_u64() {
            Some(n) if n >= 1 => Ok(()),
            _ => Err(stats.to_string()),
        }
    })
    .await;
    let mut keys: Vec<String> = server
        .sessions()
        .await
        .iter()
        .map(|s| s["session_key"].as_str().unwrap_or_default().to_string())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        ["agent:main:main", "agent:main:telegram:group:-100123"],
        "{}",
        server.log_text()
    );
    let transcript = server.transcript_json("agent:main:main").await.unwrap();
    assert_eq!(transcript.len(), 6);
    server.sigterm();
    assert!(server
        .wait_exit(PATIENCE)
        .await
        .is_some_and(|s| s.success()));
}

#[test]
fn import_refuses_keys_the_api_refuses() {
    let src = tempfile::tempdir().unwrap();
    let mut index = serde_json::Map::new();
    for key in ["", "nul\u{0}key", &"k".repeat(10_000), "agent:main:fine"] {
        index.insert(key.to_string(), serde_json::json!({"sessionId": "s1"}));
    }
    std::fs::write(
        src.path().join("sessions.json"),
        serde_json::Value::Object(index).to_string(),
    )
    .unwrap();
    std::fs::write(
        src.path().join("s1.jsonl"),
        "{\"type\":\"session\",\"version\":3,\"timestamp\":1764469800000}\n",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = import(src.path(), data.path());
    assert!(ok, "{stderr}");
    assert!(stdout.contains("imported 1 sessions"), "{stdout}");
    assert!(stdout.contains("3 refused (bad key)"), "{stdout}");
    for why in ["must not be empty", "control character", "too long"] {
        assert!(stdout.contains(why), "{why:?} missing in {stdout}");
    }
}
