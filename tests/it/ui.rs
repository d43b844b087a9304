//! The operator console over plain HTTP (the browser suite is `tests/browser.rs`): the pages
//! and assets need no key but carry a strict CSP, the data they read still needs the key, the
//! console is rate limited like the API, and `/v1/stats` gained its overview fields without
//! losing any.

use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

use crate::support::{channel_message, config, env_var, eventually_some, TestServer};

const PAGES: &[&str] = &[
    "/",
    "/ui",
    "/ui/sessions",
    "/ui/sessions/agent%3Amain%3Atelegram%3Agroup%3A-1",
    "/ui/assets/console.js",
    "/ui/assets/console.css",
    "/ui/assets/icon.svg",
];

#[tokio::test]
async fn pages_need_no_key_but_the_data_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.api_key_env = env_var("console key");
    let server = TestServer::with_config(c).await;
    let http = reqwest::Client::new();
    for path in PAGES {
        let r = http
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let csp = r.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
        assert!(
            r.headers().get("set-cookie").is_none(),
            "{path} sets a cookie"
        );
        let etag = r.headers()["etag"].clone();
        let again = http
            .get(format!("{}{path}", server.base))
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
    }
    let missing = http
        .get(format!("{}/ui/assets/nope.js", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    for path in ["/v1/stats", "/v1/stats/history", "/v1/sessions"] {
        let r = http
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
        let ok = http
            .get(format!("{}{path}", server.base))
            .bearer_auth("console key")
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), StatusCode::OK, "{path}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_console_is_rate_limited_like_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.rate_limit.requests_per_second = 1;
    c.server.rate_limit.burst = 2;
    let server = TestServer::with_config(c).await;
    let http = reqwest::Client::new();
    let url = format!("{}/ui", server.base);
    for _ in 0..2 {
        assert_eq!(
            http.get(&url).send().await.unwrap().status(),
            StatusCode::OK
        );
    }
    let limited = http.get(&url).send().await.unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.headers().contains_key("retry-after"));
    server.stop().await;
}

#[tokio::test]
async fn stats_keep_their_fields_and_gain_the_overview_ones() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::with_config(config(dir.path())).await;
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/messages", server.base))
        .json(&channel_message("webhook", "ui-1", "m1", "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let url = server.base.clone();
    let stats: Value = eventually_some(
        Duration::from_secs(60),
        "the turn and a janitor pass to be counted",
        || {
            let http = http.clone();
            let url = url.clone();
            async move {
                let v: Value = http
                    .get(format!("{url}/v1/stats"))
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                // The janitor's first pass runs beside the turn, not before it.
                (v["turns"].as_u64()? >= 1
                    && v["queued_messages"] == 0
                    && v["janitor"]["passes"].as_u64()? >= 1)
                    .then_some(v)
            }
        },
    )
    .await;
    for field in [
        "sessions",
        "transcript_entries",
        "avg_session_tokens",
        "max_session_tokens",
        "compactions",
        "turns",
        "avg_context_tokens",
        "max_context_tokens",
        "assembly_cache_hit_rate",
        "disk_bytes",
        "live_lanes",
        "queued_messages",
    ] {
        assert!(stats.get(field).is_some(), "{field} is gone: {stats}");
    }
    let budget = config(dir.path()).storage;
    assert_eq!(stats["max_disk_bytes"], budget.max_disk_bytes);
    assert_eq!(
        stats["high_water_bytes"].as_u64(),
        Some((budget.max_disk_bytes as f64 * budget.high_water) as u64)
    );
    for field in ["model_errors", "compactions_run", "evictions"] {
        assert!(stats[field].is_u64(), "{field}: {stats}");
    }
    assert!(stats["channels"].is_array(), "{stats}");
    assert!(stats["janitor"]["passes"].as_u64() >= Some(1), "{stats}");
    assert!(
        stats["janitor"]["last_pass_at_ms"].as_u64() > Some(0),
        "{stats}"
    );

    // The sampler fills the history every 2 s; its samples account for the turns.
    let history: Value = eventually_some(Duration::from_secs(60), "two history samples", || {
        let http = http.clone();
        let url = url.clone();
        async move {
            let v: Value = http
                .get(format!("{url}/v1/stats/history"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (v["samples"].as_array()?.len() >= 2).then_some(v)
        }
    })
    .await;
    assert_eq!(history["interval_seconds"], 2.0);
    let samples = history["samples"].as_array().unwrap();
    assert!(samples.len() <= history["max_samples"].as_u64().unwrap() as usize);
    let recent = &stats["recent"];
    assert!(
        recent.is_null() || recent["window_seconds"].is_f64(),
        "{stats}"
    );
    for pair in samples.windows(2) {
        assert!(
            pair[0]["at_ms"].as_u64() < pair[1]["at_ms"].as_u64(),
            "ordered"
        );
    }
    server.stop().await;
}
