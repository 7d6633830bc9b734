//! Real headless Chromium (Debian's `chromium`) driven over the Chrome DevTools protocol, for
//! the tests and benchmarks of the node's `/memory` page: open a page, evaluate JavaScript in
//! it, move the mouse, type, and take screenshots.
//!
//! The protocol runs over `--remote-debugging-pipe` (JSON messages ending in a NUL byte, the
//! browser reading fd 3 and writing fd 4), so no port is opened and no websocket client is
//! needed. `tests/page/setup.sh` installs Chromium; without it a test fails with a clear
//! message when `CI` is set and skips with its reason otherwise.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::wait_for;

/// Where Debian's package puts the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long one protocol call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Console lines and page errors kept for failure messages.
const CONSOLE_LINES: usize = 100;

/// The window every page is laid out in.
pub const WINDOW: (u32, u32) = (1440, 900);

/// Why Chromium cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    if Path::new(CHROMIUM).is_file() {
        None
    } else {
        Some(format!("{CHROMIUM} is missing: run tests/page/setup.sh (it installs Debian's chromium)"))
    }
}

/// Returns `true` when Chromium can run. Otherwise fails the test when `CI` is set, or prints
/// why it skips and returns `false`.
pub fn available_or_skip(test: &str) -> bool {
    let Some(reason) = unavailable() else { return true };
    if std::env::var_os("CI").is_some() {
        panic!("{test}: headless Chromium cannot run: {reason}");
    }
    eprintln!("SKIPPED {test}: headless Chromium cannot run: {reason}");
    false
}

/// The cargo target directory the running test or benchmark binary was built in (where
/// screenshots go).
pub fn target_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the running binary")?;
    let mut dir = exe.parent().context("the binary has no directory")?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent().context("deps has no parent")?;
    }
    Ok(dir.parent().context("the profile directory has no parent")?.to_owned())
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A running headless Chromium, killed when dropped.
#[derive(Debug)]
pub struct Browser {
    child: Child,
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Pending,
    console: Arc<Mutex<VecDeque<String>>>,
    next_id: AtomicU64,
    reader: JoinHandle<()>,
    log: PathBuf,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.reader.abort();
        let _ = self.child.start_kill();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Browser {
    /// Starts Chromium headless with a fresh profile, talking the protocol over a pipe.
    pub async fn launch() -> Result<Self> {
        let profile = tempfile::tempdir().context("a profile directory")?;
        let log = profile.path().join("chromium.log");
        let file = std::fs::File::create(&log).context("creating the browser's log")?;
        let (width, height) = WINDOW;
        let flags = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--hide-scrollbars".to_owned(),
            "--force-device-scale-factor=1".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().join("profile").display()),
            "--remote-debugging-pipe".to_owned(),
        ];
        // The browser reads commands on fd 3 and writes answers on fd 4: the shell points them
        // at our pipes, then execs it.
        let mut child = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
            .arg(CHROMIUM)
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawning {CHROMIUM}"))?;
        let stdin = child.stdin.take().context("the browser's command pipe")?;
        let stdout = child.stdout.take().context("the browser's answer pipe")?;
        let pending: Pending = Arc::default();
        let console: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let reader = tokio::spawn(read_messages(BufReader::new(stdout), pending.clone(), console.clone()));
        Ok(Self {
            child,
            stdin: tokio::sync::Mutex::new(stdin),
            pending,
            console,
            next_id: AtomicU64::new(1),
            reader,
            log,
            _profile: profile,
        })
    }

    /// Sends one protocol command (to a page when `session` is given) and returns its result.
    async fn call(&self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let mut bytes = serde_json::to_vec(&message)?;
        bytes.push(0);
        {
            let mut stdin = self.stdin.lock().await;
            stdin.write_all(&bytes).await.with_context(|| format!("sending {method} to the browser"))?;
            stdin.flush().await?;
        }
        let answer = tokio::time::timeout(CALL_TIMEOUT, rx)
            .await
            .map_err(|_| anyhow!("{method}: no answer from the browser within {CALL_TIMEOUT:?}\n{}", self.log_tail()))?
            .map_err(|_| anyhow!("{method}: the browser went away\n{}", self.log_tail()))?;
        if let Some(error) = answer.get("error") {
            bail!("{method} failed: {error}");
        }
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Opens a new tab on `url`, with the page's events on.
    pub async fn open(&self, url: &str) -> Result<Page<'_>> {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" })).await?;
        let target_id = target["targetId"].as_str().context("createTarget gave no targetId")?;
        let attached =
            self.call(None, "Target.attachToTarget", json!({ "targetId": target_id, "flatten": true })).await?;
        let session = attached["sessionId"].as_str().context("attachToTarget gave no sessionId")?.to_owned();
        let page = Page { browser: self, session };
        page.call("Runtime.enable", json!({})).await?;
        page.call("Page.enable", json!({})).await?;
        let (width, height) = WINDOW;
        page.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )
        .await?;
        page.navigate(url).await?;
        Ok(page)
    }

    /// The page errors and console lines seen so far, for failure messages.
    pub fn console(&self) -> String {
        lock(&self.console).iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// The end of the browser's own log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!("--- chromium log ---\n{}", lines[lines.len().saturating_sub(20)..].join("\n"))
    }
}

