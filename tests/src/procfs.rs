//! What the kernel says about a process: resident memory and threads from `/proc/<pid>/status`,
//! CPU time from `/proc/<pid>/stat`. Benchmarks print these beside their figures.

use anyhow::{Context, Result, ensure};

/// One reading of `/proc/<pid>/status`, in kB as the kernel reports them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Status {
    pub rss: u64,
    pub hwm: u64,
    pub anon: u64,
    pub file: u64,
    pub threads: u64,
}

/// Reads `/proc/<pid>/status`.
pub fn status(pid: u32) -> Result<Status> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let mut reading = Status::default();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else { continue };
        let number = || rest.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        match name {
            "VmRSS" => reading.rss = number(),
            "VmHWM" => reading.hwm = number(),
            "RssAnon" => reading.anon = number(),
            "RssFile" => reading.file = number(),
            "Threads" => reading.threads = number(),
            _ => {}
        }
    }
    ensure!(reading.rss > 0, "{path} has no VmRSS line");
    Ok(reading)
}

/// The CPU time (user and system) the process has used, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis are
    // plain: state is field 3, utime field 14 and stime field 15.
    let rest = text.rsplit_once(')').map(|(_, rest)| rest).context("no command name in /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).context("a short /proc/<pid>/stat");
    // Linux reports these in USER_HZ, which is 100 on every architecture it supports.
    Ok((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// Megabytes from the kernel's kilobytes.
pub fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}
