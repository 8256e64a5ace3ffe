//! `weir-bench checkpoints`: a datagen source as fast as the server can
//! take it into a group-by view, with periodic checkpoints and without.
//!
//! The source's rate is set far above what one core can aggregate, so the
//! reader is held back only by back-pressure and the rows it delivers per
//! second are the view's throughput. The window is measured with two
//! `CHECKPOINT`s: each records the reader's position at its barrier, read
//! back from `weir_source_readers`.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::server::Server;

/// What to run.
pub struct CheckpointLoad {
    /// Seconds measured per configuration.
    pub seconds: u64,
    /// Distinct group keys.
    pub keys: usize,
    /// Checkpoint intervals to compare with checkpoints off.
    pub intervals: Vec<String>,
}

/// Runs the source into the view once with checkpoints off and once per
/// interval, and prints rows/s and the ratio to the run without.
pub async fn run(load: CheckpointLoad) -> anyhow::Result<()> {
    println!(
        "checkpoints: datagen source (rate unbounded) into a group-by view over {} keys, {} s per run",
        load.keys, load.seconds
    );
    let baseline = measure("off", &load).await?;
    println!(
        "  checkpoints off        {:>10.0} rows/s",
        baseline.rows_per_second
    );
    for interval in &load.intervals {
        let run = measure(interval, &load).await?;
        println!(
            "  checkpoint every {interval:<5} {:>10.0} rows/s  ({:.1}% of off; {} epochs, p99 commit {:.0} ms, state {:.0} MiB)",
            run.rows_per_second,
            100.0 * run.rows_per_second / baseline.rows_per_second,
            run.epochs,
            run.p99_commit_ms,
            run.state_mib,
        );
    }
    Ok(())
}

struct Measured {
    rows_per_second: f64,
    epochs: u64,
    p99_commit_ms: f64,
    state_mib: f64,
}

async fn measure(interval: &str, load: &CheckpointLoad) -> anyhow::Result<Measured> {
    let server = Server::start_with(&["--checkpoint-interval", interval]).await?;
    let client = server.client().await?;
    client
        .batch_execute(&format!(
            "CREATE SOURCE clicks (k int, v bigint, page text) WITH (
                 connector = 'datagen', rows_per_second = 100000000,
                 fields.k.min = 0, fields.k.max = {max_key},
                 fields.v.min = 0, fields.v.max = 1000000, fields.page.length = 8);
             CREATE MATERIALIZED VIEW per_key AS
                 SELECT k, count(*) AS n, sum(v) AS total, avg(v) AS mean FROM clicks GROUP BY k",
            max_key = load.keys - 1
        ))
        .await?;
    // Warm up: every group exists, allocations settled.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (start, from) = position(&client).await?;
    let epochs_before = crate::show(&client, "epochs_committed").await?;
    tokio::time::sleep(Duration::from_secs(load.seconds)).await;
    let (end, to) = position(&client).await?;
    let epochs = crate::show(&client, "epochs_committed").await? - epochs_before;
    let mut durations: Vec<f64> = client
        .query(
            "SELECT CAST(duration_ms AS DOUBLE) FROM weir_checkpoints",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    durations.sort_by(f64::total_cmp);
    let p99_commit_ms = durations
        .get(((durations.len() as f64 - 1.0) * 0.99).round() as usize)
        .copied()
        .unwrap_or(0.0);
    Ok(Measured {
        rows_per_second: (to - from) as f64 / (end - start).as_secs_f64(),
        epochs,
        p99_commit_ms,
        state_mib: server.state_bytes() as f64 / (1 << 20) as f64,
    })
}

/// Forces a checkpoint and returns when it was asked for and the view's
/// reader position at its barrier.
async fn position(client: &Client) -> anyhow::Result<(Instant, u64)> {
    let asked = Instant::now();
    client.batch_execute("CHECKPOINT").await?;
    let row = client
        .query_one(
            "SELECT CAST(position AS BIGINT) FROM weir_source_readers WHERE view = 'per_key'",
            &[],
        )
        .await?;
    let position: i64 = row.get(0);
    Ok((asked, position as u64))
}
