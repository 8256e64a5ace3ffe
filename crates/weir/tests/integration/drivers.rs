//! Sessions of real client drivers: the scripts in `tests/drivers/`, each
//! run against a fresh server. What each covers is in `docs/drivers.md`.
//! They need `python3` with psycopg, asyncpg and SQLAlchemy, `node` with
//! pg, pg-cursor, pg-copy-streams and postgres installed where
//! `WEIR_TEST_NODE_MODULES` points, and a JDK with pgjdbc
//! (`WEIR_TEST_JDBC_JAR`, Debian's by default); `.ci/run` installs them
//! all, and a missing driver fails the test.

use std::path::Path;
use std::process::Command;

use crate::common::TestServer;

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers");

/// Runs `script` with `dsn` and asserts that it ended with "ok".
fn run_session(script: &str, dsn: &str) {
    let path = Path::new(SCRIPTS).join(script);
    let mut command = if script.ends_with(".java") {
        // pgjdbc from Debian's libpostgresql-jdbc-java; the JDK runs the
        // session's one source file without a build step.
        let jar = std::env::var("WEIR_TEST_JDBC_JAR")
            .unwrap_or_else(|_| "/usr/share/java/postgresql.jar".into());
        assert!(
            Path::new(&jar).exists(),
            "the JDBC session needs pgjdbc at {jar} (apt install libpostgresql-jdbc-java; .ci/run does)"
        );
        let mut java = Command::new("java");
        java.arg("-cp").arg(jar);
        java
    } else if script.ends_with(".js") {
        let modules = std::env::var("WEIR_TEST_NODE_MODULES").unwrap_or_else(|_| {
            panic!(
                "the node driver sessions need WEIR_TEST_NODE_MODULES, a node_modules folder \
                 with pg, pg-cursor, pg-copy-streams and postgres (.ci/run installs them)"
            )
        });
        let mut node = Command::new("node");
        node.env("NODE_PATH", modules);
        node
    } else {
        Command::new("python3")
    };
    let output = command
        .arg(&path)
        .arg(dsn)
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
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

#[tokio::test]
async fn sqlalchemy_session() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    run_session(
        "sqlalchemy_session.py",
        &format!("weir@127.0.0.1:{port}/weir"),
    );
}

#[tokio::test]
async fn node_pg_session() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    run_session(
        "node_pg_session.js",
        &format!("postgresql://weir@127.0.0.1:{port}/weir"),
    );
}

#[tokio::test]
async fn postgres_js_session() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    run_session(
        "postgres_js_session.js",
        &format!("postgresql://weir@127.0.0.1:{port}/weir"),
    );
}

#[tokio::test]
async fn jdbc_session() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    run_session(
        "JdbcSession.java",
        &format!("jdbc:postgresql://127.0.0.1:{port}/weir?user=weir"),
    );
}
