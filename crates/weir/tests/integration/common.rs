//! A `weir` server process for tests.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

/// A running `weir` process, killed when dropped.
pub struct TestServer {
    child: Option<Child>,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its data folder.
    pub data_dir: PathBuf,
    extra_args: Vec<String>,
    envs: Vec<(String, String)>,
    password: Option<String>,
    _temp: Option<tempfile::TempDir>,
}

/// A free port on 127.0.0.1.
/// How many times a test server is started on newly picked ports before
/// giving up.
const START_TRIES: usize = 4;

/// Whether a server's log says a port it was given was taken: ports are
/// picked free, then bound by the server, and another test (or the
/// server's other listener, picked the same way) may bind one in between.
fn taken_port(log: &str) -> bool {
    log.contains("Address already in use")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("local addr")
        .port()
}

impl TestServer {
    /// Starts a server with a fresh data folder.
    pub async fn start() -> TestServer {
        Self::start_with(&[]).await
    }

    /// Starts a server that serves its metrics on a free port; returns the
    /// port too (see [`counter`]).
    pub async fn start_with_metrics() -> (Self, u16) {
        for _ in 0..START_TRIES {
            let port = free_port();
            let metrics = format!("127.0.0.1:{port}");
            match Self::try_start(&["--metrics-listen", &metrics], &[]).await {
                Ok(server) => return (server, port),
                Err(log) if taken_port(&log) => continue,
                Err(log) => panic!("{log}"),
            }
        }
        panic!("no free ports after {START_TRIES} tries")
    }

    /// Starts a server with a fresh data folder and extra flags.
    pub async fn start_with(args: &[&str]) -> TestServer {
        Self::start_with_env(args, &[]).await
    }

    /// Starts a server with a fresh data folder, extra flags and extra
    /// environment variables.
    pub async fn start_with_env(args: &[&str], envs: &[(&str, &str)]) -> TestServer {
        for _ in 0..START_TRIES {
            match Self::try_start(args, envs).await {
                Ok(server) => return server,
                Err(log) if taken_port(&log) => continue,
                Err(log) => panic!("{log}"),
            }
        }
        panic!("no free port after {START_TRIES} tries")
    }

    /// One try at starting a server with a fresh data folder: the server's
    /// log if it exited during startup.
    async fn try_start(args: &[&str], envs: &[(&str, &str)]) -> Result<TestServer, String> {
        let temp = tempfile::tempdir().expect("temp dir");
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut server = Self::spawn(temp.path(), args, envs);
        server._temp = Some(temp);
        server.wait_ready().await?;
        Ok(server)
    }

    /// Starts a server on an existing data folder (a restored backup, say).
    pub async fn start_in(data_dir: &Path) -> TestServer {
        let mut server = Self::spawn(data_dir, &[], Vec::new());
        server
            .wait_ready()
            .await
            .unwrap_or_else(|log| panic!("{log}"));
        server
    }

    fn spawn(data_dir: &Path, args: &[&str], envs: Vec<(String, String)>) -> TestServer {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let extra_args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(data_dir.with_extension("log"))
            .expect("server log file");
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .args(&extra_args)
            .env("RUST_LOG", "warn")
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start weir");
        let password = extra_args
            .iter()
            .position(|a| a == "--password")
            .and_then(|i| extra_args.get(i + 1).cloned());
        TestServer {
            child: Some(child),
            addr,
            data_dir: data_dir.to_path_buf(),
            extra_args,
            envs,
            password,
            _temp: None,
        }
    }

    /// Waits until the server answers; the exit status and the server's
    /// log if it exits first.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(client) = self.try_connect().await {
                if client.simple_query("SELECT 1").await.is_ok() {
                    return Ok(());
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = std::fs::read_to_string(self.data_dir.with_extension("log"))
                    .unwrap_or_default();
                return Err(format!("weir exited during startup: {status}\n{log}"));
            }
            assert!(Instant::now() < deadline, "weir did not start in time");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn try_connect(&self) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = tokio_postgres::connect(&self.conn_string(), NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// A libpq-style connection string.
    pub fn conn_string(&self) -> String {
        let password = match &self.password {
            Some(p) => format!(" password={p}"),
            None => String::new(),
        };
        format!(
            "host=127.0.0.1 port={} user=weir dbname=weir{password}",
            self.addr.port()
        )
    }

    /// A new client connection.
    pub async fn client(&self) -> Client {
        self.try_connect().await.expect("connect to weir")
    }

    /// Whether the server process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The server process's peak resident memory so far (`VmHWM`), in KiB.
    pub fn peak_memory_kib(&self) -> u64 {
        let pid = self.child.as_ref().expect("running").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }

    /// Kills the server with SIGKILL and waits for it to die.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe {
                libc::kill(child.id() as i32, libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }

    /// Stops the server with SIGTERM and waits for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        child.wait().expect("wait for weir")
    }

