//! A throwaway PostgreSQL server for benchmarks that compare with it or
//! replicate from it: the newest installed PostgreSQL, on a free loopback
//! port, stopped on drop.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_postgres::{Client, NoTls};

/// A PostgreSQL server on a free loopback port, from the newest installed
/// PostgreSQL; stopped on drop.
pub struct Postgres {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Postgres {
    /// Starts one with its files under `dir` and the server `settings`
    /// (`name=value`).
    pub fn start(dir: &Path, settings: &[&str]) -> anyhow::Result<Postgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .context("PostgreSQL is not installed (Debian: postgresql)")?
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").exists())
            .max()
            .context("no PostgreSQL under /usr/lib/postgresql")?;
        let user = postgres_user();
        let root = dir.join("postgres");
        std::fs::create_dir_all(&root)?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&root, Some(uid), Some(gid))?;
        }
        let data = root.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "-D",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut postgres = Command::new(bin.join("postgres"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "max_connections=400"])
            .args(settings.iter().flat_map(|s| ["-c", s]))
            .arg("-k")
            .arg(&root)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = user {
            initdb.uid(uid).gid(gid);
            postgres.uid(uid).gid(gid);
        }
        anyhow::ensure!(initdb.status()?.success(), "initdb failed");
        let child = postgres.spawn()?;
        let server = Postgres { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "PostgreSQL did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    /// CPU time of the server's processes: the postmaster's own, its
    /// exited children's (which it has waited for), and its live
    /// children's (backends, WAL writer, checkpointer).
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        let postmaster = self.child.id();
        let mut ticks = process_ticks(postmaster, true)?;
        for entry in std::fs::read_dir("/proc")?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if parent(pid) == Some(postmaster) {
                // A backend that exited since the listing is counted by
                // the postmaster's children's time instead.
                ticks += process_ticks(pid, false).unwrap_or(0);
            }
        }
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Ok(Duration::from_secs_f64(ticks as f64 / per_second as f64))
    }

    /// A connection to its `postgres` database.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let url = format!(
                "host=127.0.0.1 port={} user=postgres dbname=postgres",
                self.port
            );
            match tokio_postgres::connect(&url, NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    return Ok(client);
                }
                Err(e) if Instant::now() > deadline => return Err(e.into()),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
        let _ = self.child.wait();
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (which is in
/// parentheses and may hold spaces): the state is the first.
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    Some(
        after
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// Process `pid`'s parent.
fn parent(pid: u32) -> Option<u32> {
    stat_fields(pid)?.first().map(|&p| p as u32)
}

/// Process `pid`'s user and system clock ticks, and with `children` those
/// of its children it has waited for.
fn process_ticks(pid: u32, children: bool) -> anyhow::Result<u64> {
    let fields = stat_fields(pid).context("no such process")?;
    // After the state: ppid, pgrp, session, tty, tpgid, flags, minflt,
    // cminflt, majflt, cmajflt, utime, stime, cutime, cstime.
    let own = fields[10] + fields[11];
    Ok(if children {
        own + fields[12] + fields[13]
    } else {
        own
    })
}

/// The `postgres` user's uid and gid when running as root (PostgreSQL
/// refuses to run as root).
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
