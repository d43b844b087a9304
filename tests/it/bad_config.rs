//! `turnstile serve` with an out-of-range config value: the real binary refuses it with an
//! error naming the key, the value and the allowed range, and exits non-zero (no panic, no
//! abort, no server).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Long enough for a debug binary to start; a binary that accepted the config would run
/// until killed, so the test fails instead of hanging.
const EXIT_DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn serve_refuses_out_of_range_values_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turnstile.toml");
    // The values a tester found aborting or panicking the server.
    for (text, key, value) in [
        (
            "[server]\nevents_buffer = 1099511627776\n",
            "server.events_buffer",
            "1099511627776",
        ),
        (
            "[lanes]\nmax_concurrent_turns = 4611686018427387904\n",
            "lanes.max_concurrent_turns",
            "4611686018427387904",
        ),
        (
            "[storage]\ncache_capacity_bytes = 100\n",
            "storage.cache_capacity_bytes",
            "100",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > EXIT_DEADLINE {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("{key} = {value}: the server started instead of refusing the config");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
        assert_eq!(
            status.code(),
            Some(1),
            "{key} = {value}: {status}; {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        for needle in [key, value, "out of range", "allowed"] {
            assert!(
                stderr.contains(needle),
                "{key}: {needle:?} missing in {stderr}"
            );
        }
        assert!(
            !dir.path().join("data").exists(),
            "nothing is written before the config is valid"
        );
    }
}
