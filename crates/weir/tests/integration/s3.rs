//! S3 as the state store: the server commits to and recovers from an
//! S3-compatible server on loopback (`.ci/run` starts moto and sets
//! `WEIR_TEST_S3_ENDPOINT`).

use crate::common::{column, TestServer};

/// A server whose state lives under a fresh prefix of the test S3 server,
/// or `None` (outside CI) when there is none.
async fn s3_server() -> Option<TestServer> {
    let Ok(endpoint) = std::env::var("WEIR_TEST_S3_ENDPOINT") else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must provide an S3-compatible server (WEIR_TEST_S3_ENDPOINT)"
        );
        eprintln!("skipped: set WEIR_TEST_S3_ENDPOINT to an S3 server with a bucket `weir`");
        return None;
    };
    let prefix = format!(
        "s3://weir/test-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let envs = [
        ("AWS_ACCESS_KEY_ID", "weir"),
        ("AWS_SECRET_ACCESS_KEY", "weir-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
    ];
    Some(TestServer::start_with_env(&["--state-url", &prefix], &envs).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_cycles_on_s3_lose_nothing() {
    if let Some(server) = s3_server().await {
        crate::crash::kill_cycles(server).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagen_views_on_s3_are_exact_through_sigkill_cycles() {
    if let Some(server) = s3_server().await {
        crate::sources::kill_cycles(server).await;
    }
}

#[tokio::test]
async fn state_on_s3_survives_sigkill() {
    let Some(mut server) = s3_server().await else {
        return;
    };
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
