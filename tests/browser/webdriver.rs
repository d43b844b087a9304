//! A minimal W3C WebDriver client for the browser suite: chromedriver as a child process in
//! its own process group (so the Chromium it starts dies with it), one session of headless
//! Debian Chromium, and the dozen commands the suite uses.
//!
//! Why not `fantoccini`/`thirtyfour`: both pull the `webdriver` crate and with it
//! `icu_segmenter` and its data, `cookie`, `time`… — minutes of compile time on a 2-core
//! machine for what is a handful of JSON requests over `reqwest`, which the tests already use.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use tempfile::TempDir;

/// The W3C key of an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long chromedriver may take to say it is ready.
const DRIVER_READY: Duration = Duration::from_secs(30);
/// The browser window (also the screenshots' size).
const WINDOW: &str = "--window-size=1280,1000";

/// A command that failed: the WebDriver error code and message.
#[derive(Debug)]
pub struct WdError {
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for WdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// Where the browser and its driver are, if they are installed.
pub struct Installed {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
}

/// The first of `names` found as given (absolute) or on `PATH`.
fn find_program(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        if Path::new(name).is_absolute() {
            if Path::new(name).is_file() {
                return Some(PathBuf::from(name));
            }
            continue;
        }
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Chromium and chromedriver (`$CHROMIUM`, `$CHROMEDRIVER`, else `PATH`), or `None`.
pub fn installed() -> Option<Installed> {
    Some(Installed {
        chromium: find_program(
            "CHROMIUM",
            &["chromium", "chromium-browser", "/usr/bin/chromium"],
        )?,
        chromedriver: find_program(
            "CHROMEDRIVER",
            &["chromedriver", "/usr/lib/chromium/chromedriver"],
        )?,
    })
}

/// One browser session. Dropping it kills chromedriver's whole process group (the driver and
/// every Chromium process), so a failing test leaves nothing running.
pub struct Browser {
    http: reqwest::Client,
    driver_url: String,
    session: String,
    driver: Child,
    /// True once the driver's group was killed.
    killed: bool,
    log: PathBuf,
    _profile: TempDir,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a headless Chromium session.
    pub async fn start(programs: &Installed) -> Browser {
        let profile = tempfile::Builder::new()
            .prefix("turnstile-browser-")
            .tempdir()
            .expect("creating a browser profile dir");
        let log = profile.path().join("chromedriver.log");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("finding a free port");
        let driver = {
            use std::os::unix::process::CommandExt;
            Command::new(&programs.chromedriver)
                .arg(format!("--port={port}"))
                .arg(format!("--log-path={}", log.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // Its own group: Drop kills the driver and the browsers it started at once.
                .process_group(0)
                .spawn()
                .expect("starting chromedriver")
        };
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("building the WebDriver client");
        let mut browser = Browser {
            http,
            driver_url: format!("http://127.0.0.1:{port}"),
            session: String::new(),
            driver,
            killed: false,
            log,
            _profile: profile,
        };
        browser.wait_driver_ready().await;
        let profile_dir = browser._profile.path().join("profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            "timeouts": {"pageLoad": 30000, "script": 30000, "implicit": 0},
            "goog:chromeOptions": {
                "binary": programs.chromium.to_string_lossy(),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", WINDOW,
                    format!("--user-data-dir={}", profile_dir.display()),
                ],
            },
        }}});
        let created = browser
            .raw("POST", "/session", Some(caps))
            .await
            .unwrap_or_else(|e| panic!("creating a browser session: {e}\n{}", browser.log_tail()));
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {created}"))
            .to_string();
        browser
    }

    async fn wait_driver_ready(&mut self) {
        let deadline = Instant::now() + DRIVER_READY;
        loop {
            if let Ok(Some(status)) = self.driver.try_wait() {
                panic!("chromedriver exited with {status}\n{}", self.log_tail());
            }
            if let Ok(v) = self.raw("GET", "/status", None).await {
                if v["ready"] == true {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver was not ready within {DRIVER_READY:?}\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// One WebDriver request; `Ok` is the response's `value`.
    async fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, WdError> {
        let url = format!("{}{path}", self.driver_url);
        let request = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self
                .http
                .post(&url)
                .json(&body.unwrap_or_else(|| json!({}))),
        };
        let response = request.send().await.map_err(|e| WdError {
            code: "transport".into(),
            message: e.to_string(),
        })?;
        let ok = response.status().is_success();
        let v: Value = response.json().await.map_err(|e| WdError {
            code: "bad response".into(),
            message: e.to_string(),
        })?;
        let value = v.get("value").cloned().unwrap_or(Value::Null);
        if ok {
            Ok(value)
        } else {
            Err(WdError {
                code: value["error"].as_str().unwrap_or("unknown").to_string(),
                message: value["message"].as_str().unwrap_or_default().to_string(),
            })
        }
    }

    /// A command of this session.
    pub async fn cmd(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, WdError> {
        self.raw(method, &format!("/session/{}{path}", self.session), body)
            .await
    }

    /// Navigates and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })))
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn js(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
        .unwrap_or_else(|e| panic!("running {script:?}: {e}"))
    }

    /// The element matching `css`.
    pub async fn find(&self, css: &str) -> Result<String, WdError> {
        let v = self
            .cmd(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        v[ELEMENT_KEY]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| WdError {
                code: "bad response".into(),
                message: format!("no element reference in {v}"),
            })
    }

    /// Clicks the element matching `css` (as a user would: it must be visible).
    pub async fn click(&self, css: &str) {
        let id = self
            .find(css)
            .await
            .unwrap_or_else(|e| panic!("finding {css}: {e}"));
        self.cmd("POST", &format!("/element/{id}/click"), None)
            .await
            .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
    }

    /// Types `text` into the element matching `css`.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self
            .find(css)
            .await
            .unwrap_or_else(|e| panic!("finding {css}: {e}"));
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await
        .unwrap_or_else(|e| panic!("typing into {css}: {e}"));
    }

    /// The text of an open alert/confirm dialog, if one is open.
    pub async fn alert_text(&self) -> Option<String> {
        match self.cmd("GET", "/alert/text", None).await {
            Ok(v) => Some(v.as_str().unwrap_or_default().to_string()),
            Err(e) if e.code == "no such alert" => None,
            Err(e) => panic!("asking for an alert: {e}"),
        }
    }

    /// Saves a PNG of the viewport to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let v = self
            .cmd("GET", "/screenshot", None)
            .await
            .unwrap_or_else(|e| panic!("taking a screenshot: {e}"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("a base64 screenshot");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("creating the screenshot dir");
        }
        std::fs::write(path, png).expect("writing the screenshot");
    }

    /// Ends the session (Chromium quits) and the driver.
    pub async fn quit(mut self) {
        let _ = self
            .raw("DELETE", &format!("/session/{}", self.session), None)
            .await;
        self.kill_group();
    }

    fn kill_group(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        // The driver leads its own process group (see `start`): end the group by its id.
        let pgid = self.driver.id() as libc::pid_t;
        // SAFETY: kill(2) with a negative pid signals only that process group; no memory is
        // touched.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill_group();
    }
}
