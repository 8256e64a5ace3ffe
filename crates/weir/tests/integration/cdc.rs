//! `postgres-cdc` tables against a real PostgreSQL with logical decoding
//! (see `reference_postgres`): the snapshot and every kind of upstream
//! change, the checks `CREATE TABLE` makes, DML refused, the slot
//! confirmed as epochs commit and dropped with the table, a replication
//! connection cut upstream, and exactly the upstream's rows through
//! SIGKILL cycles of the server while the upstream is written.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::common::{sorted_rows, sqlstate, TestServer};
use crate::reference_postgres::{connect, fresh_database, Endpoint};

/// The `WITH (...)` of a `postgres-cdc` table reading `table` of database
/// `url` through slot `slot`.
fn cdc_options(url: &str, table: &str, slot: &str) -> String {
    let Endpoint {
        host,
        port,
        user,
        database,
    } = Endpoint::of(url);
    format!(
        "connector = 'postgres-cdc', hostname = '{host}', port = '{port}', username = '{user}', \
         database.name = '{database}', table.name = '{table}', slot.name = '{slot}'"
    )
}

/// The secret the tests' tables read the upstream password from.
const PASSWORD: &str = "cdc-secret-5f1e";

/// Whether any file under `dir` holds `text`.
pub fn any_file_holds(dir: &std::path::Path, text: &str) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|entry| {
        let path = entry.path();
        if path.is_dir() {
            any_file_holds(&path, text)
        } else {
            let bytes = std::fs::read(&path).unwrap_or_default();
            bytes.windows(text.len()).any(|w| w == text.as_bytes())
        }
    })
}