/// Routes the browser's messages: answers to their callers, console lines and page errors to
/// a bounded log.
async fn read_messages(
    mut stdout: BufReader<tokio::process::ChildStdout>,
    pending: Pending,
    console: Arc<Mutex<VecDeque<String>>>,
) {
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match stdout.read_until(0, &mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if buffer.last() == Some(&0) {
            buffer.pop();
        }
        let Ok(message) = serde_json::from_slice::<Value>(&buffer) else { continue };
        if let Some(id) = message.get("id").and_then(Value::as_u64) {
            if let Some(tx) = lock(&pending).remove(&id) {
                let _ = tx.send(message);
            }
            continue;
        }
        let line = match message["method"].as_str() {
            Some("Runtime.exceptionThrown") => {
                let details = &message["params"]["exceptionDetails"];
                let description = details["exception"]["description"].as_str().or(details["text"].as_str());
                format!("page error: {}", description.unwrap_or("?"))
            }
            Some("Runtime.consoleAPICalled") => {
                let params = &message["params"];
                let args: Vec<String> = params["args"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|v| v["value"].as_str().map_or_else(|| v["value"].to_string(), str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                format!("console.{}: {}", params["type"].as_str().unwrap_or("log"), args.join(" "))
            }
            _ => continue,
        };
        let mut console = lock(&console);
        if console.len() == CONSOLE_LINES {
            console.pop_front();
        }
        console.push_back(line);
    }
}

/// One tab.
#[derive(Debug)]
pub struct Page<'a> {
    browser: &'a Browser,
    session: String,
}

impl Page<'_> {
    async fn call(&self, method: &str, params: Value) -> Result<Value> {
        self.browser.call(Some(&self.session), method, params).await
    }

    /// Loads `url` in this tab and waits for its document to be parsed.
    pub async fn navigate(&self, url: &str) -> Result<()> {
        let answer = self.call("Page.navigate", json!({ "url": url })).await?;
        if let Some(error) = answer.get("errorText").and_then(Value::as_str) {
            bail!("loading {url}: {error}");
        }
        self.wait_for("the document to load", Duration::from_secs(15), "document.readyState !== 'loading'").await?;
        Ok(())
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value.
    pub async fn eval(&self, expression: &str) -> Result<Value> {
        let answer = self
            .call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }))
            .await?;
        if let Some(details) = answer.get("exceptionDetails") {
            bail!(
                "{expression}: threw {}",
                details["exception"]["description"].as_str().unwrap_or(&details.to_string())
            );
        }
        Ok(answer["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// Waits until `expression` is truthy in the page and returns its value; fails after
    /// `timeout`, naming `what` and quoting the page's console.
    pub async fn wait_for(&self, what: &str, timeout: Duration, expression: &str) -> Result<Value> {
        let waited = wait_for(timeout, what, async || {
            let value = self.eval(expression).await.ok()?;
            let truthy = !matches!(&value, Value::Null | Value::Bool(false))
                && value.as_str() != Some("")
                && value.as_f64() != Some(0.0);
            truthy.then_some(value)
        })
        .await;
        waited.with_context(|| format!("the page's console:\n{}", self.browser.console()))
    }

    /// Moves the mouse to `(x, y)` in the page's coordinates.
    pub async fn mouse_move(&self, x: f64, y: f64) -> Result<()> {
        self.call("Input.dispatchMouseEvent", json!({ "type": "mouseMoved", "x": x, "y": y })).await?;
        Ok(())
    }

    /// Focuses the element `selector` and types `text` into it, as a keyboard would.
    pub async fn type_into(&self, selector: &str, text: &str) -> Result<()> {
        let found = self.eval(&format!("(() => {{ const e = document.querySelector({selector:?}); if (!e) return false; e.focus(); return true; }})()")).await?;
        if found != Value::Bool(true) {
            bail!("no element {selector} to type into");
        }
        self.call("Input.insertText", json!({ "text": text })).await?;
        Ok(())
    }

    /// Presses Enter in the focused element.
    pub async fn press_enter(&self) -> Result<()> {
        for kind in ["keyDown", "keyUp"] {
            let mut event = json!({ "type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13 });
            if kind == "keyDown" {
                event["text"] = json!("\r");
            }
            self.call("Input.dispatchKeyEvent", event).await?;
        }
        Ok(())
    }

    /// Saves a PNG of the page's viewport at `path`.
    pub async fn screenshot(&self, path: &Path) -> Result<()> {
        let answer = self.call("Page.captureScreenshot", json!({ "format": "png" })).await?;
        let data = answer["data"].as_str().context("captureScreenshot gave no data")?;
        let bytes = data_encoding::BASE64.decode(data.as_bytes()).context("decoding the screenshot")?;
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
    }
}
