//! Serving reads: pgbench with prepared statements against Weir and
//! against PostgreSQL on the same machine, with the same data and
//! scripts. Point reads on a table's key, a materialized view's key and a
//! secondary index, and a ten-row range of a table's key; at each client
//! count; then the point and range reads again while a datagen source
//! feeds a view at `--write-rate` rows/s (the view-key read on that view),
//! with the commit latency of its epochs with and without the reads (the
//! view's freshness); and the memory that idle connections take.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio_postgres::Client;

use crate::postgres::Postgres;
use crate::server::Server;

/// What `weir-bench reads` runs.
pub struct ReadLoad {
    /// Client counts to run each script at.
    pub clients: Vec<usize>,
    /// Seconds per pgbench run.
    pub seconds: u64,
    /// Rows in the table (and customers in the view: a tenth of them).
    pub rows: usize,
    /// Rows per second of the write load's source.
    pub write_rate: u64,
    /// Idle connections opened to measure memory per connection.
    pub idle: usize,
    /// Skip PostgreSQL.
    pub no_postgres: bool,
}

/// One pgbench script: its name and body (`:k` is a random table key,
/// `:c` a random view key).
struct Script {
    name: &'static str,
    body: &'static str,
}

const SCRIPTS: &[Script] = &[
    Script {
        name: "table key",
        body: "SELECT name, balance FROM accounts WHERE id = :k;",
    },
    Script {
        name: "view key",
        body: "SELECT n, total FROM by_customer WHERE customer = :c;",
    },
    Script {
        name: "secondary index",
        body: "SELECT id, balance FROM accounts WHERE phone = :p;",
    },
    Script {
        name: "range (10 rows)",
        body: "SELECT id, balance FROM accounts WHERE id BETWEEN :k AND :k2;",
    },
    Script {
        name: "join by key (planned)",
        body: "SELECT o.amount, b.n, b.total FROM orders o JOIN by_customer b ON b.customer = o.customer WHERE o.id = :k;",
    },
];

/// The view-key read on the view the write load feeds.
const LIVE_VIEW_KEY: &str = "SELECT n, total FROM live_by_customer WHERE customer = :c;";

/// The scripts run again under the write load: the point and range reads
/// (the planned join is left out), the view-key read on the fed view.
fn loaded_scripts(scripts: &[PathBuf], live: &Path) -> Vec<(&'static str, PathBuf)> {
    SCRIPTS
        .iter()
        .zip(scripts)
        .filter(|(script, _)| !script.name.contains("planned"))
        .map(|(script, path)| match script.name {
            "view key" => (script.name, live.to_path_buf()),
            _ => (script.name, path.clone()),
        })
        .collect()
}

/// What one pgbench run measured.
struct Measured {
    tps: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Server CPU time per transaction, in microseconds.
    cpu_us: f64,
}

/// The tables, the view and the index, as both servers create them.
fn setup_sql(rows: usize, weir: bool) -> Vec<String> {
    let customers = (rows / 10).max(1);
    let view = if weir {
        "CREATE MATERIALIZED VIEW by_customer AS SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer"
    } else {
        "CREATE MATERIALIZED VIEW by_customer AS SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer; CREATE UNIQUE INDEX ON by_customer (customer)"
    };
    vec![
        "CREATE TABLE accounts (id BIGINT PRIMARY KEY, name TEXT, phone BIGINT, balance BIGINT)".into(),
        format!("INSERT INTO accounts SELECT i, 'name ' || i, i * 7, i % 1000 FROM generate_series(1, {rows}) AS s(i)"),
        "CREATE INDEX accounts_phone ON accounts (phone)".into(),
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer BIGINT, amount BIGINT)".into(),
        format!("INSERT INTO orders SELECT i, i % {customers}, i % 97 FROM generate_series(1, {rows}) AS s(i)"),
        view.into(),
        "ANALYZE".into(),
    ]
}

