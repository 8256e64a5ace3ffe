//! Views over one source share its readers: a view created while others
//! read the source catches up on its own and then joins the shared reader
//! (one per share of the splits), views that read other columns widen what
//! it generates, and after a SIGKILL the restarted views share it again.
//! Every view stays exact over the rows its positions say it read.

use std::time::{Duration, Instant};

use weir_connectors::datagen::split_rows;

use crate::common::{column, sorted_rows, TestServer};

const WORKERS: usize = 2;

/// (view, query): they read different columns of `s`.
const VIEWS: &[(&str, &str)] = &[
    (
        "per_k",
        "SELECT k, count(*) AS n, sum(id) AS total FROM s GROUP BY k",
    ),
    ("overall", "SELECT count(*) AS n, max(id) AS top FROM s"),
    ("sampled", "SELECT id, pad FROM s WHERE id % 1000 = 0"),
];

#[tokio::test]
async fn views_over_one_source_share_its_readers() {
    let mut server = TestServer::start_with(&["--workers", &WORKERS.to_string()]).await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE SOURCE s (id BIGINT, k INT, pad TEXT) WITH (connector = 'datagen', \
             rows_per_second = '20000', fields.id.kind = 'sequence', fields.k.min = '0', \
             fields.k.max = '9', fields.pad.length = '8')",
        )
        .await
        .unwrap();
    for (name, query) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
        // The next view starts behind the shared reader.
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    every_share_feeds_every_view(&client, "after creation").await;
    check_views(&client, "after creation").await;
    // The source runs on: a shared reader opened again must pace from
    // where the whole source stands, not from its beginning (which would
    // hold it back as long as the source has run).
    tokio::time::sleep(Duration::from_secs(8)).await;
    drop(client);

    server.restart_after_kill().await;
    let client = server.client().await;
    check_views(&client, "after a restart").await;
    let read = || async {
        let rows = column(
            &client,
            "SELECT position FROM weir_source_readers WHERE view = 'per_k'",
        )
        .await;
        rows[0].as_ref().unwrap().parse::<u64>().unwrap()
    };
    let resumed = read().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while read().await < resumed + 20_000 {
        assert!(
            Instant::now() < deadline,
            "after a restart the source did not move on at its rate"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    every_share_feeds_every_view(&client, "after a restart").await;
    check_views(&client, "after a restart, shared").await;
    server.kill();
}

/// Waits until the source is read by one reader per share, each feeding
/// every view.
async fn every_share_feeds_every_view(client: &tokio_postgres::Client, context: &str) {
    let want: Vec<Vec<Option<String>>> = (0..WORKERS)
        .map(|_| vec![Some("s".to_string()), Some(VIEWS.len().to_string())])
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let readers = sorted_rows(client, "SELECT source, views FROM weir_shared_readers").await;
        if readers == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{context}: shared readers {readers:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads each view and its split positions at one epoch, and checks the
/// view against the rows before those positions (`id` is the row's index
/// plus one, `k` is not checked by value but by its counts' sum).
async fn check_views(client: &tokio_postgres::Client, context: &str) {
    client.batch_execute("BEGIN").await.unwrap();
    let splits = sorted_rows(
        client,
        "SELECT view, split, position FROM weir_source_splits",
    )
    .await;
    let per_k = sorted_rows(client, "SELECT n, total FROM per_k").await;
    let overall = sorted_rows(client, "SELECT n, top FROM overall").await;
    let sampled = column(client, "SELECT id FROM sampled").await;
    client.batch_execute("COMMIT").await.unwrap();

    let ids_of = |view: &str| -> Vec<u64> {
        let mut ids: Vec<u64> = splits
            .iter()
            .filter(|r| r[0].as_deref() == Some(view))
            .flat_map(|r| {
                let split: u32 = r[1].as_ref().unwrap().parse().unwrap();
                let position: u64 = r[2].as_ref().unwrap().parse().unwrap();
                split_rows(split, position).flatten()
            })
            .map(|row| row + 1)
            .collect();
        ids.sort_unstable();
        ids
    };
    let number = |v: &Option<String>| -> u64 { v.as_ref().unwrap().parse().unwrap() };

    let ids = ids_of("per_k");
    assert!(!ids.is_empty(), "{context}: per_k read nothing");
    let n: u64 = per_k.iter().map(|r| number(&r[0])).sum();
    let total: u64 = per_k.iter().map(|r| number(&r[1])).sum();
    assert_eq!(
        (n, total),
        (ids.len() as u64, ids.iter().sum()),
        "{context}: per_k"
    );

    let ids = ids_of("overall");
    assert_eq!(
        overall,
        vec![vec![
            Some(ids.len().to_string()),
            ids.last().map(u64::to_string)
        ]],
        "{context}: overall"
    );

    let want: Vec<u64> = ids_of("sampled")
        .into_iter()
        .filter(|id| id % 1000 == 0)
        .collect();
    let mut got: Vec<u64> = sampled.iter().map(number).collect();
    got.sort_unstable();
    assert_eq!(got, want, "{context}: sampled");
}
