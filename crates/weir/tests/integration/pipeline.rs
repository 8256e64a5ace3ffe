//! Real sources into views into real sinks, through faults: a Kafka
//! source and a PostgreSQL CDC table feed views delivered by a PostgreSQL
//! sink, a Kafka sink (exactly-once) and a Parquet file sink, while the
//! server is killed with SIGKILL 20 times and the PostgreSQL server is
//! restarted. Afterwards every view holds exactly the consumed input and
//! every sink exactly the views.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};

use crate::common::{sorted_rows, TestServer};
use crate::kafka::{row, upserted, wait_rows};
use crate::kafka_broker::Broker;
use crate::orders::{produce, total_rows, totals};
use crate::reference_postgres::{connect, start_postgres, Endpoint};
use crate::sinks::{parquet_ids, wait_status};

/// Customers the upstream table holds and orders name.
const CUSTOMERS: i64 = 40;

/// Moves customers between regions upstream until `stop`, reconnecting
/// when the server goes away; counts the transactions committed.
async fn move_customers(url: String, stop: Arc<AtomicBool>, committed: Arc<AtomicU64>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    while !stop.load(Ordering::Relaxed) {
        let Ok((client, connection)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tokio::spawn(connection);
        while !stop.load(Ordering::Relaxed) {
            let (id, region) = (rng.random_range(0..CUSTOMERS), rng.random_range(0..5));
            let moved = client
                .batch_execute(&format!(
                    "UPDATE customers SET region = 'r{region}' WHERE id = {id}"
                ))
                .await;
            if moved.is_err() {
                break;
            }
            committed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(rng.random_range(1..10))).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_views_and_sinks_are_exact_through_sigkill_cycles_and_a_postgres_restart() {
    const CYCLES: usize = 20;
    let broker = Broker::start().await;
    broker.create_topic("orders", 3).await;
    broker.create_topic("totals", 2).await;
    // A PostgreSQL server of this test's own, to restart.
    let (mut postgres, url) = start_postgres();
    let upstream = connect(&url).await;
    upstream
        .batch_execute(&format!(
            "CREATE TABLE customers (id int PRIMARY KEY, region text NOT NULL);
             INSERT INTO customers SELECT g, 'r' || (g % 5) FROM generate_series(0, {}) g;
             CREATE TABLE totals_out (customer text PRIMARY KEY, n bigint, total bigint);",
            CUSTOMERS - 1
        ))
        .await
        .unwrap();
    drop(upstream);
    let Endpoint {
        host,
        port,
        user,
        database,
    } = Endpoint::of(&url);
    let files = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms"]).await;
    let weir = server.client().await;
    let postgres_at = format!("host = '{host}', port = '{port}', user = '{user}'");
    weir.batch_execute(&format!(
        "CREATE SOURCE orders (id bigint, customer text, amount int) WITH (
           connector = 'kafka', topic = 'orders', properties.bootstrap.server = '{kafka}',
           format = 'json');
         CREATE TABLE customers (id int PRIMARY KEY, region text NOT NULL) WITH (
           connector = 'postgres-cdc', hostname = '{host}', port = '{port}', username = '{user}',
           database.name = '{database}', table.name = 'customers', slot.name = 'weir_pipeline');
         CREATE MATERIALIZED VIEW totals AS
           SELECT customer, count(*) AS n, sum(amount) AS total
           FROM orders GROUP BY customer;
         CREATE MATERIALIZED VIEW regions AS
           SELECT region, count(*) AS n FROM customers GROUP BY region;
         CREATE SINK totals_pg FROM totals WITH (connector = 'postgres', {postgres_at},
           database = '{database}', table = 'totals_out', type = 'upsert',
           primary_key = 'customer');
         CREATE SINK totals_kafka FROM totals WITH (connector = 'kafka', topic = 'totals',
           properties.bootstrap.server = '{kafka}', type = 'upsert', primary_key = 'customer');
         CREATE SINK orders_parquet AS SELECT id, amount FROM orders WITH (
           connector = 'filesystem', path = '{files}', format = 'parquet')",
        kafka = broker.address(),
        files = files.path().display(),
    ))
    .await
    .unwrap();
    drop(weir);

    // Orders arrive on Kafka and customers move upstream while the server
    // is killed, and PostgreSQL restarts halfway.
    let produced = Arc::new(AtomicU64::new(0));
    let moves = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producing = produce(
        &broker,
        "orders",
        CUSTOMERS as u64,
        None,
        stop.clone(),
        produced.clone(),
    );
    let moving = tokio::spawn(move_customers(url.clone(), stop.clone(), moves.clone()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    for cycle in 0..CYCLES {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..700))).await;
        if cycle == CYCLES / 2 {
            postgres.restart();
        }
        server.restart_after_kill().await;
    }
    stop.store(true, Ordering::Relaxed);
    producing.await.unwrap();
    moving.await.unwrap();
    let n = produced.load(Ordering::Relaxed);
    let moved = moves.load(Ordering::Relaxed);
    assert!(n >= 1000, "only {n} orders were produced");
    assert!(moved >= 100, "only {moved} upstream moves committed");

    // The views: every order once, and the upstream's regions.
    let weir = server.client().await;
    let limit = Duration::from_secs(120);
    wait_rows(
        &weir,
        "SELECT sum(n) FROM totals",
        &[row(&[&n.to_string()])],
        limit,
    )
    .await;
    let expected = totals(n, CUSTOMERS as u64);
    let totals = total_rows(n, CUSTOMERS as u64);
    assert_eq!(
        sorted_rows(&weir, "SELECT customer, n, total FROM totals").await,
        totals
    );
    let upstream = connect(&url).await;
    let regions = sorted_rows(
        &upstream,
        "SELECT region, count(*) FROM customers GROUP BY region",
    )
    .await;
    wait_rows(&weir, "SELECT region, n FROM regions", &regions, limit).await;

    // The sinks: each holds the view (every committed epoch delivered).
    for sink in ["totals_pg", "totals_kafka", "orders_parquet"] {
        wait_status(&weir, sink, |s| s.1 == 0 && s.0 > 0).await;
    }
    assert_eq!(
        sorted_rows(&upstream, "SELECT customer, n, total FROM totals_out").await,
        totals,
        "the PostgreSQL sink's table"
    );
    let folded: BTreeMap<String, String> = expected
        .iter()
        .map(|(c, (count, total))| {
            (
                format!("{{\"customer\":\"{c}\"}}"),
                format!("{{\"customer\":\"{c}\",\"n\":{count},\"total\":{total}}}"),
            )
        })
        .collect();
    assert_eq!(
        upserted(&broker.read_committed("totals")),
        folded,
        "the Kafka sink's topic"
    );
    let (objects, mut ids) = parquet_ids(files.path());
    ids.sort_unstable();
    assert!(objects > 1, "only {objects} Parquet objects");
    assert_eq!(
        ids,
        (0..n as i64).collect::<Vec<_>>(),
        "the Parquet sink's rows: every order once"
    );
}