/// Waits until `query` answers the same upstream and on Weir; panics
/// after `limit` with both and the ingest's status.
async fn wait_same(upstream: &Client, weir: &Client, query: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        let expected = sorted_rows(upstream, query).await;
        let held = sorted_rows(weir, query).await;
        if held == expected {
            return;
        }
        if started.elapsed() > limit {
            let status = sorted_rows(weir, "SELECT * FROM weir_cdc_tables").await;
            panic!(
                "{query}: upstream {} rows, Weir {} rows (first differing: {:?} vs {:?}); \
                 status: {status:?}",
                expected.len(),
                held.len(),
                expected.iter().find(|r| !held.contains(r)),
                held.iter().find(|r| !expected.contains(r)),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One value of `weir_cdc_tables` for table `table`.
async fn status(weir: &Client, table: &str, column: &str) -> String {
    sorted_rows(
        weir,
        &format!("SELECT {column}::text FROM weir_cdc_tables WHERE \"table\" = '{table}'"),
    )
    .await
    .first()
    .and_then(|row| row[0].clone())
    .unwrap_or_default()
}

/// An LSN as PostgreSQL prints it, as a number.
fn lsn(text: &str) -> u64 {
    let (high, low) = text.split_once('/').expect("an LSN");
    (u64::from_str_radix(high, 16).unwrap() << 32) | u64::from_str_radix(low, 16).unwrap()
}

#[tokio::test]
async fn a_postgres_cdc_table_follows_its_upstream_table() {
    let (_postgres, url) = fresh_database("weir_cdc_follow").await;
    let upstream = connect(&url).await;
    upstream
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2), note text);
             INSERT INTO orders SELECT g, 'c' || (g % 7), g * 1.25, 'n' || g \
                 FROM generate_series(1, 3000) g;
             CREATE TABLE nokey (a int);",
        )
        .await
        .unwrap();
    let metrics = crate::common::free_port();
    let server = TestServer::start_with(&[
        "--checkpoint-interval",
        "100ms",
        "--metrics-listen",
        &format!("127.0.0.1:{metrics}"),
    ])
    .await;
    let weir = server.client().await;
    let options = cdc_options(&url, "orders", "weir_test_follow");
    let columns = "id int PRIMARY KEY, customer text, amount numeric(10,2), note text";

    // What CREATE TABLE checks before the table exists.
    for (sql, code) in [
        (
            format!("CREATE TABLE o (id int, customer text) WITH ({options})"),
            "42P16",
        ),
        (
            format!("CREATE TABLE o (id int, customer text PRIMARY KEY) WITH ({options})"),
            "42P16",
        ),
        (
            format!("CREATE TABLE o (id int PRIMARY KEY, missing text) WITH ({options})"),
            "42703",
        ),
        (
            format!(
                "CREATE TABLE o (a int PRIMARY KEY) WITH ({})",
                cdc_options(&url, "nokey", "weir_test_nokey")
            ),
            "42P16",
        ),
        (
            format!(
                "CREATE TABLE o ({columns}) WITH ({})",
                cdc_options(&url, "absent", "weir_test_absent")
            ),
            "42P01",
        ),
        (
            format!("CREATE TABLE o ({columns}) WITH ({options}, colour = 'red')"),
            "22023",
        ),
        (
            format!(
                "CREATE TABLE o ({columns}) WITH ({})",
                options.replace("port = '", "port = 'x")
            ),
            "22023",
        ),
        (
            format!("CREATE TABLE o ({columns}) WITH (connector = 'datagen')"),
            "0A000",
        ),
        (
            format!("CREATE TABLE o ({columns}) APPEND ONLY WITH ({options})"),
            "0A000",
        ),
    ] {
        assert_eq!(sqlstate(&weir, &sql).await, code, "{sql}");
    }
    let closed_port = crate::common::free_port();
    let unreachable = options.replace(
        &format!("port = '{}'", Endpoint::of(&url).port),
        &format!("port = '{closed_port}'"),
    );
    assert_eq!(
        sqlstate(
            &weir,
            &format!("CREATE TABLE o ({columns}) WITH ({unreachable})")
        )
        .await,
        "08001"
    );
    assert_eq!(
        sorted_rows(&weir, "SELECT count(*) FROM pg_class WHERE relname = 'o'").await,
        vec![vec![Some("0".into())]],
        "a refused table is not created"
    );

    // The upstream password comes from a secret (the test's PostgreSQL
    // trusts loopback clients, so any value connects).
    weir.batch_execute(&format!(
        "CREATE SECRET upstream_password AS '{PASSWORD}';
         CREATE TABLE orders ({columns}) WITH ({options}, password = SECRET upstream_password);
         CREATE MATERIALIZED VIEW by_customer AS \
             SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer"
    ))
    .await
    .unwrap();
    let rows = "SELECT id, customer, amount, length(note) FROM orders";
    let totals =
        "SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer";
    let by_customer = "SELECT customer, n, total FROM by_customer";
    wait_same(&upstream, &weir, rows, Duration::from_secs(60)).await;
    assert_eq!(status(&weir, "orders", "snapshot_rows").await, "3000");
    weir.batch_execute("CHECKPOINT").await.unwrap();
    assert!(
        !any_file_holds(&server.data_dir, PASSWORD),
        "the secret's value is in a state file"
    );
    assert_eq!(
        sqlstate(&weir, "DROP SECRET upstream_password").await,
        "2BP01",
        "a secret a table uses stays"
    );
    assert_eq!(
        sorted_rows(&weir, by_customer).await,
        sorted_rows(&upstream, totals).await
    );
    let err = weir
        .batch_execute("INSERT INTO orders VALUES (9999, 'x', 1, 'y')")
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "42809", "{err}");
    for sql in [
        "UPDATE orders SET amount = 0",
        "DELETE FROM orders",
        "COPY orders FROM STDIN",
    ] {
        assert_eq!(sqlstate(&weir, sql).await, "42809", "{sql}");
    }

    // Every kind of change, in transactions of one and of many.
    upstream
        .batch_execute(
            "INSERT INTO orders VALUES (5001, 'new', 10.5, 'fresh');
             UPDATE orders SET customer = 'moved' WHERE id <= 40;
             DELETE FROM orders WHERE id BETWEEN 41 AND 80;
             UPDATE orders SET id = id + 10000 WHERE id BETWEEN 81 AND 90;
             BEGIN;
             INSERT INTO orders VALUES (5002, 'txn', 1, 'a');
             UPDATE orders SET amount = 2 WHERE id = 5002;
             DELETE FROM orders WHERE id = 5001;
             INSERT INTO orders VALUES (5001, 'again', 3, 'b');
             COMMIT;
             BEGIN;
             INSERT INTO orders VALUES (6000, 'rolled back', 1, 'x');
             ROLLBACK;
             UPDATE orders SET note = repeat('long', 50000) WHERE id = 100;",
        )
        .await
        .unwrap();
    // An update that leaves the TOASTed note out of the change.
    upstream
        .batch_execute("UPDATE orders SET amount = amount + 1 WHERE id = 100")
        .await
        .unwrap();
    wait_same(&upstream, &weir, rows, Duration::from_secs(30)).await;
    assert_eq!(
        sorted_rows(&weir, "SELECT length(note) FROM orders WHERE id = 100").await,
        vec![vec![Some("200000".into())]]
    );
    wait_same(&upstream, &weir, totals, Duration::from_secs(30)).await;
    assert_eq!(
        sorted_rows(&weir, by_customer).await,
        sorted_rows(&upstream, totals).await
    );

    // TRUNCATE, then rows again in the same transaction.
    upstream
        .batch_execute(
            "BEGIN; TRUNCATE orders; INSERT INTO orders VALUES (1, 'after', 1, 'x'), (2, 'after', 2, 'y'); COMMIT",
        )
        .await
        .unwrap();
    wait_same(&upstream, &weir, rows, Duration::from_secs(30)).await;

    // The slot is confirmed up to the last committed epoch's position.
    weir.batch_execute("CHECKPOINT").await.unwrap();
    let started = Instant::now();
    loop {
        let confirmed = sorted_rows(
            &upstream,
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots \
             WHERE slot_name = 'weir_test_follow'",
        )
        .await[0][0]
            .clone()
            .unwrap();
        let applied = status(&weir, "orders", "applied_lsn").await;
        if lsn(&confirmed) >= lsn(&applied) {
            assert_eq!(status(&weir, "orders", "confirmed_lsn").await, applied);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the slot stays at {confirmed}, Weir applied {applied}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The replication connection cut upstream: Weir reconnects and loses
    // nothing written meanwhile.
    let terminated = sorted_rows(
        &upstream,
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
         WHERE slot_name = 'weir_test_follow' AND active_pid IS NOT NULL",
    )
    .await;
    assert_eq!(terminated.len(), 1, "a walsender served the slot");
    upstream
        .batch_execute(
            "INSERT INTO orders SELECT g, 'late', g, 'z' FROM generate_series(100, 400) g",
        )
        .await
        .unwrap();
    wait_same(&upstream, &weir, rows, Duration::from_secs(60)).await;
    let failures: u64 = status(&weir, "orders", "failures").await.parse().unwrap();
    assert!(failures >= 1, "the cut connection was noticed");
    assert_eq!(status(&weir, "orders", "phase").await, "streaming");
    let changes = status(&weir, "orders", "changes").await;
    assert!(changes.parse::<u64>().unwrap() > 300, "{changes} changes");
    assert_eq!(
        crate::common::counter(metrics, "weir_cdc_changes_total{table=\"orders\"}").to_string(),
        changes
    );
    assert!(crate::common::counter(metrics, "weir_cdc_failures_total{table=\"orders\"}") >= 1);

    // Dropping the table drops its slot and the publication Weir made;
    // then its secret may go.
    weir.batch_execute("DROP TABLE orders CASCADE")
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let left = sorted_rows(
            &upstream,
            "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'weir_test_follow') \
                  + (SELECT count(*) FROM pg_publication WHERE pubname = 'weir_test_follow')",
        )
        .await;
        if left == vec![vec![Some("0".into())]] {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the slot or publication outlived the table"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    weir.batch_execute("DROP SECRET upstream_password")
        .await
        .unwrap();
}

/// Random upstream transactions on `accounts` until `stop`: inserts,
/// updates, deletes and key moves; counts those committed.
async fn write_randomly(url: String, stop: Arc<AtomicBool>, committed: Arc<AtomicU64>) {
    let client = connect(&url).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut next_id = 100_000;
    while !stop.load(Ordering::Relaxed) {
        let mut sql = String::from("BEGIN;");
        for _ in 0..rng.random_range(1..6) {
            let id = rng.random_range(0..20_000);
            sql.push_str(&match rng.random_range(0..4) {
                0 => {
                    next_id += 1;
                    format!("INSERT INTO accounts VALUES ({next_id}, {}, 0);", rng.random_range(0..1000))
                }
                1 => format!(
                    "UPDATE accounts SET balance = balance + {}, version = version + 1 WHERE id = {id};",
                    rng.random_range(-50..50)
                ),
                2 => format!("DELETE FROM accounts WHERE id = {id};"),
                _ => {
                    next_id += 1;
                    format!("UPDATE accounts SET id = {next_id}, version = version + 1 WHERE id = {id};")
                }
            });
        }
        sql.push_str("COMMIT;");
        if client.batch_execute(&sql).await.is_ok() {
            committed.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..4))).await;
    }
}

