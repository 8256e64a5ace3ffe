//! Creating views over tables that already hold data while writers keep
//! writing: the views start from a snapshot and follow every change after
//! it exactly once, and a long backfill reports progress as it goes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use tokio_postgres::AsyncMessage;

use crate::common::{assert_views_match, TestServer};

const ROWS: u64 = 100_000;

const VIEWS: &[(&str, &str)] = &[
    (
        "by_k",
        "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS mx FROM big GROUP BY k",
    ),
    ("total", "SELECT count(*) AS n, sum(v) AS s FROM big"),
    (
        "pairs",
        "SELECT a.id, b.id AS other FROM big a JOIN big b ON a.id = b.v WHERE a.k = 3",
    ),
    ("top", "SELECT id, v FROM big ORDER BY v DESC, id LIMIT 10"),
];

/// Inserts, updates and deletes until `stop`; counts its statements.
async fn write(conn: String, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut next = ROWS;
    while !stop.load(Ordering::Relaxed) {
        let sql = match next % 3 {
            0 => format!(
                "INSERT INTO big VALUES ({next}, {}, {})",
                next % 10,
                next % 1000
            ),
            1 => format!("UPDATE big SET v = v + 1 WHERE id = {}", next * 7 % ROWS),
            _ => format!("DELETE FROM big WHERE id = {}", next * 13 % ROWS),
        };
        client.batch_execute(&sql).await.unwrap();
        done.fetch_add(1, Ordering::Relaxed);
        next += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_created_under_writes_follow_every_change_once() {
    let mut server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE big (id BIGINT PRIMARY KEY, k INT, v INT)")
        .await
        .unwrap();
    let data: String = (0..ROWS)
        .map(|i| format!("{i}\t{}\t{}\n", i % 10, i % 1000))
        .collect();
    let sink = client.copy_in("COPY big FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    futures::SinkExt::send(&mut sink, bytes::Bytes::from(data))
        .await
        .unwrap();
    sink.as_mut().finish().await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let writer = tokio::spawn(write(server.conn_string(), stop.clone(), done.clone()));

    // A connection whose NOTICEs are collected.
    let (creator, mut connection) =
        tokio_postgres::connect(&server.conn_string(), tokio_postgres::NoTls)
            .await
            .unwrap();
    let (sender, mut notices) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notice(notice) = message {
                let _ = sender.send(notice.message().to_owned());
            }
        }
    });
    crate::common::create_views(&creator, VIEWS).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    assert!(done.load(Ordering::Relaxed) > 0, "the writer made progress");
    assert_views_match(&client, VIEWS, "after creating views under writes").await;
    // The backfilled state was checkpointed: it survives a SIGKILL.
    drop(client);
    server.restart_after_kill().await;
    let client = server.client().await;
    client
        .batch_execute("INSERT INTO big VALUES (-1, 3, 5); DELETE FROM big WHERE id = 7")
        .await
        .unwrap();
    assert_views_match(&client, VIEWS, "after a restart").await;

    let mut progress = Vec::new();
    while let Ok(message) = notices.try_recv() {
        progress.push(message);
    }
    assert!(
        progress.iter().any(|m| m.contains("\"by_k\": backfilled")),
        "a large backfill reports progress: {progress:?}"
    );
}

/// Many views recomputing groups in one epoch: every recomputation runs
/// DataFusion's executor inside the epoch's tokio task, which must not
/// stall on tokio's cooperative budget (it once did, and hung the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_views_recompute_in_one_epoch() {
    const VIEWS: usize = 80;
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (k INT, v INT); INSERT INTO t VALUES (1, 1), (2, 2)")
        .await
        .unwrap();
    for i in 0..VIEWS {
        client
            .batch_execute(&format!(
                "CREATE MATERIALIZED VIEW m{i} AS SELECT k, max(v) + {i} AS top FROM t GROUP BY k"
            ))
            .await
            .unwrap();
    }
    let insert = client.batch_execute("INSERT INTO t VALUES (1, 10), (2, 20), (3, 30)");
    tokio::time::timeout(std::time::Duration::from_secs(120), insert)
        .await
        .expect("the epoch commits")
        .unwrap();
    let views: Vec<(String, String)> = (0..VIEWS)
        .map(|i| {
            (
                format!("m{i}"),
                format!("SELECT k, max(v) + {i} AS top FROM t GROUP BY k"),
            )
        })
        .collect();
    let views: Vec<(&str, &str)> = views
        .iter()
        .map(|(n, q)| (n.as_str(), q.as_str()))
        .collect();
    assert_views_match(&client, &views, "after one epoch through every view").await;
}
