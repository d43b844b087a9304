//! A full disk is a state, not a wedge: on a small tmpfs (root only; skipped with a message
//! otherwise, but not under `CI=true`) the real binary answers writes with 507 while the disk
//! is full, reports not ready, keeps answering reads, and takes writes again by itself once
//! space returns, with every earlier 202 answered.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{message, session_key, transcript, ServerProcess};

/// Unmounts the tmpfs when dropped, also when the test fails.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_tmpfs(dir: &Path) -> Option<Mount> {
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(Mount(dir.to_path_buf()));
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI must be able to mount a tmpfs (run as root)"
    );
    eprintln!("skipping: cannot mount a tmpfs here (not root?)");
    None
}

/// Fills the filesystem of `dir` with a ballast file until a write fails.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("ballast");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![1u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
    path
}

async fn post_status(
    client: &reqwest::Client,
    url: &str,
    chat: &str,
    id: &str,
) -> (u16, String, Option<String>) {
    let r = client
        .post(format!("{url}/v1/messages"))
        .json(&message(chat, id, "hello"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    (status, r.text().await.unwrap_or_default(), retry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_507_and_recovers_without_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let mnt = root.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let Some(_mount) = mount_tmpfs(&mnt) else {
        return;
    };
    let data = mnt.join("data");
    let mut server = ServerProcess::start(
        &data,
        root.path(),
        "[storage]\ncache_capacity_bytes = 1048576\n",
    )
    .await;
    let client = reqwest::Client::new();
    let url = server.url.clone();
    let mut acked = Vec::new();
    for i in 0..5 {
        let id = format!("before-{i}");
        let (status, body, _) = post_status(&client, &url, "full", &id).await;
        assert_eq!(status, 202, "{body}");
        acked.push(id);
    }
    // Answered before the disk fills, so the session exists to be read while it is full.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !transcript(&client, &url, &session_key("full"))
        .await
        .last()
        .is_some_and(|e| e["kind"] == "assistant")
    {
        assert!(
            Instant::now() < deadline,
            "the first messages were not answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ballast = fill(&mnt);
    // The first writes after the disk filled may still fit in sled's buffers; soon one fails.
    let mut refused = None;
    for i in 0..200 {
        let id = format!("during-{i}");
        let (status, body, retry) = post_status(&client, &url, "full", &id).await;
        match status {
            202 => acked.push(id),
            507 => {
                refused = Some((body, retry));
                break;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    let (body, retry) = refused.expect("a full disk is answered with 507");
    assert!(body.contains("insufficient_storage"), "{body}");
    assert!(retry.is_some(), "507 carries Retry-After");
    // A burst on the full disk, to many sessions at once: every refusal is a 507 a client
    // retries, never a 500 it would take as final.
    let burst: Vec<_> = (0..64)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                post_status(
                    &client,
                    &url,
                    &format!("burst-{}", i % 16),
                    &format!("b-{i}"),
                )
                .await
            })
        })
        .collect();
    for b in burst {
        let (status, body, _) = b.await.unwrap();
        assert!(
            status == 507 || status == 202,
            "a message on a full disk got {status}: {body}"
        );
    }
    let ready = client.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    assert!(ready.text().await.unwrap().contains("not ready"));
    let read = client
        .get(format!(
            "{url}/v1/sessions/{}/transcript",
            session_key("full").replace(':', "%3A")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status().as_u16(), 200, "reads keep answering");

    std::fs::remove_file(&ballast).unwrap();
    let removed = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    let recovered = loop {
        let id = format!("after-{}", acked.len());
        let (status, _, _) = post_status(&client, &url, "full", &id).await;
        if status == 202 {
            acked.push(id);
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "writes did not come back without a restart; server log:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "writes recovered {:?} after the ballast was removed",
        recovered - removed
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = transcript(&client, &url, &session_key("full")).await;
        // Older messages may have been folded into a leading summary by compaction.
        let summarised = t.first().is_some_and(|e| e["kind"] == "summary");
        let missing: Vec<&String> = acked
            .iter()
            .filter(|id| !t.iter().any(|e| e["message_id"] == id.as_str()))
            .filter(|id| !summarised || *id == acked.last().unwrap())
            .collect();
        let answered = t.last().is_some_and(|e| e["kind"] == "assistant");
        if missing.is_empty() && answered {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acknowledged messages not answered: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop().await;
}