#[tokio::test]
async fn a_postgres_cdc_table_holds_exactly_the_upstream_rows_through_sigkill_cycles() {
    const CYCLES: usize = 20;
    let (_postgres, url) = fresh_database("weir_cdc_crash").await;
    let upstream = connect(&url).await;
    upstream
        .batch_execute(
            "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL);
             INSERT INTO accounts SELECT g, g % 1000, 0 FROM generate_series(0, 19999) g;",
        )
        .await
        .unwrap();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "100ms"]).await;
    let weir = server.client().await;
    weir.batch_execute(&format!(
        "CREATE SECRET upstream_password AS '{PASSWORD}';
         CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL) \
             WITH ({}, password = SECRET upstream_password);
         CREATE MATERIALIZED VIEW summary AS \
             SELECT count(*) AS n, sum(balance) AS balance, sum(version) AS versions FROM accounts",
        cdc_options(&url, "accounts", "weir_test_crash")
    ))
    .await
    .unwrap();
    drop(weir);
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let writer = tokio::spawn(write_randomly(url.clone(), stop.clone(), committed.clone()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    // The first kill lands during the snapshot or just after it.
    for cycle in 0..CYCLES {
        let pause = if cycle == 0 { 20..200 } else { 100..700 };
        tokio::time::sleep(Duration::from_millis(rng.random_range(pause))).await;
        server.restart_after_kill().await;
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let transactions = committed.load(Ordering::Relaxed);
    assert!(
        transactions >= 200,
        "only {transactions} upstream transactions committed during the kills"
    );
    let weir = server.client().await;
    wait_same(
        &upstream,
        &weir,
        "SELECT id, balance, version FROM accounts",
        Duration::from_secs(120),
    )
    .await;
    wait_same(
        &upstream,
        &weir,
        "SELECT count(*) AS n, sum(balance) AS balance, sum(version) AS versions FROM accounts",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        sorted_rows(&weir, "SELECT n, balance, versions FROM summary").await,
        sorted_rows(
            &upstream,
            "SELECT count(*), sum(balance), sum(version) FROM accounts"
        )
        .await,
        "the view over the table agrees"
    );
    weir.batch_execute("DROP TABLE accounts CASCADE")
        .await
        .unwrap();
}
