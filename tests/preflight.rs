//! Preflight end to end over HTTP: drops are answered `200 {"status":"dropped","reason":…}`,
//! and a message redelivered after a restart on the same data dir is a `duplicate`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use turnstile::{Config, Runtime};

/// A server on a loopback port, stopped by `stop`.
struct Server {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(dir: &Path) -> Server {
        let mut config = Config::parse("[preflight]\nbot_user_ids = [\"999\"]\n").unwrap();
        config.storage.data_dir = dir.to_path_buf();
        // A restarted runtime may find the previous one's sled file lock still held for a few
        // ms while sled's background I/O threads let go of it: poll.
        let started = Instant::now();
        let runtime = loop {
            match Runtime::builder().config(config.clone()).build().await {
                Ok(rt) => break rt,
                Err(e) if started.elapsed() < Duration::from_secs(10) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("cannot start the runtime: {e}"),
            }
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(turnstile::server::serve(listener, runtime, async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        let _ = self.shutdown.send(());
        self.task.await.unwrap().unwrap();
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn post(&self, body: &Value) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(self.url("/v1/messages"))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    async fn transcript(&self, key: &str) -> Vec<Value> {
        let key: String = key.replace(':', "%3A");
        let resp = reqwest::get(self.url(&format!("/v1/sessions/{key}/transcript")))
            .await
            .unwrap();
        if resp.status().as_u16() == 404 {
            return Vec::new();
        }
        resp.json().await.unwrap()
    }
}

fn message(id: &str) -> Value {
    json!({"channel":"telegram","account_id":"default","chat_kind":"group","chat_id":"-100123",
           "message_id":id,"sender":{"id":"111","name":"Alice","is_bot":false},
           "text":"@bot hello","mentioned_bot":true,"timestamp_ms":0})
}

fn with(mut base: Value, edit: Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), edit.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

fn dropped(reason: &str) -> (u16, Value) {
    (200, json!({"status":"dropped","reason":reason}))
}

#[tokio::test]
async fn drops_are_answered_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;

    let (status, body) = server.post(&message("1")).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["session_key"], "agent:main:telegram:group:-100123");
    assert_eq!(server.post(&message("1")).await, dropped("duplicate"));

    let own = with(
        message("2"),
        json!({"sender":{"id":"999","name":"me","is_bot":true}}),
    );
    assert_eq!(server.post(&own).await, dropped("bot"));
    let other_bot = with(
        message("3"),
        json!({"sender":{"id":"555","name":"other","is_bot":true}}),
    );
    assert_eq!(server.post(&other_bot).await, dropped("bot"));

    let chatter = with(message("4"), json!({"mentioned_bot": false}));
    assert_eq!(server.post(&chatter).await, dropped("no_mention"));

    let event = with(
        message("5"),
        json!({"kind":"system_event","text":"Bob joined the group","mentioned_bot":false}),
    );
    assert_eq!(server.post(&event).await, dropped("system_event"));

    let (status, body) = server
        .post(&with(message("6"), json!({"kind": "bogus"})))
        .await;
    assert_eq!(status, 400, "{body}");
    server.stop().await;
}

#[tokio::test]
async fn a_redelivery_after_a_restart_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let key = "agent:main:telegram:group:-100123";
    let server = Server::start(dir.path()).await;
    assert_eq!(server.post(&message("42")).await.0, 202);
    // Wait until it is answered (user entry + reply), so the inbox entry is consumed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.transcript(key).await.len() < 2 {
        assert!(Instant::now() < deadline, "no reply");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await;

    let server = Server::start(dir.path()).await;
    assert_eq!(server.post(&message("42")).await, dropped("duplicate"));
    assert_eq!(server.post(&message("43")).await.0, 202);
    server.stop().await;
}
