//! Many concurrent OpenAI-style chat clients, one request each, for
//! `benches/loadtest/slow_model.sh`: every client sends `POST {url}/chat/completions` (its own
//! `user`, so its own session) — all at the same moment, or spread evenly over `--ramp-ms` —
//! and records the time to the first content chunk (streaming) and to the end of the answer. Prints one JSON line: answered, failed,
//! time-to-first-token and total percentiles in ms, wall time, answers per second.
//!
//! `cargo run --release --example chat_clients -- --url http://127.0.0.1:7878/v1 --clients 1000 --stream 1`

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// One client's outcome: time to the first content, time to the end.
type Outcome = Result<(Duration, Duration), String>;

async fn one(client: reqwest::Client, url: String, user: String, stream: bool) -> Outcome {
    let body = json!({
        "model": "slow-model",
        "user": user,
        "stream": stream,
        "messages": [{"role": "user", "content": "hello, how are you today?"}],
    });
    let started = Instant::now();
    let response = client
        .post(format!("{url}/chat/completions"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    if !stream {
        let text = response.text().await.map_err(|e| e.to_string())?;
        if !text.contains("\"content\"") {
            return Err("no content".into());
        }
        let done = started.elapsed();
        return Ok((done, done));
    }
    let mut first = None;
    let mut seen = String::new();
    let mut body = response.bytes_stream();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(|e| e.to_string())?;
        seen.push_str(&String::from_utf8_lossy(&piece));
        if first.is_none() && seen.contains("\"content\":\"") {
            first = Some(started.elapsed());
        }
        // Keep only the unfinished tail: the stream is long, the markers are short.
        if seen.len() > 4096 {
            let cut = seen.len() - 256;
            let cut = (cut..seen.len())
                .find(|&i| seen.is_char_boundary(i))
                .unwrap_or(seen.len());
            seen.drain(..cut);
        }
    }
    if !seen.contains("[DONE]") {
        return Err("the stream ended without [DONE]".into());
    }
    let first = first.ok_or("no content chunk")?;
    Ok((first, started.elapsed()))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    let url = arg("--url", "http://127.0.0.1:7878/v1");
    let clients: usize = arg("--clients", "1000").parse().unwrap_or(1000);
    let stream = arg("--stream", "1") == "1";
    let tag = arg("--tag", "bench");
    let ramp = Duration::from_millis(arg("--ramp-ms", "0").parse().unwrap_or(0));
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(clients)
        .timeout(Duration::from_secs(300))
        .build()
        .expect("building the HTTP client");
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let start = started + ramp.mul_f64(i as f64 / clients as f64);
            let (client, url, user) = (client.clone(), url.clone(), format!("{tag}-{i}"));
            tokio::spawn(async move {
                tokio::time::sleep_until(start.into()).await;
                one(client, url, user, stream).await
            })
        })
        .collect();
    let mut first = Vec::new();
    let mut total = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok((f, t))) => {
                first.push(f.as_secs_f64() * 1000.0);
                total.push(t.as_secs_f64() * 1000.0);
            }
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let wall = started.elapsed().as_secs_f64();
    first.sort_by(f64::total_cmp);
    total.sort_by(f64::total_cmp);
    errors.sort();
    errors.dedup();
    let report = json!({
        "clients": clients,
        "answered": total.len(),
        "failed": clients - total.len(),
        "errors": errors.into_iter().take(5).collect::<Vec<_>>(),
        "ttft_ms": {"p50": percentile(&first, 0.5), "p99": percentile(&first, 0.99),
                    "max": percentile(&first, 1.0)},
        "total_ms": {"p50": percentile(&total, 0.5), "p99": percentile(&total, 0.99),
                     "max": percentile(&total, 1.0)},
        "wall_s": wall,
        "answers_per_s": total.len() as f64 / wall,
    });
    println!("{report}");
}