/// Runs the benchmark and prints its table.
pub async fn run(load: ReadLoad) -> anyhow::Result<()> {
    which("pgbench")?;
    let work = tempfile::tempdir()?;
    let server = Server::start_with(&["--checkpoint-interval", "1s"]).await?;
    let client = server.client().await?;
    for statement in setup_sql(load.rows, true) {
        if statement != "ANALYZE" {
            client.batch_execute(&statement).await?;
        }
    }
    client.batch_execute("FLUSH").await?;
    let scripts = write_scripts(work.path(), load.rows)?;
    let mut lines = Vec::new();
    let cpu = || server.cpu_time();
    // Memory with every active connection: resident before the reads,
    // and the peak while pgbench's clients (up to the largest count) read.
    let loaded_rss = server.rss_kib()?;
    for (script, path) in SCRIPTS.iter().zip(&scripts) {
        for &clients in &load.clients {
            let weir = pgbench(
                server.port(),
                "weir",
                path,
                clients,
                load.seconds,
                work.path(),
                cpu,
            )?;
            lines.push((script.name.to_owned(), clients, Some(weir), None));
        }
    }
    let active_peak = server.peak_rss_kib()?;

    // The write load: a datagen source into a view keyed by customer.
    let customers = (load.rows / 10).max(1);
    client
        .batch_execute(&format!(
            "CREATE SOURCE order_stream (customer BIGINT, amount BIGINT) WITH (connector = 'datagen', \
             rows_per_second = '{}', fields.customer.min = '0', fields.customer.max = '{}', \
             fields.amount.min = '1', fields.amount.max = '100'); \
             CREATE MATERIALIZED VIEW live_by_customer AS SELECT customer, count(*) AS n, \
             sum(amount) AS total FROM order_stream GROUP BY customer",
            load.write_rate,
            customers - 1
        ))
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let quiet = commit_latency(&client, load.seconds).await?;
    let live_path = work.path().join("live.sql");
    std::fs::write(&live_path, script_text(LIVE_VIEW_KEY, load.rows))?;
    let mut loaded = Vec::new();
    for (name, path) in loaded_scripts(&scripts, &live_path) {
        for &clients in &load.clients {
            // pgbench blocks this thread; the commits are watched on another.
            let watcher = server.client().await?;
            let seconds = load.seconds;
            let watch = tokio::spawn(async move { commit_latency(&watcher, seconds).await });
            let measured = pgbench(
                server.port(),
                "weir",
                &path,
                clients,
                load.seconds,
                work.path(),
                cpu,
            )?;
            let during = watch.await??;
            loaded.push((name, clients, measured, during));
        }
    }
    let written: i64 = client
        .query_one("SELECT sum(n)::bigint FROM live_by_customer", &[])
        .await?
        .get(0);

    drop(client);
    drop(server);

    // Idle connections, on a fresh server: each runs a statement (which
    // sets its session up), then stays open. Measured from after one
    // connection ran a statement and closed: a first statement pages in
    // the planner's code and builds the shared catalog tables, which the
    // server holds however many connections it serves.
    let fresh = Server::start().await?;
    fresh.client().await?.simple_query("SELECT 1").await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = fresh.rss_kib()?;
    let mut idle = Vec::with_capacity(load.idle);
    for _ in 0..load.idle {
        let connection = fresh.client().await?;
        connection.simple_query("SELECT 1").await?;
        idle.push(connection);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = fresh.rss_kib()?;
    // Idle for longer than the server waits before dropping an idle
    // session's planner context.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let released = fresh.rss_kib()?;
    // Every connection is still served.
    for c in &idle {
        c.simple_query("SELECT 1").await?;
    }
    drop(idle);
    drop(fresh);

    // PostgreSQL, same data and scripts.
    if !load.no_postgres {
        let postgres = Postgres::start(work.path(), &[])?;
        let pg = postgres.client().await?;
        for statement in setup_sql(load.rows, false) {
            pg.batch_execute(&statement).await?;
        }
        let cpu = || -> anyhow::Result<Duration> { Ok(Duration::ZERO) };
        let mut at = 0;
        for path in &scripts {
            for &clients in &load.clients {
                let measured = pgbench(
                    postgres.port,
                    "postgres",
                    path,
                    clients,
                    load.seconds,
                    work.path(),
                    cpu,
                )?;
                lines[at].3 = Some(measured);
                at += 1;
            }
        }
    }

    println!("| read | clients | Weir tx/s | Weir p50 ms | Weir p99 ms | Weir server CPU µs/tx | PostgreSQL tx/s | PostgreSQL p50 ms | PostgreSQL p99 ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, clients, weir, pg) in &lines {
        let weir = weir.as_ref().expect("measured");
        let pg_cells = match pg {
            Some(pg) => format!("{:.0} | {:.2} | {:.2}", pg.tps, pg.p50_ms, pg.p99_ms),
            None => "- | - | -".into(),
        };
        println!(
            "| {name} | {clients} | {:.0} | {:.2} | {:.2} | {:.1} | {pg_cells} |",
            weir.tps, weir.p50_ms, weir.p99_ms, weir.cpu_us
        );
    }
    let rate = load.write_rate;
    for (name, clients, weir, _) in &loaded {
        println!(
            "| {name}, {rate} rows/s written | {clients} | {:.0} | {:.2} | {:.2} | {:.1} | - | - | - |",
            weir.tps, weir.p50_ms, weir.p99_ms, weir.cpu_us
        );
    }
    println!();
    println!(
        "Epoch commit latency (close to visible) with the write load: without reads p50 {:.0} ms, p99 {:.0} ms ({} commits)",
        quiet.0, quiet.1, quiet.2
    );
    for (name, clients, _, during) in &loaded {
        println!(
            "  during {name} reads at {clients} clients: p50 {:.0} ms, p99 {:.0} ms ({} commits)",
            during.0, during.1, during.2
        );
    }
    println!("Rows the write load put through the view: {written}");
    let most = load.clients.iter().copied().max().unwrap_or(0);
    println!(
        "Active connections (up to {most}): resident memory {:.1} MiB before the reads, peak {:.1} MiB during them, {:.1} KiB per active connection",
        loaded_rss as f64 / 1024.0,
        active_peak as f64 / 1024.0,
        active_peak.saturating_sub(loaded_rss) as f64 / most.max(1) as f64
    );
    println!(
        "{} idle connections: resident memory {:.1} -> {:.1} MiB, {:.1} KiB per connection",
        load.idle,
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after.saturating_sub(before)) as f64 / load.idle.max(1) as f64
    );
    println!(
        "  12 s later (idle sessions' contexts dropped): {:.1} MiB, {:.1} KiB per connection",
        released as f64 / 1024.0,
        (released.saturating_sub(before)) as f64 / load.idle.max(1) as f64
    );
    Ok(())
}

