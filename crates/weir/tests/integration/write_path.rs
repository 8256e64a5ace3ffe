//! Epochs that no view can see (writes to tables no view reads) commit
//! without a round trip through the stream worker, and the views are
//! still there, at every epoch and after a restart.

use crate::common::{column, TestServer};

async fn without_views(client: &tokio_postgres::Client) -> u64 {
    column(client, "SHOW epochs_without_views").await[0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> String {
    column(client, sql).await[0].clone().unwrap()
}

#[tokio::test]
async fn epochs_no_view_reads_skip_the_stream_worker() {
    let mut server = TestServer::start_with(&["--checkpoint-interval", "off"]).await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE a (x INT);
             CREATE TABLE b (x INT);
             CREATE MATERIALIZED VIEW va AS SELECT count(*) AS n FROM a;
             INSERT INTO a VALUES (1), (2), (3);",
        )
        .await
        .unwrap();
    let before = without_views(&client).await;
    for i in 0..10 {
        client
            .batch_execute(&format!("INSERT INTO b VALUES ({i})"))
            .await
            .unwrap();
        // Every read sees the view, committed with each of these epochs.
        assert_eq!(count(&client, "SELECT n FROM va").await, "3");
    }
    let skipped = without_views(&client).await - before;
    assert!(skipped >= 10, "{skipped} epochs skipped the worker");

    // A write a view reads goes through the worker.
    client
        .batch_execute("INSERT INTO a VALUES (4)")
        .await
        .unwrap();
    assert_eq!(count(&client, "SELECT n FROM va").await, "4");
    assert_eq!(without_views(&client).await - before, skipped);

    // The manifests of the skipped epochs kept the view's state.
    client
        .batch_execute("INSERT INTO b VALUES (10)")
        .await
        .unwrap();
    server.restart_after_kill().await;
    let client = server.client().await;
    assert_eq!(count(&client, "SELECT n FROM va").await, "4");
    assert_eq!(count(&client, "SELECT count(*) FROM b").await, "11");

    // Right after a restart, too.
    for i in 11..14 {
        client
            .batch_execute(&format!("INSERT INTO b VALUES ({i})"))
            .await
            .unwrap();
    }
    server.restart_after_kill().await;
    let client = server.client().await;
    assert_eq!(count(&client, "SELECT n FROM va").await, "4");
    client
        .batch_execute("INSERT INTO a VALUES (5)")
        .await
        .unwrap();
    assert_eq!(count(&client, "SELECT n FROM va").await, "5");
}
