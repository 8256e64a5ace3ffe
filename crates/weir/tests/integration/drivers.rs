//! Sessions of real client drivers: the scripts in `tests/drivers/`, each
//! run against a fresh server. What each covers is in `docs/drivers.md`.
//! They need `python3` with the drivers installed (`.ci/run` installs
//! them); a missing driver fails the test.

use std::path::Path;
use std::process::Command;

use crate::common::TestServer;

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers");

/// Runs `script` with `dsn` and asserts that it ended with "ok".
fn run_session(script: &str, dsn: &str) {
    let path = Path::new(SCRIPTS).join(script);
    let output = Command::new("python3")
        .arg(&path)
        .arg(dsn)
        .output()
        .expect("python3 must be installed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.trim_end().ends_with("ok"),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

#[tokio::test]
async fn psycopg_session() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    run_session(
        "psycopg_session.py",
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir"),
    );
}

#[tokio::test]
async fn asyncpg_session() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    run_session(
        "asyncpg_session.py",
        &format!("postgresql://weir@127.0.0.1:{port}/weir"),
    );
}
