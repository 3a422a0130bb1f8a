//! A real Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`), spoken to with
//! reqwest: just the commands the browser tests use. Without Chromium the tests skip with a printed
//! reason, unless `CODELOOP_REQUIRE_BROWSER=1` (CI installs it and sets that).
//!
//! Each test gets its own chromedriver (in a process group of its own, with its Chromium) and a fresh
//! profile; one browser runs at a time (the machine has two cores).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::{Mutex, MutexGuard};

use crate::support::PATIENCE;

/// One browser at a time.
static ONE_BROWSER: Mutex<()> = Mutex::const_new(());

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);

/// The W3C WebDriver id of an element in a response.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
    driver: Child,
    _profile: TempDir,
    _one: MutexGuard<'static, ()>,
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
    })
}

impl Browser {
    /// A headless Chromium, or `None` (with the reason printed) when it is not installed.
    pub async fn start(test: &str) -> Option<Browser> {
        let chromium = find_program(&["chromium", "chromium-browser", "google-chrome"]);
        let driver = find_program(&["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let reason =
                "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)";
            if std::env::var("CODELOOP_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
                panic!("CODELOOP_REQUIRE_BROWSER=1 but {reason}");
            }
            eprintln!("skipping {test}: {reason}");
            return None;
        };
        let one = ONE_BROWSER.lock().await;
        let (mut child, port) = start_driver(&driver);
        let profile = tempfile::tempdir().unwrap();
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-extensions", "--disable-default-apps", "--mute-audio", "--disable-crash-reporter",
                    "--disable-breakpad",
                    "--window-size=1200,800",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let response = http.post(format!("{base}/session")).json(&capabilities).send().await;
        let value = match response {
            Ok(response) => response.json::<Value>().await.unwrap(),
            Err(e) => {
                let _ = child.kill();
                panic!("chromedriver did not answer: {e}");
            }
        };
        let Some(id) = value["value"]["sessionId"].as_str() else {
            let _ = child.kill();
            panic!("Chromium did not start: {value}");
        };
        Some(Browser {
            http,
            session: format!("{base}/session/{id}"),
            driver: child,
            _profile: profile,
            _one: one,
        })
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = tokio::time::timeout(PATIENCE, request.send())
            .await
            .expect("WebDriver answered within the patience limit")
            .expect("WebDriver is reachable");
        let status = response.status();
        let value: Value = response.json().await.unwrap();
        assert!(status.is_success(), "WebDriver {path}: {status} {value}");
        value["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.command(reqwest::Method::POST, path, Some(body)).await
    }

    /// Navigates and waits for the page's load event.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    pub async fn refresh(&self) {
        self.post("/refresh", json!({})).await;
    }

    /// Opens a new tab (its own session storage) and switches to it.
    pub async fn new_tab(&self) {
        let handle = self.post("/window/new", json!({"type": "tab"})).await;
        self.post("/window", json!({"handle": handle["handle"]})).await;
    }

    pub async fn set_window(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({"width": width, "height": height})).await;
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns what it returns.
    pub async fn js(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": args})).await
    }

    /// Runs `script` with a callback as its last argument and returns what it passes to it.
    pub async fn post_async(&self, script: &str, args: Value) -> Value {
        self.post("/execute/async", json!({"script": script, "args": args})).await
    }

    /// Waits until `script` returns something truthy, and returns it.
    pub async fn wait(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let value = self.js(script, json!([])).await;
            let truthy = match &value {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
                _ => true,
            };
            if truthy {
                return value;
            }
            assert!(Instant::now() < deadline, "waited {PATIENCE:?} for {what}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// The element `css` selects, waiting for it to appear.
    pub async fn element(&self, css: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let response = self
                .http
                .post(format!("{}/element", self.session))
                .json(&json!({"using": "css selector", "value": css}))
                .send()
                .await
                .unwrap();
            if response.status().is_success() {
                let value: Value = response.json().await.unwrap();
                return value["value"][ELEMENT].as_str().unwrap().to_owned();
            }
            assert!(Instant::now() < deadline, "no element {css} within {PATIENCE:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the element `css` selects (as a person would: it must be visible and not covered).
    pub async fn click(&self, css: &str) {
        let element = self.element(css).await;
        self.post(&format!("/element/{element}/click"), json!({})).await;
    }

    /// The first button whose text is exactly `label`, clicked.
    pub async fn click_button(&self, label: &str) {
        let script = "return [...document.querySelectorAll('button')].filter(b => b.offsetParent !== null).find(b => b.textContent.trim() === arguments[0]) ?? null";
        let deadline = Instant::now() + PATIENCE;
        let element = loop {
            let value = self.js(script, json!([label])).await;
            if let Some(id) = value[ELEMENT].as_str() {
                break id.to_owned();
            }
            assert!(Instant::now() < deadline, "no visible button labelled {label:?}");
            tokio::time::sleep(POLL).await;
        };
        self.post(&format!("/element/{element}/click"), json!({})).await;
    }

    /// Types `text` into the element `css` selects (`\u{E007}` is Enter, `\u{E008}` Shift).
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        self.post(&format!("/element/{element}/value"), json!({"text": text})).await;
    }

    /// Presses keys on whatever has the focus (W3C actions).
    pub async fn keys(&self, keys: &[&str]) {
        let mut actions = Vec::new();
        for key in keys {
            actions.push(json!({"type": "keyDown", "value": key}));
        }
        for key in keys.iter().rev() {
            actions.push(json!({"type": "keyUp", "value": key}));
        }
        self.post("/actions", json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]}))
            .await;
        self.command(reqwest::Method::DELETE, "/actions", None).await;
    }

    /// CPU time (user + system, seconds) of this browser's processes (the driver's process group), all
    /// of them and the renderers (the tabs) alone.
    pub fn cpu_seconds(&self) -> (f64, f64) {
        let group = self.driver.id();
        let ticks_per_second = clock_ticks();
        let mut ticks = 0u64;
        let mut renderer = 0u64;
        let Ok(entries) = std::fs::read_dir("/proc") else { return (0.0, 0.0) };
        for entry in entries.flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            // Fields after the command (which may hold spaces), from its closing parenthesis.
            let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else { continue };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
            if fields.get(2).and_then(|g| g.parse::<u32>().ok()) != Some(group) {
                continue;
            }
            let utime: u64 = fields.get(11).and_then(|t| t.parse().ok()).unwrap_or(0);
            let stime: u64 = fields.get(12).and_then(|t| t.parse().ok()).unwrap_or(0);
            ticks += utime + stime;
            let command = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&command).contains("--type=renderer") {
                renderer += utime + stime;
            }
        }
        (ticks as f64 / ticks_per_second, renderer as f64 / ticks_per_second)
    }

    /// Ends the browser and its driver, after checking that no script of the page threw.
    pub async fn close(mut self) {
        let logs = self.post("/se/log", json!({"type": "browser"})).await;
        let errors: Vec<&Value> = logs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|entry| entry["level"] == "SEVERE" && entry["source"] == "javascript")
            .collect();
        let _ = self.http.delete(&self.session).send().await;
        self.end_driver();
        assert!(errors.is_empty(), "the page's scripts failed: {errors:?}");
    }

    fn end_driver(&mut self) {
        // The driver's group holds every Chromium process it started.
        let group = nix::unistd::Pid::from_raw(self.driver.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.end_driver();
    }
}

/// Starts chromedriver on a free port in its own process group; returns it and the port. A driver that
/// exits before saying its port (seen once in a loaded full run) is started once more.
fn start_driver(driver: &std::path::Path) -> (Child, u16) {
    match try_start_driver(driver) {
        Ok(started) => started,
        Err(first) => try_start_driver(driver)
            .unwrap_or_else(|again| panic!("chromedriver did not say its port: {first}, then {again}")),
    }
}

fn try_start_driver(driver: &std::path::Path) -> Result<(Child, u16), String> {
    let mut child = Command::new(driver)
        .arg("--port=0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("chromedriver starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // Reads the port line, then keeps the pipe drained so the driver never blocks on it.
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent
                && let Some(port) =
                    line.rsplit("on port ").next().filter(|_| line.contains("started successfully"))
            {
                let _ = tx.send(port.trim_end_matches('.').trim().parse::<u16>().ok());
                sent = true;
            }
        }
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(Some(port)) => Ok((child, port)),
        other => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("{other:?}"))
        }
    }
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}
