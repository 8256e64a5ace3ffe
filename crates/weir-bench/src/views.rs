//! `weir-bench views`: how fast INSERTs flow through materialized views.
//!
//! Each configuration runs on a fresh server: no view, a group-by view, a
//! global aggregate, a two-table join view, and group-by and join together.
//! Connections insert multi-row batches into `orders`; every INSERT returns
//! only after its epoch, view updates included, is committed. Reports
//! rows/s per configuration, the time a FLUSH takes after the burst, the
//! time to create each view over the rows already loaded (backfill), and
//! the latency of a lone single-row INSERT into the loaded table.

use std::time::Instant;

use crate::server::Server;

/// What one run measures.
pub struct ViewLoad {
    /// Concurrent connections.
    pub connections: usize,
    /// INSERT statements per connection.
    pub batches: usize,
    /// Rows per INSERT.
    pub rows: usize,
    /// Distinct customers (group keys and join keys).
    pub keys: usize,
}

const GROUP_BY: &str = "CREATE MATERIALIZED VIEW by_customer AS
    SELECT customer, count(*) AS orders, sum(amount) AS total, max(amount) AS biggest
    FROM orders GROUP BY customer";
const GLOBAL: &str = "CREATE MATERIALIZED VIEW totals AS
    SELECT count(*) AS orders, sum(amount) AS total, avg(amount) AS mean FROM orders";
const JOIN: &str = "CREATE MATERIALIZED VIEW with_region AS
    SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON o.customer = c.id";

/// Runs every configuration and prints the figures.
pub async fn run(load: ViewLoad) -> anyhow::Result<()> {
    let total = load.connections * load.batches * load.rows;
    println!(
        "views: {} connections x {} INSERTs of {} rows ({total} rows), {} keys",
        load.connections, load.batches, load.rows, load.keys
    );
    for (label, views) in [
        ("no view", vec![]),
        ("group-by view", vec![GROUP_BY]),
        ("global view", vec![GLOBAL]),
        ("join view", vec![JOIN]),
        ("both views", vec![GROUP_BY, JOIN]),
    ] {
        let server = setup(&load).await?;
        let client = server.client().await?;
        for view in &views {
            client.batch_execute(view).await?;
        }
        let started = Instant::now();
        insert(&server, &load, 0).await?;
        let elapsed = started.elapsed().as_secs_f64();
        let flush = Instant::now();
        client.batch_execute("FLUSH").await?;
        let flush = flush.elapsed().as_secs_f64();
        check(&client, total, &views).await?;
        println!(
            "  {label:<14} {:>9.0} rows/s   ({elapsed:.2} s; FLUSH after the burst {:.1} ms)",
            total as f64 / elapsed,
            flush * 1e3
        );
    }
    // Backfill: views created over rows already loaded; and the latency of
    // a lone single-row INSERT into the loaded table, without and with them.
    let server = setup(&load).await?;
    insert(&server, &load, 0).await?;
    let client = server.client().await?;
    let (alone, _) = trickle(&client, total as u64, 100).await?;
    // Meanwhile another connection keeps inserting: how long do its
    // statements wait while views are being created?
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let client = server.client().await?;
        let stop = stop.clone();
        let first = total as u64 + 1_000_000;
        tokio::spawn(async move {
            let mut worst = 0f64;
            let mut id = first;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                client
                    .batch_execute(&format!("INSERT INTO orders VALUES ({id}, 1, 1)"))
                    .await?;
                worst = worst.max(started.elapsed().as_secs_f64());
                id += 1;
            }
            Ok::<_, tokio_postgres::Error>((worst, id - first))
        })
    };
    for (label, view) in [("group-by", GROUP_BY), ("global", GLOBAL), ("join", JOIN)] {
        let started = Instant::now();
        client.batch_execute(view).await?;
        println!(
            "  backfill of the {label} view over {total} rows: {:.2} s",
            started.elapsed().as_secs_f64()
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (worst, written) = writer.await??;
    println!(
        "  a concurrent writer ran {written} single-row INSERTs during the backfills; the slowest took {:.0} ms",
        worst * 1e3
    );
    let (with_views, p99) = trickle(&client, total as u64 + 100, 100).await?;
    println!(
        "  one single-row INSERT into the {total}-row table: p50 {:.2} ms without views, p50 {:.2} ms (p99 {:.2} ms) with the three views",
        alone * 1e3,
        with_views * 1e3,
        p99 * 1e3
    );
    check(
        &client,
        total + 200 + written as usize,
        &[GROUP_BY, GLOBAL, JOIN],
    )
    .await?;
    Ok(())
}

/// `count` single-row INSERTs one after another; the p50 and p99 latency
/// in seconds.
async fn trickle(
    client: &tokio_postgres::Client,
    first_id: u64,
    count: u64,
) -> anyhow::Result<(f64, f64)> {
    let mut latencies = Vec::new();
    for id in first_id..first_id + count {
        let started = Instant::now();
        client
            .batch_execute(&format!("INSERT INTO orders VALUES ({id}, {}, 5)", id % 7))
            .await?;
        latencies.push(started.elapsed().as_secs_f64());
    }
    latencies.sort_by(f64::total_cmp);
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    Ok((at(0.5), at(0.99)))
}

async fn setup(load: &ViewLoad) -> anyhow::Result<Server> {
    let server = Server::start().await?;
    let client = server.client().await?;
    client
        .batch_execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer INT, amount INT);
             CREATE TABLE customers (id INT PRIMARY KEY, region TEXT)",
        )
        .await?;
    let customers: Vec<String> = (0..load.keys)
        .map(|i| format!("({i}, 'region-{}')", i % 7))
        .collect();
    for chunk in customers.chunks(5000) {
        client
            .batch_execute(&format!("INSERT INTO customers VALUES {}", chunk.join(",")))
            .await?;
    }
    Ok(server)
}

/// Every connection inserts its batches one after another.
async fn insert(server: &Server, load: &ViewLoad, base: u64) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for conn in 0..load.connections {
        let client = server.client().await?;
        let (batches, rows, keys) = (load.batches, load.rows, load.keys as u64);
        tasks.push(tokio::spawn(async move {
            // A fixed linear congruential sequence: the same load every run.
            let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ conn as u64;
            for batch in 0..batches {
                let values: Vec<String> = (0..rows)
                    .map(|row| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let id = base + ((conn * batches + batch) * rows + row) as u64;
                        format!("({id}, {}, {})", (state >> 33) % keys, (state >> 20) % 1000)
                    })
                    .collect();
                client
                    .batch_execute(&format!("INSERT INTO orders VALUES {}", values.join(",")))
                    .await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// The views hold what their queries say (cheap totals).
async fn check(
    client: &tokio_postgres::Client,
    total: usize,
    views: &[&str],
) -> anyhow::Result<()> {
    let count = |sql: &'static str| async move {
        let row = client.query_one(sql, &[]).await?;
        Ok::<i64, anyhow::Error>(row.get(0))
    };
    anyhow::ensure!(count("SELECT count(*) FROM orders").await? as usize == total);
    if views.contains(&GROUP_BY) {
        let n = count("SELECT sum(orders)::BIGINT FROM by_customer").await?;
        anyhow::ensure!(n as usize == total, "group-by view counts {n} of {total}");
    }
    if views.contains(&GLOBAL) {
        let n = count("SELECT orders FROM totals").await?;
        anyhow::ensure!(n as usize == total, "global view counts {n} of {total}");
    }
    if views.contains(&JOIN) {
        let n = count("SELECT count(*) FROM with_region").await?;
        anyhow::ensure!(n as usize == total, "join view has {n} of {total}");
    }
    Ok(())
}
