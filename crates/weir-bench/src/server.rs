//! The `weir` server under benchmark: the release binary next to this one.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_postgres::{Client, NoTls};

/// A `weir` process on a temporary data folder, killed on drop.
pub struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `weir` from the same folder as this binary.
    pub async fn start() -> anyhow::Result<Server> {
        let exe = std::env::current_exe()?
            .parent()
            .context("binary folder")?
            .join("weir");
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(&exe)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let server = Server {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.client().await.is_err() {
            anyhow::ensure!(Instant::now() < deadline, "weir did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(server)
    }

    /// A new connection.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let conn = format!("host=127.0.0.1 port={} user=weir dbname=weir", self.port);
        let (client, connection) = tokio_postgres::connect(&conn, NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
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
