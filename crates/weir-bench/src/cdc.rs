//! `weir-bench cdc`: a `postgres-cdc` table fed by a throwaway PostgreSQL
//! (started here with `wal_level = logical`), with a group-by view over
//! it. Measures the snapshot (rows copied into the table and the view),
//! then a stream of upstream changes (updates and inserts in
//! transactions of `--transaction-rows` rows) until Weir's table has
//! reached the upstream's last LSN; reports rows per second and per
//! CPU-second of the Weir server, and its peak memory. The upstream's own
//! CPU (PostgreSQL writing and decoding its WAL) is not counted.

use std::time::Instant;

use crate::postgres::Postgres;
use crate::server::{count, wait_for, Server};

/// What to run.
pub struct CdcLoad {
    /// Rows in the upstream table before the Weir table is created.
    pub snapshot_rows: u64,
    /// Row changes written upstream after the snapshot.
    pub changes: u64,
    /// Rows each upstream transaction changes.
    pub transaction_rows: u64,
}

/// Runs the snapshot and the change stream and prints their figures.
pub async fn run(load: CdcLoad) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let postgres = Postgres::start(work.path(), &["wal_level=logical"])?;
    let upstream = postgres.client().await?;
    upstream
        .batch_execute(&format!(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, \
                 amount numeric(12,2) NOT NULL, note text NOT NULL);
             INSERT INTO orders SELECT g, g % 1000, g % 10000 / 100.0, md5(g::text) \
                 FROM generate_series(1, {}) g;",
            load.snapshot_rows
        ))
        .await?;
    let server = Server::start().await?;
    let weir = server.client().await?;
    let cpu_before = server.cpu_time()?;
    let started = Instant::now();
    weir.batch_execute(&format!(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, \
             amount numeric(12,2) NOT NULL, note text NOT NULL) \
             WITH (connector = 'postgres-cdc', hostname = '127.0.0.1', port = '{}', \
                   username = 'postgres', table.name = 'orders');
         CREATE MATERIALIZED VIEW per_customer AS \
             SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer",
        postgres.port
    ))
    .await?;
    wait_for(&weir, "SELECT phase = 'streaming' FROM weir_cdc_tables").await?;
    weir.batch_execute("FLUSH").await?;
    let snapshot_seconds = started.elapsed().as_secs_f64();
    let snapshot_cpu = (server.cpu_time()? - cpu_before).as_secs_f64();
    println!(
        "cdc: postgres-cdc table with a group-by view (1,000 groups); upstream PostgreSQL on loopback"
    );
    println!(
        "  snapshot  {:>9} rows  {:>9.0} rows/s  {:>9.0} rows/CPU-s  ({:.1} s, {:.1} CPU-s)",
        load.snapshot_rows,
        load.snapshot_rows as f64 / snapshot_seconds,
        load.snapshot_rows as f64 / snapshot_cpu,
        snapshot_seconds,
        snapshot_cpu,
    );

    // The change stream: updates of existing rows and inserts of new ones,
    // each transaction `transaction_rows` rows, written as fast as one
    // upstream connection can.
    let cpu_before = server.cpu_time()?;
    let started = Instant::now();
    let mut written = 0;
    let mut next_id = load.snapshot_rows + 1;
    let mut round = 0u64;
    while written < load.changes {
        let rows = load.transaction_rows.min(load.changes - written);
        if round.is_multiple_of(2) {
            let first = (round * rows) % load.snapshot_rows.max(1) + 1;
            upstream
                .batch_execute(&format!(
                    "UPDATE orders SET amount = amount + 1 WHERE id BETWEEN {first} AND {}",
                    first + rows - 1
                ))
                .await?;
        } else {
            upstream
                .batch_execute(&format!(
                    "INSERT INTO orders SELECT g, g % 1000, 1.5, md5(g::text) \
                     FROM generate_series({next_id}, {}) g",
                    next_id + rows - 1
                ))
                .await?;
            next_id += rows;
        }
        written += rows;
        round += 1;
    }
    let writing = started.elapsed().as_secs_f64();
    // A last row marks the end: transactions arrive in commit order, so
    // once it is in the table every earlier change is.
    upstream
        .batch_execute("INSERT INTO orders VALUES (0, 0, 0, 'end')")
        .await?;
    wait_for(&weir, "SELECT count(*) = 1 FROM orders WHERE id = 0").await?;
    weir.batch_execute("FLUSH").await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = (server.cpu_time()? - cpu_before).as_secs_f64();
    let expected = count(&upstream, "SELECT count(*) FROM orders").await?;
    let held = count(&weir, "SELECT sum(n)::bigint FROM per_customer").await?;
    anyhow::ensure!(
        held == expected,
        "the view counts {held} rows, the upstream table holds {expected}"
    );
    println!(
        "  changes   {:>9} rows  {:>9.0} rows/s  {:>9.0} rows/CPU-s  ({:.1} s, {:.1} CPU-s; upstream wrote for {:.1} s)",
        load.changes,
        load.changes as f64 / seconds,
        load.changes as f64 / cpu,
        seconds,
        cpu,
        writing,
    );
    println!(
        "  peak memory {:.0} MiB",
        server.peak_rss_kib()? as f64 / 1024.0
    );
    Ok(())
}
