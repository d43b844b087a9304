//! The HTTP edge is bounded, over raw sockets: slow headers, trickled or unfinished bodies and
//! idle connections are closed by the server (with `408` where a request had begun); past the
//! connection cap the probes still answer; `Expect: 100-continue` over the body limit gets
//! `413` at once; every error is the JSON error shape.
//!
//! Waits are "closed before a generous bound", never assertions on speed.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{data_dir, eventually, start_server_with, Msg, TestServer, PATIENCE};

/// The edge timeouts of the servers under test.
const TIMEOUT_MS: u64 = 1_000;
/// How long a test waits for the server to close a connection: far above [`TIMEOUT_MS`].
const CLOSE_BOUND: Duration = Duration::from_secs(20);
/// The body limit of the servers under test.
const MAX_BODY: usize = 16 * 1024;

async fn edge_server(edit: impl FnOnce(&mut turnstile::Config)) -> TestServer {
    start_server_with(data_dir(), |c| {
        c.server.header_read_timeout_ms = TIMEOUT_MS;
        c.server.body_read_timeout_ms = TIMEOUT_MS;
        c.server.idle_timeout_ms = TIMEOUT_MS;
        c.server.max_body_bytes = MAX_BODY;
        edit(c);
    })
    .await
}

fn addr_of(server: &TestServer) -> SocketAddr {
    server
        .api
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the server's address")
}

/// Everything the server sends until it closes the connection; fails the test if it is still
/// open after [`CLOSE_BOUND`].
async fn read_until_closed(reader: &mut (impl AsyncReadExt + Unpin), what: &str) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(CLOSE_BOUND, read_all)
        .await
        .unwrap_or_else(|_| panic!("{what}: still open after {CLOSE_BOUND:?}"));
    String::from_utf8_lossy(&out).into_owned()
}

/// Opens a connection, sends `head`, then sends `trickle` one byte at a time (every 200 ms,
/// while the connection takes them) and returns what the server answered before closing.
async fn slow_client(addr: SocketAddr, head: &str, trickle: &str, what: &str) -> String {
    let stream = TcpStream::connect(addr).await.expect("connecting");
    let (mut reader, mut writer) = stream.into_split();
    writer.write_all(head.as_bytes()).await.expect("sending");
    let trickle = trickle.as_bytes().to_vec();
    let trickler = tokio::spawn(async move {
        for byte in trickle {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if writer.write_all(&[byte]).await.is_err() {
                break;
            }
        }
        // Holds the write side open: the server, not the client, must end the connection.
        std::future::pending::<()>().await;
    });
    let answer = read_until_closed(&mut reader, what).await;
    trickler.abort();
    answer
}

/// The JSON body of a raw HTTP/1.1 response.
fn body_of(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {response}"))
}

/// Checks a raw response: its status line starts with `status`, its body is the JSON error
/// shape with `code`.
fn assert_json_error(response: &str, status: u16, code: &str) {
    assert!(
        response.starts_with(&format!("HTTP/1.1 {status} ")),
        "wanted {status}: {response:?}"
    );
    let body = body_of(response);
    assert_error_shape(&body, code);
}

