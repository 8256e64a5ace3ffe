//! A PostgreSQL server for tests that compare with PostgreSQL or deliver
//! into it: the one `WEIR_TEST_POSTGRES_URL` names (`.ci/run` starts one
//! on loopback), or else one started here from the installed PostgreSQL
//! binaries on a free loopback port, stopped by its process id. Without
//! either, the tests that need it fail.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

/// The server tests use, and its connection string; the server is `None`
/// when `WEIR_TEST_POSTGRES_URL` names one.
pub fn server() -> (Option<Postgres>, String) {
    match std::env::var("WEIR_TEST_POSTGRES_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let (server, url) = start_postgres();
            (Some(server), url)
        }
    }
}

/// A fresh database `name` on [`server`]: the server, and the connection
/// string of the database.
pub async fn fresh_database(name: &str) -> (Option<Postgres>, String) {
    let (server, url) = server();
    let admin = connect(&url).await;
    // A logical replication slot of an earlier run holds the database.
    let terminated = admin
        .execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
             WHERE database = $1 AND active_pid IS NOT NULL",
            &[&name],
        )
        .await
        .unwrap();
    if terminated > 0 {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for statement in [
        format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE database = '{name}' AND NOT active"
        ),
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin.batch_execute(&statement).await.unwrap();
    }
    (server, format!("{url} dbname={name}"))
}

/// Where connection string `url` points: host, port, user and database,
/// for a connector's options.
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub database: String,
}

impl Endpoint {
    pub fn of(url: &str) -> Endpoint {
        let config = tokio_postgres::Config::from_str(url).expect("a connection string");
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            other => panic!("the test's PostgreSQL must listen on TCP, not {other:?}"),
        };
        Endpoint {
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            user: config.get_user().unwrap_or("postgres").to_owned(),
            database: config.get_dbname().expect("a database").to_owned(),
        }
    }
}

/// A PostgreSQL server this test started; stopped by its process id.
pub struct Postgres {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

impl Postgres {
    /// Fast shutdown (SIGTERM would wait for the clients to leave); false
    /// if it took over 60 s and the server was killed. A shutdown still
    /// waits for logical replication clients to confirm the WAL sent to
    /// them.
    fn stop(&mut self) -> bool {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                unsafe {
                    libc::kill(self.child.id() as i32, libc::SIGKILL);
                }
                let _ = self.child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }

    /// Stops the server and starts it again on the same data and port
    /// (a database fault its clients must ride out); fails if its clients
    /// hold its shutdown up.
    pub fn restart(&mut self) {
        assert!(
            self.stop(),
            "PostgreSQL did not shut down within 60 s: a replication client held it"
        );
        self.child = spawn_postgres(self.dir.path(), self.port);
        wait_listening(self.port);
    }
}

/// The newest installed PostgreSQL's `bin` folder.
fn postgres_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "the differential test needs PostgreSQL: install Debian's `postgresql` package \
             or set WEIR_TEST_POSTGRES_URL to a server on loopback"
        )
    })
}

/// The uid and gid of the `postgres` user, when running as root (which
/// PostgreSQL refuses to run as).
fn postgres_user() -> Option<(u32, u32)> {
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"postgres"))
            .then(|| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
            .flatten()
    })
}

/// Starts PostgreSQL on a free loopback port; returns it and its URL.
pub fn start_postgres() -> (Postgres, String) {
    let bin = postgres_bin();
    let dir = tempfile::tempdir().expect("temp dir");
    let user = postgres_user();
    let as_user = |command: &mut Command| {
        if let Some((uid, gid)) = user {
            command.uid(uid).gid(gid);
        }
    };
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown the data dir");
    }
    let data = dir.path().join("data");
    let mut initdb = Command::new(bin.join("initdb"));
    initdb
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        ])
        .arg("-D")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    as_user(&mut initdb);
    assert!(initdb.status().expect("run initdb").success(), "initdb");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = spawn_postgres(dir.path(), port);
    let server = Postgres { child, port, dir };
    wait_listening(port);
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    (server, url)
}

/// Starts `postgres` on the cluster in `dir`/data, listening on `port`.
fn spawn_postgres(dir: &std::path::Path, port: u16) -> Child {
    let mut postgres = Command::new(postgres_bin().join("postgres"));
    postgres
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
        // The postgres-cdc tests decode its WAL.
        .args(["-c", "wal_level=logical"])
        .arg("-k")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some((uid, gid)) = postgres_user() {
        postgres.uid(uid).gid(gid);
    }
    postgres.spawn().expect("start postgres")
}

/// Waits until a server listens on `port`.
fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "postgres did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Connects, retrying for 30 s while the server starts.
pub async fn connect(url: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio_postgres::connect(url, NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                return client;
            }
            Err(e) if Instant::now() > deadline => panic!("connect to {url}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
