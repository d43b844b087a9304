//! `turnstile serve` with an out-of-range config value: the real binary refuses it with an
//! error naming the key, the value and the allowed range, and exits non-zero (no panic, no
//! abort, no server). Likewise a `[channels.slack]` section it cannot start: a token's
//! variable unset, the bot token where the app-level token belongs, a bad mode or id.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Long enough for a debug binary to start; a binary that accepted the config would run
/// until killed, so the test fails instead of hanging.
const EXIT_DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn serve_refuses_out_of_range_values_with_a_clear_error() {
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
        let (code, stderr, wrote) = serve_refusing(text, &[]);
        assert_eq!(code, Some(1), "{key} = {value}: {stderr}");
        for needle in [key, value, "out of range", "allowed"] {
            assert!(
                stderr.contains(needle),
                "{key}: {needle:?} missing in {stderr}"
            );
        }
        assert!(!wrote, "nothing is written before the config is valid");
    }
}

/// Runs `serve` on `text` with `env` set; its exit code, its stderr (it must exit by itself,
/// without a panic) and whether it created its data dir.
fn serve_refusing(text: &str, env: &[(&str, &str)]) -> (Option<i32>, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turnstile.toml");
    std::fs::write(&path, text).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > EXIT_DEADLINE {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{text}: the server started instead of refusing the config");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (status.code(), stderr, dir.path().join("data").exists())
}

#[test]
fn serve_refuses_a_slack_section_it_cannot_start_with_a_clear_error() {
    let bot = "TURNSTILE_IT_BAD_CONFIG_SLACK_BOT";
    let app = "TURNSTILE_IT_BAD_CONFIG_SLACK_APP";
    let unset = "TURNSTILE_IT_BAD_CONFIG_SLACK_UNSET";
    let section =
        format!("[channels.slack]\nbot_token_env = \"{bot}\"\napp_token_env = \"{app}\"\n");
    for (text, env, needles) in [
        // The bot token's variable is not set.
        (
            format!("[channels.slack]\nbot_token_env = \"{unset}\"\n"),
            vec![],
            vec!["channels.slack", unset, "not set"],
        ),
        // Socket Mode without the app-level token.
        (
            format!("[channels.slack]\nbot_token_env = \"{bot}\"\napp_token_env = \"{unset}\"\n"),
            vec![(bot, "xoxb-1")],
            vec!["channels.slack", "socket", unset, "not set"],
        ),
        // The bot token where the app-level token belongs.
        (
            section.clone(),
            vec![(bot, "xoxb-1"), (app, "xoxb-2")],
            vec![
                "channels.slack.app_token_env",
                app,
                "xapp-",
                "connections:write",
            ],
        ),
        // `http` mode without the signing secret.
        (
            format!("{section}mode = \"http\"\nsigning_secret_env = \"{unset}\"\n"),
            vec![(bot, "xoxb-1")],
            vec!["channels.slack", "http", unset, "not set"],
        ),
        // Values the config itself refuses.
        (
            "[channels.slack]\nmode = \"rtm\"\n".to_string(),
            vec![],
            vec!["rtm", "socket", "http"],
        ),
        (
            "[channels.slack.channels.general]\nrequire_mention = false\n".to_string(),
            vec![],
            vec![
                "channels.slack.channels.general",
                "not a Slack conversation id",
            ],
        ),
        (
            "[channels.slack]\napi_base = \"slack.com/api\"\n".to_string(),
            vec![],
            vec!["channels.slack.api_base", "http(s) URL"],
        ),
    ] {
        let (code, stderr, _) = serve_refusing(&text, &env);
        assert_eq!(code, Some(1), "{text}: {stderr}");
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{text}: {needle:?} missing in {stderr}"
            );
        }
    }
}
