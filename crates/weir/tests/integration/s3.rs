//! S3 as the state store: the server commits to and recovers from an
//! S3-compatible server on loopback: the one `WEIR_TEST_S3_ENDPOINT` names
//! (`.ci/run` starts moto and sets it), or else a moto server each test
//! starts and stops itself. Without either the tests fail.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{column, TestServer};

/// An S3-compatible server (moto) this test started on a free loopback
/// port, with a bucket `weir`; stopped by its process id when dropped.
pub struct Moto {
    child: Child,
}

impl Drop for Moto {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Starts `moto_server` on loopback and creates the bucket; returns it with
/// its endpoint. Fails (the test cannot run) when moto is not installed.
fn start_moto() -> (Moto, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "the S3 tests need an S3-compatible server: install moto \
                 (`pip install 'moto[server]'`) or set WEIR_TEST_S3_ENDPOINT to a server \
                 with a bucket `weir` ({e})"
            )
        });
    let moto = Moto { child };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Moto does not check signatures: an unsigned PUT creates the bucket.
        let created = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            write!(
                s,
                "PUT /weir HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )?;
            let mut reply = String::new();
            s.read_to_string(&mut reply)?;
            Ok(reply.starts_with("HTTP/1.1 200"))
        });
        if created.unwrap_or(false) {
            return (moto, format!("http://127.0.0.1:{port}"));
        }
        assert!(
            Instant::now() < deadline,
            "moto_server did not start on port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The test S3 server's endpoint: `WEIR_TEST_S3_ENDPOINT` if set
/// (`.ci/run` sets it), else a moto server started here, which lives as
/// long as the returned guard.
pub fn test_endpoint() -> (String, Option<Moto>) {
    match std::env::var("WEIR_TEST_S3_ENDPOINT") {
        Ok(endpoint) => (endpoint, None),
        Err(_) => {
            let (moto, endpoint) = start_moto();
            (endpoint, Some(moto))
        }
    }
}

/// The environment a server reads `endpoint`'s bucket with.
pub fn server_env(endpoint: &str) -> [(&'static str, &str); 5] {
    [
        ("AWS_ACCESS_KEY_ID", "weir"),
        ("AWS_SECRET_ACCESS_KEY", "weir-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT", endpoint),
        ("AWS_ALLOW_HTTP", "true"),
    ]
}

/// A server whose state lives under a fresh prefix of the test S3 server:
/// `WEIR_TEST_S3_ENDPOINT` if set (`.ci/run` sets it), else a moto server
/// started here, which lives as long as the returned guard.
async fn s3_server() -> (TestServer, Option<Moto>) {
    s3_server_with(&[]).await
}

/// [`s3_server`] with extra flags.
pub async fn s3_server_with(args: &[&str]) -> (TestServer, Option<Moto>) {
    let (endpoint, moto) = test_endpoint();
    let prefix = format!(
        "s3://weir/test-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let envs = server_env(&endpoint);
    let mut all = vec!["--state-url", prefix.as_str()];
    all.extend_from_slice(args);
    let server = TestServer::start_with_env(&all, &envs).await;
    (server, moto)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_cycles_on_s3_lose_nothing() {
    let (server, _moto) = s3_server().await;
    crate::crash::kill_cycles(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagen_views_on_s3_are_exact_through_sigkill_cycles() {
    let (server, _moto) = s3_server().await;
    crate::sources::kill_cycles(server).await;
}

#[tokio::test]
async fn state_on_s3_survives_sigkill() {
    let (mut server, _moto) = s3_server().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE s (id INT PRIMARY KEY, v TEXT);
             INSERT INTO s VALUES (1, 'one'), (2, 'two'), (3, 'three');
             UPDATE s SET v = 'TWO' WHERE id = 2;
             DELETE FROM s WHERE id = 3;",
        )
        .await
        .unwrap();
    server.restart_after_kill().await;
    let client = server.client().await;
    assert_eq!(
        column(&client, "SELECT id || v FROM s ORDER BY id").await,
        vec![Some("1one".into()), Some("2TWO".into())]
    );
    // The local data folder was not used.
    assert!(!server.data_dir.join("manifest").exists());
}