    /// Waits up to `timeout` for the server to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Sets `flag` to `value` for the next restart.
    pub fn set_arg(&mut self, flag: &str, value: &str) {
        match self.extra_args.iter().position(|a| a == flag) {
            Some(i) => self.extra_args[i + 1] = value.to_owned(),
            None => self.extra_args.extend([flag.to_owned(), value.to_owned()]),
        }
    }

    /// Kills the server and starts it again on the same data folder.
    pub async fn restart_after_kill(&mut self) {
        self.kill();
        let args: Vec<&str> = self.extra_args.iter().map(String::as_str).collect();
        let mut fresh = Self::spawn(&self.data_dir, &args, self.envs.clone());
        self.child = fresh.child.take();
        self.addr = fresh.addr;
        self.wait_ready()
            .await
            .unwrap_or_else(|log| panic!("{log}"));
    }
}

impl Drop for TestServer {
    /// Stops the server. Its log goes with a fresh data folder, unless the
    /// test is failing: then it stays, and its path is printed.
    fn drop(&mut self) {
        self.kill();
        if self._temp.is_none() {
            return;
        }
        let log = self.data_dir.with_extension("log");
        if std::thread::panicking() {
            eprintln!("server log: {}", log.display());
        } else {
            let _ = std::fs::remove_file(log);
        }
    }
}

/// A protocol 3.0 startup packet for user and database `weir`.
pub fn startup_packet() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0weir\0database\0weir\0\0");
    let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend(body);
    packet
}

/// Creates a materialized view for each (name, query).
pub async fn create_views(client: &Client, views: &[(&str, &str)]) {
    for (name, query) in views {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("view {name}: {e}"));
    }
}

/// Waits until `done` holds, or `limit` passes (a slow machine then goes
/// on with less done; callers assert what they need).
pub async fn wait_until(limit: Duration, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() && started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The first column of every row of a simple query, as text.
pub async fn column(client: &Client, sql: &str) -> Vec<Option<String>> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_owned)),
            _ => None,
        })
        .collect()
}

/// The SQLSTATE of a failed statement.
pub async fn sqlstate(client: &Client, sql: &str) -> String {
    let err = client
        .simple_query(sql)
        .await
        .expect_err(&format!("{sql} should fail"));
    err.code()
        .unwrap_or_else(|| panic!("{sql}: no SQLSTATE in {err}"))
        .code()
        .to_owned()
}

/// The rows of a query as text, sorted (a view's rows have no order).
pub async fn sorted_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    outcome(client, sql)
        .await
        .unwrap_or_else(|code| panic!("{sql}: {code}"))
}

/// A query's rows as text, sorted, or its SQLSTATE and message (one
/// execution).
pub async fn outcome(client: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|e| match e.as_db_error() {
            Some(db) => format!("{} {}", db.code().code(), db.message()),
            None => e.to_string(),
        })?;
    let mut rows: Vec<Vec<Option<String>>> = messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    rows.sort();
    Ok(rows)
}

/// Asserts that each materialized view in `views` (name, query) holds what
/// its query returns, all read at one epoch.
pub async fn assert_views_match(client: &Client, views: &[(&str, &str)], context: &str) {
    client.batch_execute("FLUSH; BEGIN").await.unwrap();
    for (name, query) in views {
        let view = sorted_rows(client, &format!("SELECT * FROM {name}")).await;
        let batch = sorted_rows(client, query).await;
        assert_eq!(view, batch, "{context}: view {name} differs from its query");
    }
    client.batch_execute("COMMIT").await.unwrap();
}

/// The value of counter `name` on the metrics page at 127.0.0.1:`port`.
pub fn counter(port: u16, name: &str) -> usize {
    let page = http_get(port, "/metrics");
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name}: {page}"))
}

/// A plain HTTP GET of `path` on 127.0.0.1:`port` (the metrics endpoint).
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}
