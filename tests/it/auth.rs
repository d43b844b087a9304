//! Auth, rate limits and body limits over real HTTP; the binary's refusal to listen off
//! loopback without a key.

use reqwest::StatusCode;

use crate::support::{channel_message, config, env_var, TestServer};

#[tokio::test]
async fn a_configured_key_is_required_everywhere_but_the_probes() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.api_key_env = env_var("correct horse battery staple");
    let server = TestServer::with_config(c).await;
    let http = reqwest::Client::new();
    let url = &server.base;

    for path in ["/v1/sessions", "/metrics", "/v1/stats"] {
        let r = http.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized");
    }
    let wrong = http
        .get(format!("{url}/v1/sessions"))
        .bearer_auth("correct horse battery stapl")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let post = http
        .post(format!("{url}/v1/messages"))
        .json(&channel_message("webhook", "c1", "m1", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::UNAUTHORIZED, "nothing accepted");

    for path in ["/v1/sessions", "/metrics", "/v1/stats"] {
        let r = http
            .get(format!("{url}{path}"))
            .bearer_auth("correct horse battery staple")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    for path in ["/healthz", "/readyz"] {
        let r = http.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path} needs no key");
    }
    server.stop().await;
}

#[tokio::test]
async fn loopback_without_a_key_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.api_key_env = "TURNSTILE_IT_SURELY_UNSET".into();
    let server = TestServer::with_config(c).await;
    let r = reqwest::get(format!("{}/v1/sessions", server.base))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn over_the_rate_limit_gets_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.rate_limit.requests_per_second = 1;
    c.server.rate_limit.burst = 2;
    let server = TestServer::with_config(c).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/sessions", server.base);
    assert_eq!(
        http.get(&url).send().await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        http.get(&url).send().await.unwrap().status(),
        StatusCode::OK
    );
    let limited = http.get(&url).send().await.unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    let body: serde_json::Value = limited.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    let probe = http
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(probe.status(), StatusCode::OK, "probes are not limited");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    assert_eq!(
        http.get(&url).send().await.unwrap().status(),
        StatusCode::OK,
        "the bucket refills"
    );
    server.stop().await;
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.max_body_bytes = 1_024;
    let server = TestServer::with_config(c).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.base))
        .header("content-type", "application/json")
        .body(channel_message("webhook", "c", "m", &"x".repeat(2_000)).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    server.stop().await;
}

#[test]
fn the_binary_refuses_a_public_address_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("TURNSTILE_API_KEY")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0"),
        "{stderr}"
    );
    assert!(stderr.contains("TURNSTILE_API_KEY"), "{stderr}");
}

#[tokio::test]
async fn the_library_server_refuses_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.api_key_env = "TURNSTILE_IT_SURELY_UNSET".into();
    let runtime = turnstile::Runtime::builder()
        .config(c)
        .build()
        .await
        .unwrap();
    // Bound but never connected to: only the address matters.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let err = turnstile::server::serve(listener, runtime.clone(), async {})
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    runtime.shutdown().await.unwrap();
}

/// The audit log (issue 44): admin actions and refused keys are recorded with the time, the
/// key's fingerprint (never the key), the client and the target, read back as JSON lines —
/// and they survive a restart.
#[tokio::test]
async fn admin_actions_and_refused_keys_are_audited() {
    const KEY: &str = "an audit key of some length";
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.api_key_env = env_var(KEY);
    let server = TestServer::with_config(c.clone()).await;
    let http = reqwest::Client::new();
    let url = server.base.clone();

    let wrong = http
        .get(format!("{url}/v1/sessions"))
        .bearer_auth("a guessed key")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let compact = http
        .post(format!("{url}/v1/sessions/agent%3Amain%3Anone/compact"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(compact.status(), StatusCode::NOT_FOUND);
    let delete = http
        .delete(format!("{url}/v1/sessions/agent%3Amain%3Anone"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    let delete_status = delete.status().as_u16();
    // Reads are not audited.
    let _ = http
        .get(format!("{url}/v1/stats"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();

    let read = |url: String| {
        let http = http.clone();
        async move {
            let r = http
                .get(format!("{url}/v1/admin/audit"))
                .bearer_auth(KEY)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()["content-type"], "application/x-ndjson");
            let text = r.text().await.unwrap();
            text.lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .collect::<Vec<_>>()
        }
    };
    let records = read(url.clone()).await;
    let actions: Vec<&str> = records
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["auth.refused", "session.compact", "session.delete"],
        "{records:?}"
    );
    assert_eq!(records[0]["target"], "GET /v1/sessions");
    assert_eq!(records[1]["target"], "agent:main:none");
    assert_eq!(records[1]["status"], 404);
    assert_eq!(records[2]["status"], delete_status);
    let text = serde_json::to_string(&records).unwrap();
    assert!(
        !text.contains(KEY) && !text.contains("a guessed key"),
        "{text}"
    );
    let (guessed, right) = (
        &records[0]["key_fingerprint"],
        &records[1]["key_fingerprint"],
    );
    assert!(guessed.as_str().unwrap().starts_with("sha256:"));
    assert_ne!(guessed, right);
    assert_eq!(records[1]["key_fingerprint"], records[2]["key_fingerprint"]);
    assert!(records[0]["client"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    assert!(records
        .windows(2)
        .all(|w| w[0]["id"].as_u64() < w[1]["id"].as_u64()));
    let after = records[0]["id"].as_u64().unwrap();
    let page = http
        .get(format!("{url}/v1/admin/audit?after={after}&limit=1"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(page.lines().count(), 1);
    assert!(page.contains("session.compact"), "{page}");
    let tail = http
        .get(format!("{url}/v1/admin/audit?tail=2"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let tail: Vec<&str> = tail.lines().collect();
    assert_eq!(tail.len(), 2);
    assert!(tail[0].contains("session.compact") && tail[1].contains("session.delete"));
    server.stop().await;

    let server = TestServer::with_config(c).await;
    let again = read(server.base.clone()).await;
    assert_eq!(again.len(), 3, "kept across a restart: {again:?}");
    server.stop().await;
}
