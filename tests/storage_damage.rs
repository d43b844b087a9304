//! Damaged stores against the real binary: a store written by `turnstile serve` is copied, the
//! copy damaged (one flipped byte, the last 64 KiB zeroed, cut in half, the database file
//! deleted, 64 scattered bit flips, a bad `CURRENT`), and `doctor`, `doctor --repair` and
//! `serve` run on it. Whatever they do, they never panic, and they never report a clean store
//! (or serve one) holding fewer entries than were written.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{message, post, session_key, transcript, ServerProcess};

const CHATS: usize = 10;
const PER_CHAT: usize = 8;

/// A store written by the real binary: `CHATS` × `PER_CHAT` messages, all answered, then a
/// graceful stop. Returns the data dir and the transcript entries it holds.
async fn written_store(root: &Path) -> (PathBuf, u64) {
    let data = root.join("data");
    let mut server = ServerProcess::start(&data, root, "").await;
    let client = reqwest::Client::new();
    // Round by round, each message answered before the next: one turn per message.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut entries = 0u64;
    for i in 0..PER_CHAT {
        for c in 0..CHATS {
            let text = format!("hello {i} in {c} {}", "x".repeat(200));
            let body = message(&format!("c{c}"), &format!("m{c}-{i}"), &text);
            assert_eq!(post(&client, &server.url, &body).await, Ok(true));
        }
        entries = 0;
        for c in 0..CHATS {
            loop {
                let t = transcript(&client, &server.url, &session_key(&format!("c{c}"))).await;
                let id = format!("m{c}-{i}");
                let seen = t.iter().any(|e| e["message_id"] == id.as_str());
                let answered = t.last().is_some_and(|e| e["kind"] == "assistant");
                if seen && answered {
                    entries += t.len() as u64;
                    break;
                }
                assert!(Instant::now() < deadline, "chat c{c} not answered: {t:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    server.stop().await;
    (data, entries)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The sled log file of the current generation.
fn db_file(data: &Path) -> PathBuf {
    let current = std::fs::read_to_string(data.join("CURRENT")).unwrap_or_else(|_| "db".into());
    data.join(current.trim()).join("db")
}

struct Run {
    code: Option<i32>,
    out: String,
}

fn cli(args: &[&str]) -> Run {
    // Under timeout(1): a serve that starts when it should refuse fails the test, not hangs it.
    let out = Command::new("timeout")
        .arg("60")
        .arg(env!("CARGO_BIN_EXE_turnstile"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

fn assert_no_panic(run: &Run, what: &str) {
    assert_ne!(run.code, Some(101), "{what} panicked:\n{}", run.out);
    assert!(
        !run.out.contains("panicked at"),
        "{what} panicked:\n{}",
        run.out
    );
}

/// `transcript entries: N` from a doctor report.
fn reported_entries(out: &str) -> Option<u64> {
    let rest = out.split("transcript entries: ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Doctor on a damaged copy: an error, a reported problem, or a clean report of everything.
fn doctor_never_silent(data: &Path, expected: u64, what: &str) {
    let run = cli(&["doctor", "--data-dir", data.to_str().unwrap()]);
    assert_no_panic(&run, what);
    if run.code == Some(0) {
        assert!(run.out.contains("problems found: 0"), "{what}: {}", run.out);
        assert_eq!(
            reported_entries(&run.out),
            Some(expected),
            "{what}: doctor says clean but entries are missing:\n{}",
            run.out
        );
    } else {
        assert!(
            !run.out.trim().is_empty(),
            "{what}: an error without a message"
        );
    }
}

/// `serve` on a damaged copy: refuses with a message, or serves every entry.
async fn serve_never_silent(root: &Path, data: &Path, expected: u64, what: &str) {
    let port = support::free_port();
    let log_path = root.join(format!("serve-{port}.log"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--data-dir", data.to_str().unwrap(), "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            assert_ne!(status.code(), Some(101), "{what}: serve panicked:\n{log}");
            assert!(
                !log.contains("panicked at"),
                "{what}: serve panicked:\n{log}"
            );
            assert!(!status.success(), "{what}: serve exited 0 without serving");
            assert!(
                !log.trim().is_empty(),
                "{what}: serve refused without a message"
            );
            break false;
        }
        if let Ok(r) = client.get(format!("{url}/readyz")).send().await {
            if r.status().is_success() {
                break true;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: serve neither started nor exited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if ready {
        let mut served = 0u64;
        for c in 0..CHATS {
            served += transcript(&client, &url, &session_key(&format!("c{c}")))
                .await
                .len() as u64;
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            served, expected,
            "{what}: serve answers with entries missing"
        );
    }
}

type Damage = fn(&Path, f64);

fn flip_byte(file: &Path, at: f64) {
    let mut bytes = std::fs::read(file).unwrap();
    let i = ((bytes.len() as f64 * at) as usize).min(bytes.len() - 1);
    bytes[i] ^= 0x10;
    std::fs::write(file, bytes).unwrap();
}

fn zero_tail(file: &Path, _: f64) {
    let mut bytes = std::fs::read(file).unwrap();
    let from = bytes.len().saturating_sub(64 * 1024);
    bytes[from..].fill(0);
    std::fs::write(file, bytes).unwrap();
}

fn truncate(file: &Path, at: f64) {
    let len = std::fs::metadata(file).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.set_len((len as f64 * at) as u64).unwrap();
}

fn delete(file: &Path, _: f64) {
    std::fs::remove_file(file).unwrap();
}

/// Flips 64 bits spread over the file (`seed` moves them).
fn scatter_flips(file: &Path, seed: f64) {
    let mut bytes = std::fs::read(file).unwrap();
    let n = bytes.len();
    for k in 0..64usize {
        let i = ((k as f64 + seed) / 64.0 * n as f64) as usize % n;
        bytes[i] ^= 1 << (k % 8);
    }
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_stores_are_never_served_short_and_never_panic() {
    let root = tempfile::tempdir().unwrap();
    let (data, expected) = written_store(root.path()).await;
    assert!(expected >= CHATS as u64, "{expected}");
    let clean = cli(&["doctor", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(clean.code, Some(0), "{}", clean.out);
    assert!(
        root.path().join("data").join("LEDGER").is_file(),
        "the ledger was written"
    );

    let kinds: [(&str, Damage, &[f64]); 5] = [
        (
            "flip one byte",
            flip_byte,
            &[0.1, 0.35, 0.5, 0.75, 0.9, 0.99],
        ),
        ("zero the last 64 KiB", zero_tail, &[0.0]),
        ("truncate", truncate, &[0.5, 0.25, 0.9]),
        ("delete the db file", delete, &[0.0]),
        ("64 scattered bit flips", scatter_flips, &[0.0, 0.3, 0.7]),
    ];
    let mut n = 0;
    for (kind, damage, positions) in kinds {
        for (p, at) in positions.iter().enumerate() {
            n += 1;
            let what = format!("{kind} at {at}");
            let copy = root.path().join(format!("copy-{n}"));
            copy_dir(&data, &copy);
            damage(&db_file(&copy), *at);
            doctor_never_silent(&copy, expected, &what);
            if p == 0 {
                serve_never_silent(root.path(), &copy, expected, &what).await;
            }
            let repair = cli(&["doctor", "--repair", "--data-dir", copy.to_str().unwrap()]);
            assert_no_panic(&repair, &format!("{what} (--repair)"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_current_file_refuses_to_start_and_repair_restores_every_entry() {
    let root = tempfile::tempdir().unwrap();
    let (data, expected) = written_store(root.path()).await;
    for bad in ["db.999", "db.13", "\u{0}\u{1}junk"] {
        std::fs::write(data.join("CURRENT"), bad).unwrap();
        let port = support::free_port().to_string();
        let run = cli(&[
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ]);
        assert_no_panic(&run, bad);
        assert_ne!(run.code, Some(0), "{bad:?}: serve started:\n{}", run.out);
        assert!(
            run.out.contains("generations found: db") && run.out.contains("doctor --repair"),
            "{bad:?}: {}",
            run.out
        );
        assert!(
            data.join("db").is_dir(),
            "{bad:?}: the real generation was deleted"
        );
        assert!(!run.out.contains("deleted"), "{}", run.out);
    }
    let repair = cli(&["doctor", "--repair", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(repair.code, Some(0), "{}", repair.out);
    assert!(
        repair.out.contains("CURRENT now names db"),
        "{}",
        repair.out
    );
    serve_never_silent(root.path(), &data, expected, "after repair").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_tail_is_refused_until_accepted() {
    let root = tempfile::tempdir().unwrap();
    let (data, expected) = written_store(root.path()).await;
    truncate(&db_file(&data), 0.5);
    let doctor = cli(&["doctor", "--data-dir", data.to_str().unwrap()]);
    assert_no_panic(&doctor, "doctor");
    if doctor.code == Some(0) && reported_entries(&doctor.out) == Some(expected) {
        // sled kept everything this time (its tail held nothing live): nothing to detect.
        return;
    }
    assert_ne!(doctor.code, Some(0), "{}", doctor.out);
    assert!(
        doctor.out.contains("DATA LOSS") || doctor.out.contains("problems found"),
        "{}",
        doctor.out
    );
    assert!(doctor.out.contains("DATA LOSS"), "{}", doctor.out);
    serve_never_silent(root.path(), &data, expected, "lost tail").await;
    // Accepted: served, the ledger re-baselined, and the next doctor is clean of the loss.
    let mut accepted = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args([
            "serve",
            "--accept-data-loss",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
        ])
        .arg(format!("127.0.0.1:{}", support::free_port()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        accepted.try_wait().unwrap().is_none(),
        "--accept-data-loss serves"
    );
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(accepted.id().to_string())
        .status();
    let _ = accepted.wait();
    let after = cli(&["doctor", "--data-dir", data.to_str().unwrap()]);
    assert!(!after.out.contains("DATA LOSS"), "{}", after.out);
}
