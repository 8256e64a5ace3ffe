//! `weir-bench files`: file sources and the file sink. A datagen source's
//! bids go through a file sink into Parquet objects (one per committed
//! epoch); the same bids are written here as CSV and JSON-lines files;
//! then, per format, a file source reads the folder into a group-by view
//! until the view counts every row. Reports rows per second and per
//! CPU-second of the Weir server, and its peak memory.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::server::{wait_delivered, wait_for, Server};

/// What to run.
pub struct FileLoad {
    /// Rows of each format.
    pub rows: u64,
    /// CSV and JSON files the rows are spread over.
    pub files: u64,
}

/// Bid `i`'s columns: auction in 1..10,000, bidder, price, channel.
fn bid(i: u64) -> (u64, u64, u64, String) {
    (
        1 + i * 7919 % 10_000,
        i % 100_003,
        i * 31 % 1_000_000,
        format!("channel-{}", i % 8),
    )
}

/// Writes the rows as `files` CSV (with a header) and JSON-lines files.
fn write_text_files(dir: &Path, load: &FileLoad) -> anyhow::Result<()> {
    let (csv_dir, json_dir) = (dir.join("csv"), dir.join("json"));
    std::fs::create_dir_all(&csv_dir)?;
    std::fs::create_dir_all(&json_dir)?;
    let per_file = load.rows.div_ceil(load.files);
    for file in 0..load.files {
        let rows = (file * per_file)..((file + 1) * per_file).min(load.rows);
        let mut csv = std::io::BufWriter::new(std::fs::File::create(
            csv_dir.join(format!("bids-{file:04}.csv")),
        )?);
        let mut json = std::io::BufWriter::new(std::fs::File::create(
            json_dir.join(format!("bids-{file:04}.json")),
        )?);
        writeln!(csv, "auction,bidder,price,channel,date_time")?;
        for i in rows {
            let (auction, bidder, price, channel) = bid(i);
            writeln!(
                csv,
                "{auction},{bidder},{price},{channel},2026-12-03 10:00:00"
            )?;
            writeln!(
                json,
                r#"{{"auction": {auction}, "bidder": {bidder}, "price": {price}, "channel": "{channel}", "date_time": "2026-12-03 10:00:00"}}"#
            )?;
        }
        csv.flush()?;
        json.flush()?;
    }
    Ok(())
}

/// Runs the sink and the three sources and prints their figures.
pub async fn run(load: FileLoad) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    write_text_files(dir.path(), &load)?;
    println!(
        "files: {} rows per format, {} CSV and JSON files written in {:.1} s",
        load.rows,
        load.files,
        started.elapsed().as_secs_f64()
    );
    let server = Server::start().await?;
    let weir = server.client().await?;

    // The Parquet files: a datagen source's rows through a file sink.
    let parquet_dir = dir.path().join("parquet");
    let cpu_before = server.cpu_time()?;
    let started = Instant::now();
    weir.batch_execute(&format!(
        "CREATE SOURCE gen (auction bigint, bidder bigint, price bigint, channel text, \
             date_time timestamp) \
             WITH (connector = 'datagen', rows_per_second = '100000000', \
                   total_rows = '{rows}', fields.auction.min = '1', fields.auction.max = '10000', \
                   fields.channel.length = '8');
         CREATE SINK to_parquet FROM gen \
             WITH (connector = 'filesystem', path = '{path}', format = 'parquet')",
        rows = load.rows,
        path = parquet_dir.display(),
    ))
    .await?;
    wait_delivered(&weir, "to_parquet", load.rows).await?;
    report(
        "datagen -> Parquet file sink",
        load.rows,
        started,
        server.cpu_time()? - cpu_before,
        &server,
    );
    weir.batch_execute("DROP SINK to_parquet; DROP SOURCE gen")
        .await?;

    for (format, extra) in [
        ("csv", ", csv.header = 'true'"),
        ("json", ""),
        ("parquet", ", match_pattern = '*.parquet'"),
    ] {
        let cpu_before = server.cpu_time()?;
        let started = Instant::now();
        weir.batch_execute(&format!(
            "CREATE SOURCE bids_{format} (auction bigint, bidder bigint, price bigint, \
                 channel text, date_time timestamp) \
                 WITH (connector = 'filesystem', path = '{path}', format = '{format}', \
                       source.monitor-interval = '100ms'{extra});
             CREATE MATERIALIZED VIEW per_auction_{format} AS \
                 SELECT auction, count(*) AS n, sum(price) AS total FROM bids_{format} \
                 GROUP BY auction",
            path = dir.path().join(format).display(),
        ))
        .await?;
        wait_for(
            &weir,
            &format!("SELECT sum(n) = {} FROM per_auction_{format}", load.rows),
        )
        .await?;
        report(
            &format!("{format} file source -> group-by view"),
            load.rows,
            started,
            server.cpu_time()? - cpu_before,
            &server,
        );
        weir.batch_execute(&format!("DROP SOURCE bids_{format} CASCADE"))
            .await?;
    }
    println!(
        "  Weir peak memory {:.0} MiB",
        server.peak_rss_kib()? as f64 / 1024.0
    );
    Ok(())
}

fn report(what: &str, rows: u64, started: Instant, cpu: Duration, server: &Server) {
    let seconds = started.elapsed().as_secs_f64();
    let rss = server.rss_kib().unwrap_or(0) as f64 / 1024.0;
    println!(
        "  {what:<36} {rows:>9} rows  {:>9.0} /s  {:>9.0} /CPU-s  ({seconds:.1} s, {:.1} CPU-s, {rss:.0} MiB resident after)",
        rows as f64 / seconds,
        rows as f64 / cpu.as_secs_f64(),
        cpu.as_secs_f64(),
    );
}
