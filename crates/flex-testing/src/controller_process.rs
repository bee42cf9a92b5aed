//! The controller as its own process (the release binary) for the benchmarks, and what is
//! read of it from /proc: its CPU time and memory are its own, not the sandbox's.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `flex-provisioner run` against the sandbox's kubeconfig, without leader election,
/// serving /readyz and /metrics on `addr`. `CONTROLLER_WRAPPER=heaptrack` (say) runs it
/// under that profiler.
pub fn start(kubeconfig: &std::path::Path, config_ns: &str, addr: std::net::SocketAddr) -> Child {
    let binary = crate::binary();
    let mut command = match std::env::var("CONTROLLER_WRAPPER") {
        Ok(wrapper) => {
            let mut c = Command::new(wrapper);
            c.arg(binary);
            c
        }
        Err(_) => Command::new(binary),
    };
    command
        .args([
            "run",
            &format!("--config-namespace={config_ns}"),
            &format!("--metrics-addr={addr}"),
            "--no-leader-elect",
        ])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the controller binary starts")
}

/// A free port on 127.0.0.1.
pub fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// (VmRSS, VmHWM) of a process, in MiB.
pub fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// User plus system CPU time of a process.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Whether `GET path` answers 200.
pub async fn http_ok(addr: std::net::SocketAddr, path: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out.starts_with("HTTP/1.1 200")
}

/// Waits until the process has used no CPU for `quiet`, up to `limit`; how long it took.
pub async fn settle(pid: u32, quiet: Duration, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut last = cpu_seconds(pid);
    let mut still_since = Instant::now();
    while start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = cpu_seconds(pid);
        if now - last > 0.005 {
            still_since = Instant::now();
        }
        last = now;
        if still_since.elapsed() >= quiet {
            break;
        }
    }
    start.elapsed()
}