/// Fails unless `program` is on the PATH.
fn which(program: &str) -> anyhow::Result<()> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()?
        .success();
    if !found {
        bail!("{program} is not installed (Debian: postgresql-client)");
    }
    Ok(())
}

/// A script's pgbench text: its random variables, then its statement.
fn script_text(body: &str, rows: usize) -> String {
    let customers = (rows / 10).max(1);
    format!(
        "\\set k random(1, {rows})\n\\set k2 :k + 9\n\\set p :k * 7\n\\set c random(0, {})\n{body}\n",
        customers - 1
    )
}

/// Writes each script to a file; returns their paths, in [`SCRIPTS`] order.
fn write_scripts(dir: &Path, rows: usize) -> anyhow::Result<Vec<PathBuf>> {
    SCRIPTS
        .iter()
        .enumerate()
        .map(|(i, script)| {
            let path = dir.join(format!("script{i}.sql"));
            std::fs::write(&path, script_text(script.body, rows))?;
            Ok(path)
        })
        .collect()
}

/// Runs pgbench with prepared statements; latencies from its per-
/// transaction log.
fn pgbench(
    port: u16,
    user: &str,
    script: &Path,
    clients: usize,
    seconds: u64,
    dir: &Path,
    cpu: impl Fn() -> anyhow::Result<Duration>,
) -> anyhow::Result<Measured> {
    let logs = dir.join(format!("log{clients}"));
    std::fs::create_dir_all(&logs)?;
    for entry in std::fs::read_dir(&logs)? {
        std::fs::remove_file(entry?.path())?;
    }
    let cpu_before = cpu()?;
    let output = Command::new("pgbench")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", user, "-n"])
        .args(["-M", "prepared", "-j", "2", "-c", &clients.to_string()])
        .args(["-T", &seconds.to_string(), "-l", "--log-prefix"])
        .arg(logs.join("tx"))
        .arg("-f")
        .arg(script)
        .arg(if user == "weir" { "weir" } else { "postgres" })
        .current_dir(&logs)
        .output()?;
    let cpu_used = cpu()?.saturating_sub(cpu_before);
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "pgbench failed: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let tps: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .context("tps in pgbench's output")?
        .parse()?;
    let processed: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .context("transactions in pgbench's output")?
        .split('/')
        .next()
        .unwrap_or("0")
        .trim()
        .parse()?;
    let mut latencies: Vec<u64> = Vec::new();
    for entry in std::fs::read_dir(&logs)? {
        let text = std::fs::read_to_string(entry?.path())?;
        // client, transaction, latency in µs, script, epoch s, epoch µs
        latencies.extend(
            text.lines()
                .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok()),
        );
    }
    anyhow::ensure!(!latencies.is_empty(), "pgbench logged no transaction");
    latencies.sort_unstable();
    let at =
        |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
    Ok(Measured {
        tps,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        cpu_us: cpu_used.as_secs_f64() * 1e6 / processed.max(1.0),
    })
}

/// The p50 and p99 of epochs' commit durations (ms) over the next
/// `seconds`, and how many committed.
async fn commit_latency(client: &Client, seconds: u64) -> anyhow::Result<(f64, f64, usize)> {
    let first: i64 = client
        .query_one("SELECT max(epoch)::bigint FROM weir_checkpoints", &[])
        .await?
        .get(0);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let rows = client
        .query(
            "SELECT duration_ms::bigint FROM weir_checkpoints WHERE epoch::bigint > $1 ORDER BY 1",
            &[&first],
        )
        .await?;
    let durations: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    anyhow::ensure!(!durations.is_empty(), "no epoch committed in {seconds} s");
    let at = |p: f64| durations[((durations.len() - 1) as f64 * p).round() as usize] as f64;
    Ok((at(0.5), at(0.99), durations.len()))
}
