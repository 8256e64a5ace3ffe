//! `weir-bench pg-sink`: the PostgreSQL sink, against a throwaway
//! PostgreSQL started here. Two phases on one Weir server: a datagen
//! source's rows through an append-only sink into a PostgreSQL table, and
//! a group-by view over another datagen source (1,000,000 keys, so that
//! most of an epoch's rows change a group of their own) through an upsert
//! sink. Each phase ends when
//! the sink has delivered every committed epoch; the PostgreSQL table is
//! then checked against what went in. Reports rows per second and per
//! CPU-second of the Weir server (generator included), PostgreSQL's CPU
//! beside it (its server processes, applying the epochs), and Weir's peak
//! memory.

use std::time::{Duration, Instant};

use crate::postgres::Postgres;
use crate::server::{count, wait_delivered, wait_for, Server};

/// What to run.
pub struct PgSinkLoad {
    /// Rows each phase's source generates.
    pub rows: u64,
}

/// Runs both phases and prints their figures.
pub async fn run(load: PgSinkLoad) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let postgres = Postgres::start(work.path(), &[])?;
    let target = postgres.client().await?;
    target
        .batch_execute(
            "CREATE TABLE bids_out (id bigint, auction bigint, price bigint, channel text);
             CREATE TABLE totals_out (auction bigint PRIMARY KEY, n bigint, total numeric)",
        )
        .await?;
    let server = Server::start().await?;
    let weir = server.client().await?;
    let at = format!("host = '127.0.0.1', port = '{}'", postgres.port);
    println!(
        "pg-sink: {} rows per phase; PostgreSQL on loopback",
        load.rows
    );

    // Append-only: every generated row becomes one inserted row.
    let (cpu_before, postgres_before) = (server.cpu_time()?, postgres.cpu_time()?);
    let started = Instant::now();
    weir.batch_execute(&format!(
        "CREATE SOURCE gen_bids (id bigint, auction bigint, price bigint, channel text) \
             WITH (connector = 'datagen', rows_per_second = '100000000', \
                   total_rows = '{rows}', fields.id.kind = 'sequence', \
                   fields.auction.min = '1', fields.auction.max = '10000', \
                   fields.channel.length = '8');
         CREATE SINK bids_pg FROM gen_bids \
             WITH (connector = 'postgres', {at}, table = 'bids_out', type = 'append-only')",
        rows = load.rows,
    ))
    .await?;
    wait_delivered(&weir, "bids_pg", load.rows).await?;
    report(
        "datagen -> append-only sink",
        load.rows,
        started,
        server.cpu_time()? - cpu_before,
        postgres.cpu_time()? - postgres_before,
    );
    let delivered = count(&target, "SELECT count(DISTINCT id) FROM bids_out").await?;
    anyhow::ensure!(
        delivered == load.rows,
        "PostgreSQL holds {delivered} distinct rows of the {} sent",
        load.rows
    );
    weir.batch_execute("DROP SINK bids_pg; DROP SOURCE gen_bids")
        .await?;

    // Upsert: the view's changed groups, applied by key every epoch.
    let (cpu_before, postgres_before) = (server.cpu_time()?, postgres.cpu_time()?);
    let started = Instant::now();
    weir.batch_execute(&format!(
        "CREATE SOURCE gen_totals (auction bigint, price bigint) \
             WITH (connector = 'datagen', rows_per_second = '100000000', \
                   total_rows = '{rows}', fields.auction.min = '1', \
                   fields.auction.max = '1000000', fields.price.min = '1', \
                   fields.price.max = '1000');
         CREATE MATERIALIZED VIEW totals AS \
             SELECT auction, count(*) AS n, sum(price) AS total FROM gen_totals GROUP BY auction;
         CREATE SINK totals_pg FROM totals \
             WITH (connector = 'postgres', {at}, table = 'totals_out', type = 'upsert', \
                   primary_key = 'auction')",
        rows = load.rows,
    ))
    .await?;
    wait_for(&weir, &format!("SELECT sum(n) = {} FROM totals", load.rows)).await?;
    weir.batch_execute("CHECKPOINT").await?;
    wait_for(
        &weir,
        "SELECT pending_epochs = 0 FROM weir_sink_deliveries WHERE sink = 'totals_pg'",
    )
    .await?;
    let changes = count(
        &weir,
        "SELECT rows_out::bigint FROM weir_sink_deliveries WHERE sink = 'totals_pg'",
    )
    .await?;
    let (cpu, postgres_cpu) = (
        server.cpu_time()? - cpu_before,
        postgres.cpu_time()? - postgres_before,
    );
    report(
        "datagen -> group-by view -> upsert sink",
        load.rows,
        started,
        cpu,
        postgres_cpu,
    );
    let counted = count(&target, "SELECT sum(n)::bigint FROM totals_out").await?;
    anyhow::ensure!(
        counted == load.rows,
        "PostgreSQL's totals count {counted} rows of the {} generated",
        load.rows
    );
    println!(
        "  (the upsert sink applied {changes} changed groups: {:.0} per CPU-second of Weir)",
        changes as f64 / cpu.as_secs_f64()
    );
    println!(
        "  Weir peak memory {:.0} MiB",
        server.peak_rss_kib()? as f64 / 1024.0
    );
    Ok(())
}

fn report(what: &str, rows: u64, started: Instant, cpu: Duration, postgres_cpu: Duration) {
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "  {what:<40} {rows:>9} rows  {:>9.0} /s  {:>9.0} /CPU-s  ({seconds:.1} s, Weir {:.1} CPU-s, PostgreSQL {:.1} CPU-s)",
        rows as f64 / seconds,
        rows as f64 / cpu.as_secs_f64(),
        cpu.as_secs_f64(),
        postgres_cpu.as_secs_f64(),
    );
}
