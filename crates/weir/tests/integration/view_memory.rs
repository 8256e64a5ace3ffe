//! Each view's memory budget (`--view-memory-mb`): a view whose state
//! outgrows it fails alone with SQLSTATE 53200 and a hint, and the server,
//! its data and every other view go on; operators' state is visible in
//! `weir_view_operators`.

use crate::common::{column, sqlstate, TestServer};

/// Inserts keys `from..from + count` into `t`, each with value `v`.
async fn insert_keys(client: &tokio_postgres::Client, from: u64, count: u64) {
    client
        .batch_execute(&format!(
            "INSERT INTO t SELECT x, x % 1000 FROM generate_series({from}, {}) AS s(x)",
            from + count - 1
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_view_over_its_budget_fails_alone() {
    let mut server = TestServer::start_with(&["--view-memory-mb", "4"]).await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE t (k BIGINT, v BIGINT);
             CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(v) AS s FROM t;
             CREATE MATERIALIZED VIEW per_key AS SELECT k, count(*) AS n, max(v) AS top FROM t GROUP BY k;",
        )
        .await
        .unwrap();
    insert_keys(&client, 0, 1_000).await;
    client.batch_execute("CHECKPOINT").await.unwrap();

    // Both views run; their operators and outputs report their state.
    let groups = column(
        &client,
        "SELECT state_rows FROM weir_view_operators WHERE view = 'per_key' AND name = 'Output'",
    )
    .await;
    assert_eq!(groups, vec![Some("1000".to_owned())]);
    let bytes = column(
        &client,
        "SELECT sum(state_bytes) FROM weir_view_operators WHERE view = 'per_key'",
    )
    .await;
    let bytes: u64 = bytes[0].as_deref().unwrap().parse().unwrap();
    assert!(bytes > 1_000 * 16, "1,000 groups in {bytes} bytes");
    let operators = column(
        &client,
        "SELECT name FROM weir_view_operators WHERE view = 'total' ORDER BY operator",
    )
    .await;
    assert!(
        operators.len() >= 3 && operators.last().unwrap().as_deref() == Some("Output"),
        "{operators:?}"
    );

    // Hundreds of thousands of groups do not fit in 4 MiB.
    let mut inserted = 1_000;
    while inserted < 400_000 {
        insert_keys(&client, inserted, 50_000).await;
        inserted += 50_000;
    }
    client.batch_execute("CHECKPOINT").await.unwrap();
    let error = client
        .simple_query("SELECT count(*) FROM per_key")
        .await
        .expect_err("per_key is over its budget");
    let error = error.as_db_error().expect("a server error");
    assert_eq!(error.code().code(), "53200", "{error}");
    assert!(
        error.message().contains("budget of 4 MiB"),
        "{}",
        error.message()
    );
    assert!(
        error.hint().is_some_and(|h| h.contains("--view-memory-mb")),
        "{error:?}"
    );

    // The failure is listed, with its SQLSTATE, once committed.
    assert_eq!(
        column(
            &client,
            "SELECT view || ' ' || failed || ' ' || coalesce(sqlstate, '-') FROM weir_views ORDER BY view"
        )
        .await,
        vec![
            Some("per_key true 53200".to_owned()),
            Some("total false -".to_owned())
        ]
    );

    // The other view and the table go on.
    let expected = inserted.to_string();
    assert_eq!(
        column(&client, "SELECT n FROM total").await,
        vec![Some(expected.clone())]
    );
    insert_keys(&client, inserted, 10).await;
    assert_eq!(
        column(&client, "SELECT n FROM total").await,
        vec![Some((inserted + 10).to_string())]
    );

    // A new view that would not fit fails at its creation, and is not
    // created.
    assert_eq!(
        sqlstate(
            &client,
            "CREATE MATERIALIZED VIEW again AS SELECT k, count(*) AS n FROM t GROUP BY k"
        )
        .await,
        "53200"
    );
    assert_eq!(sqlstate(&client, "SELECT * FROM again").await, "42P01");

    // The failure is part of the committed catalog.
    server.restart_after_kill().await;
    let client = server.client().await;
    assert_eq!(sqlstate(&client, "SELECT * FROM per_key").await, "53200");
    assert_eq!(
        column(&client, "SELECT n FROM total").await,
        vec![Some((inserted + 10).to_string())]
    );
}
