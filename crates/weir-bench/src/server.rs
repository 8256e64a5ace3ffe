//! The `weir` server under benchmark: the release binary next to this one.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_postgres::{Client, NoTls};

/// A restart: when the new process started, and how long until it
/// accepted a connection.
pub struct Restart {
    started: Instant,
    /// Time until the server accepted a connection.
    pub accepting: Duration,
}

impl Restart {
    /// Time since the new process started.
    pub fn elapsed_since_start(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A `weir` process on a temporary data folder, killed on drop.
pub struct Server {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
}

fn spawn(dir: &std::path::Path, port: u16, args: &[String]) -> anyhow::Result<Child> {
    let exe = std::env::current_exe()?
        .parent()
        .context("binary folder")?
        .join("weir");
    Command::new(&exe)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))
}

impl Server {
    /// Starts `weir` from the same folder as this binary.
    pub async fn start() -> anyhow::Result<Server> {
        Self::start_with(&[]).await
    }

    /// Starts `weir` with extra flags.
    pub async fn start_with(args: &[&str]) -> anyhow::Result<Server> {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let child = spawn(dir.path(), port, &args)?;
        let server = Server {
            child,
            port,
            dir,
            args,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.client().await.is_err() {
            anyhow::ensure!(Instant::now() < deadline, "weir did not start");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Kills the server with SIGKILL, starts it on the same folder, and
    /// returns when it started and how long until it accepted a connection.
    pub async fn restart_after_kill(&mut self) -> anyhow::Result<Restart> {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
        let started = Instant::now();
        self.child = spawn(self.dir.path(), self.port, &self.args)?;
        self.wait_ready().await?;
        Ok(Restart {
            started,
            accepting: started.elapsed(),
        })
    }

    /// The port it listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its resident memory now (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        status_kib(self.child.id(), "VmRSS")
    }

    /// How many tables and views the newest manifest in the data folder
    /// stores orders for beside their base (`TableFiles::base_orders`).
    pub fn relations_with_stored_orders(&self) -> usize {
        let newest = std::fs::read_dir(self.dir.path().join("manifest"))
            .ok()
            .and_then(|entries| entries.filter_map(|e| Some(e.ok()?.path())).max());
        let manifest = newest
            .and_then(|path| std::fs::read(path).ok())
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
        manifest
            .as_ref()
            .and_then(|m| m["tables"].as_object())
            .map_or(0, |tables| {
                tables
                    .values()
                    .filter(|t| t.get("base_orders").is_some())
                    .count()
            })
    }

    /// Bytes in the data folder.
    pub fn state_bytes(&self) -> u64 {
        fn walk(dir: &std::path::Path) -> u64 {
            std::fs::read_dir(dir).map_or(0, |entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| {
                        let path = e.path();
                        if path.is_dir() {
                            walk(&path)
                        } else {
                            e.metadata().map_or(0, |m| m.len())
                        }
                    })
                    .sum()
            })
        }
        walk(self.dir.path())
    }

    /// User plus system CPU time the server process has used.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        process_cpu_time(self.child.id())
    }

    /// The server's peak resident memory so far (`VmHWM`), in KiB.
    pub fn peak_rss_kib(&self) -> anyhow::Result<u64> {
        peak_rss_kib(self.child.id())
    }

    /// A new connection.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let conn = format!("host=127.0.0.1 port={} user=weir dbname=weir", self.port);
        let (client, connection) = tokio_postgres::connect(&conn, NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }
}

/// User plus system CPU time process `pid` has used.
/// User plus system CPU time process `pid` has used.
pub fn process_cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which is in parentheses and may
    // hold spaces): state is field 3, utime 14 and stime 15.
    let after = stat.rsplit_once(')').context("stat format")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Ok(Duration::from_secs_f64(ticks as f64 / per_second as f64))
}

/// Process `pid`'s peak resident memory so far (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_kib(pid, "VmHWM")
}

/// A memory figure (`field`, in kB) of `/proc/<pid>/status`.
fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("{field} in /proc/{pid}/status"))
}

/// A process of a cluster other than the server (`--process` above 0),
/// killed on drop.
pub struct Compute {
    child: Child,
}

impl Compute {
    /// Starts process `process` of `cluster` with `workers` workers.
    pub fn start(cluster: &str, process: usize, workers: usize) -> anyhow::Result<Compute> {
        let exe = std::env::current_exe()?
            .parent()
            .context("binary folder")?
            .join("weir");
        let child = Command::new(&exe)
            .args(["--cluster", cluster, "--process", &process.to_string()])
            .args(["--workers", &workers.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        Ok(Compute { child })
    }

    /// User plus system CPU time it has used.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        process_cpu_time(self.child.id())
    }

    /// Its peak resident memory so far, in KiB.
    pub fn peak_rss_kib(&self) -> anyhow::Result<u64> {
        peak_rss_kib(self.child.id())
    }
}

impl Drop for Compute {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Waits until `query` answers true (NULL is not yet); fails after 30
/// minutes.
pub async fn wait_for(client: &Client, query: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let rows = client.query(query, &[]).await?;
        if rows
            .first()
            .is_some_and(|r| r.get::<_, Option<bool>>(0) == Some(true))
        {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "timed out: {query}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The one `bigint` a query returns (NULL as 0).
pub async fn count(client: &Client, query: &str) -> anyhow::Result<u64> {
    let value: Option<i64> = client.query_one(query, &[]).await?.get(0);
    Ok(value.unwrap_or(0) as u64)
}

/// Waits until sink `sink` has delivered `rows` rows: every row through
/// its query, then committed (`CHECKPOINT`), then no committed epoch
/// waiting for delivery.
pub async fn wait_delivered(client: &Client, sink: &str, rows: u64) -> anyhow::Result<()> {
    wait_for(
        client,
        &format!("SELECT rows_out = {rows} FROM weir_sink_deliveries WHERE sink = '{sink}'"),
    )
    .await?;
    client.batch_execute("CHECKPOINT").await?;
    wait_for(
        client,
        &format!("SELECT pending_epochs = 0 FROM weir_sink_deliveries WHERE sink = '{sink}'"),
    )
    .await
}