fn assert_error_shape(body: &Value, code: &str) {
    let error = &body["error"];
    assert_eq!(error["code"], code, "{body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(error["type"].is_string(), "{body}");
    assert!(error.get("param").is_some_and(Value::is_null), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_are_closed() {
    let server = edge_server(|_| {}).await;
    let addr = addr_of(&server);

    // Slowloris: a head that never ends, a header line every few bytes.
    let answer = slow_client(
        addr,
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\n",
        &"X-Slow: 1\r\n".repeat(40),
        "slow headers",
    )
    .await;
    assert_json_error(&answer, 408, "request_timeout");

    // A declared body trickled a byte at a time.
    let answer = slow_client(
        addr,
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
         content-length: 400\r\n\r\n",
        &"{".repeat(400),
        "trickled body",
    )
    .await;
    assert_json_error(&answer, 408, "request_timeout");

    // A chunked body whose last chunk never comes.
    let answer = slow_client(
        addr,
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n",
        "",
        "unfinished chunked body",
    )
    .await;
    assert_json_error(&answer, 408, "request_timeout");

    // A connection that never sends a byte is closed without an answer.
    let answer = slow_client(addr, "", "", "silent connection").await;
    assert_eq!(answer, "", "a silent connection gets no answer");

    // A kept-alive connection that goes quiet after a response is closed too.
    let answer = slow_client(
        addr,
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "",
        "idle keep-alive connection",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(
        answer.ends_with("ok"),
        "one response, then the close: {answer}"
    );

    // The server still serves.
    server
        .send(&Msg::group("edge-chat", "edge-1", "hello"))
        .await;
    server.stop().await;
}

/// A request on its own connection (`Connection: close`); the raw answer.
async fn raw_request(addr: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connecting");
    stream.write_all(request.as_bytes()).await.expect("sending");
    read_until_closed(&mut stream, request.lines().next().unwrap_or_default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_the_probes_still_answer() {
    const CAP: usize = 8;
    const RESERVE: usize = 4;
    let server = edge_server(|c| {
        c.server.max_connections = CAP;
        c.server.health_connections = RESERVE;
        // Idle connections stay until the test closes them.
        c.server.idle_timeout_ms = 600_000;
        c.server.header_read_timeout_ms = 600_000;
    })
    .await;
    let addr = addr_of(&server);
    // More idle connections than the cap and the reserve together.
    let mut idle = Vec::new();
    for _ in 0..CAP + RESERVE + 6 {
        idle.push(TcpStream::connect(addr).await.expect("connecting"));
    }

    let health = raw_request(
        addr,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(health.starts_with("HTTP/1.1 200 "), "{health}");
    let ready = raw_request(
        addr,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(ready.starts_with("HTTP/1.1 200 "), "{ready}");
    let message = Msg::group("cap-chat", "cap-1", "hello").json().to_string();
    let post = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{message}",
        message.len()
    );
    let refused = raw_request(addr, &post).await;
    assert_json_error(&refused, 503, "over_capacity");

    drop(idle);
    let answer = eventually(PATIENCE, "a POST after the idle connections closed", || {
        let post = post.clone();
        async move {
            let answer = raw_request(addr, &post).await;
            if answer.starts_with("HTTP/1.1 202 ") {
                Ok(answer)
            } else {
                Err(answer)
            }
        }
    })
    .await;
    assert_eq!(body_of(&answer)["status"], "accepted", "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_over_the_limit_is_refused_before_the_body() {
    let server = edge_server(|_| {}).await;
    let addr = addr_of(&server);

    let answer = raw_request(
        addr,
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
         content-length: 99999999999\r\nexpect: 100-continue\r\n\r\n",
    )
    .await;
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert_json_error(&answer, 413, "payload_too_large");

    // Under the limit the client is told to go on, and the message is accepted.
    let message = Msg::group("expect-chat", "expect-1", "hello")
        .json()
        .to_string();
    let mut stream = TcpStream::connect(addr).await.expect("connecting");
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n",
        message.len()
    );
    stream.write_all(head.as_bytes()).await.expect("sending");
    let mut interim = [0u8; 25];
    tokio::time::timeout(CLOSE_BOUND, stream.read_exact(&mut interim))
        .await
        .expect("no interim response")
        .expect("reading the interim response");
    assert_eq!(&interim[..], b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(message.as_bytes()).await.expect("sending");
    let answer = read_until_closed(&mut stream, "the continued POST").await;
    assert!(answer.starts_with("HTTP/1.1 202 "), "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_the_json_shape() {
    let server = edge_server(|c| c.server.max_uri_bytes = 2_048).await;
    let addr = addr_of(&server);
    let http = &server.api.client;
    let get = |path: String| {
        let url = server.api.url(&path);
        async move { http.get(url).send().await.expect("GET") }
    };
    let cases = [
        (
            "/no/such/route".to_string(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            format!("/v1/sessions?after={}", "a".repeat(3_000)),
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
        ),
        (
            "/v1/sessions?limit=abc".into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "/v1/sessions/%FF".into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "/v1/sessions/%FF/transcript".into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ];
    for (path, status, code) in cases {
        let response = get(path.clone()).await;
        assert_eq!(response.status(), status, "{path:.80}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            content_type.starts_with("application/json"),
            "{path:.80}: {content_type}"
        );
        let body: Value = response.json().await.expect("a JSON body");
        assert_error_shape(&body, code);
    }

    // A wrong method: 405 with `Allow` kept.
    let response = http
        .delete(server.api.url("/v1/messages"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let allow = response.headers()["allow"].to_str().unwrap().to_string();
    assert!(allow.contains("POST"), "{allow}");
    assert_error_shape(
        &response.json().await.expect("a JSON body"),
        "method_not_allowed",
    );

    // An over-long body: 413.
    let (status, body) = server
        .api
        .post_raw("/v1/messages", "x".repeat(MAX_BODY + 1))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_error_shape(&body, "payload_too_large");

    // A request line longer than hyper's own limit (64 KiB) is answered by the edge, in JSON.
    let answer = raw_request(
        addr,
        &format!(
            "GET /v1/sessions?after={} HTTP/1.1\r\nHost: x\r\n\r\n",
            "a".repeat(70_000)
        ),
    )
    .await;
    assert_json_error(&answer, 414, "uri_too_long");

    // What hyper cannot parse (answered before any route runs) is JSON too.
    let answer = raw_request(addr, "GARBAGE\r\n\r\n").await;
    assert_json_error(&answer, 400, "bad_request");
    let many: String = (0..120).map(|i| format!("x-h{i}: a\r\n")).collect();
    let answer = raw_request(addr, &format!("GET /healthz HTTP/1.1\r\n{many}\r\n")).await;
    assert_json_error(&answer, 431, "headers_too_large");
    // A probe with the wrong method is an error like any other.
    let response = http
        .post(server.api.url("/healthz"))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_error_shape(
        &response.json().await.expect("a JSON body"),
        "method_not_allowed",
    );
    server.stop().await;
}

#[test]
fn edge_settings_are_checked() {
    use turnstile::Config;
    let defaults = Config::default().server;
    assert_eq!(
        (defaults.max_connections, defaults.health_connections),
        (768, 32)
    );
    for bad in [
        "header_read_timeout_ms = 0",
        "body_read_timeout_ms = 0",
        "idle_timeout_ms = 86400001",
        "max_connections = 0",
        "health_connections = 0",
        "max_uri_bytes = 100",
        "max_uri_bytes = 70000",
    ] {
        let error = Config::parse(&format!("[server]\n{bad}\n")).expect_err(bad);
        let key = bad.split(' ').next().unwrap_or_default();
        assert!(error.to_string().contains(key), "{bad}: {error}");
    }
    let c = Config::parse("[server]\nidle_timeout_ms = 5000\nmax_uri_bytes = 256\n").unwrap();
    assert_eq!(
        (c.server.idle_timeout_ms, c.server.max_uri_bytes),
        (5000, 256)
    );
}

/// A flood of connections past the cap and the probes' reserve: every connection that sends a
/// request gets an answer (`202`, or `503 over_capacity` with `Retry-After`), none a silent
/// close — a connection closed for a newer one answers `503` first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_every_request_is_answered() {
    const CAP: usize = 8;
    const RESERVE: usize = 4;
    const CLIENTS: usize = 40;
    let server = edge_server(|c| {
        c.server.max_connections = CAP;
        c.server.health_connections = RESERVE;
        c.server.idle_timeout_ms = 600_000;
        c.server.header_read_timeout_ms = 600_000;
    })
    .await;
    let addr = addr_of(&server);
    // All connect first, then all send: the earliest extra ones are closed for later ones
    // before they sent anything.
    let mut streams = Vec::new();
    for _ in 0..CLIENTS {
        streams.push(TcpStream::connect(addr).await.expect("connecting"));
    }
    let mut clients = tokio::task::JoinSet::new();
    for (i, mut stream) in streams.into_iter().enumerate() {
        let message = Msg::group("flood", &format!("flood-{i}"), "hello")
            .json()
            .to_string();
        let post = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{message}",
            message.len()
        );
        clients.spawn(async move {
            // A connection already answered and half-closed may refuse the write; its answer
            // is still there to read.
            let _ = stream.write_all(post.as_bytes()).await;
            read_until_closed(&mut stream, "a flooding client").await
        });
    }
    let (mut accepted, mut refused) = (0, 0);
    while let Some(answer) = clients.join_next().await {
        let answer = answer.expect("a client task");
        if answer.starts_with("HTTP/1.1 202 ") {
            accepted += 1;
        } else {
            assert_json_error(&answer, 503, "over_capacity");
            assert!(
                answer.to_ascii_lowercase().contains("retry-after: 1"),
                "{answer}"
            );
            refused += 1;
        }
    }
    assert_eq!(accepted + refused, CLIENTS);
    assert!(accepted >= 1, "{accepted} accepted, {refused} refused");
    server.stop().await;
}

/// A body over the limit sent whole without `Expect`: the client still reads its `413`
/// (the server reads on past the answer before closing, rather than resetting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_sent_whole_still_reads_its_413() {
    let server = edge_server(|_| {}).await;
    let addr = addr_of(&server);
    let body = "x".repeat(MAX_BODY * 16);
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    for _ in 0..5 {
        let mut stream = TcpStream::connect(addr).await.expect("connecting");
        let _ = stream.write_all(request.as_bytes()).await;
        let answer = read_until_closed(&mut stream, "an oversized body").await;
        assert_json_error(&answer, 413, "payload_too_large");
    }
    server.stop().await;
}

/// Query strings whose escapes are not UTF-8 are refused, not read as U+FFFD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_strings_that_are_not_utf8_are_400() {
    let server = edge_server(|_| {}).await;
    let http = reqwest::Client::new();
    for path in [
        "/v1/sessions?after=%FF",
        "/v1/events?session_key=%FF",
        "/v1/sessions/x/transcript?after=1&%C3=2",
        "/v1/stats/history?x=%FF",
    ] {
        let r = http
            .get(format!("{}{path}", server.api.base))
            .send()
            .await
            .expect("sending");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{path}");
        let body: Value = r.json().await.expect("a JSON error");
        assert_eq!(body["error"]["code"], "bad_request", "{path}: {body}");
    }
    let fine = http
        .get(format!(
            "{}/v1/sessions?after=agent%3Amain",
            server.api.base
        ))
        .send()
        .await
        .expect("sending");
    assert_eq!(fine.status(), StatusCode::OK);
    server.stop().await;
}
