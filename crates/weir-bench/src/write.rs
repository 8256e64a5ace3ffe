//! `weir-bench write`: the write path, in rows per CPU-second of the
//! server. Rows are the recovery benchmark's: 128 bytes each (`id`, `n`
//! in 0..1000, a 112-byte payload), loaded with `COPY` or with multi-row
//! `INSERT`s, into a table alone or read by a group-by view.

use std::time::Instant;

use crate::server::Server;

/// What to measure.
#[derive(Debug)]
pub struct WriteLoad {
    /// `copy` or `insert`.
    pub mode: String,
    /// Rows written.
    pub rows: usize,
    /// Rows per `COPY` or per `INSERT` statement.
    pub batch: usize,
    /// Concurrent connections.
    pub connections: usize,
    /// With a group-by view over the table (`SELECT n, count(*), sum(id)
    /// ... GROUP BY n`).
    pub view: bool,
    /// With a `UNIQUE (n, id)` constraint, which every row passes: what
    /// the check costs.
    pub unique: bool,
    /// Afterwards, time `ALTER TABLE big ADD COLUMN` (which writes the
    /// table again).
    pub alter: bool,
}

/// The text column's bytes: with the two `BIGINT`s, 128-byte rows.
const PAYLOAD: usize = 112;

/// Runs the load on a fresh server and prints its figures.
pub async fn run(load: WriteLoad) -> anyhow::Result<()> {
    anyhow::ensure!(
        load.mode == "copy" || load.mode == "insert",
        "--mode is copy or insert"
    );
    anyhow::ensure!(load.batch > 0 && load.connections > 0 && load.rows > 0);
    let server = Server::start().await?;
    let client = server.client().await?;
    client
        .batch_execute("CREATE TABLE big (id BIGINT PRIMARY KEY, n BIGINT, payload TEXT)")
        .await?;
    if load.unique {
        client
            .batch_execute("ALTER TABLE big ADD CONSTRAINT big_n_id UNIQUE (n, id)")
            .await?;
    }
    if load.view {
        client
            .batch_execute(
                "CREATE MATERIALIZED VIEW per_n AS SELECT n, count(*) AS c, sum(id) AS s FROM big GROUP BY n",
            )
            .await?;
    }
    let epochs_before = crate::show(&client, "epochs_committed").await?;
    let cpu_before = server.cpu_time()?;
    let started = Instant::now();
    let per_connection = load.rows.div_ceil(load.connections);
    let mut tasks = Vec::new();
    for c in 0..load.connections {
        let client = server.client().await?;
        let from = c * per_connection;
        let to = ((c + 1) * per_connection).min(load.rows);
        let (copy, batch) = (load.mode == "copy", load.batch);
        tasks.push(tokio::spawn(async move {
            let mut id = from;
            while id < to {
                let end = (id + batch).min(to);
                if copy {
                    copy_rows(&client, id, end).await?;
                } else {
                    insert_rows(&client, id, end).await?;
                }
                id = end;
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let wall = started.elapsed();
    let cpu = server.cpu_time()? - cpu_before;
    let epochs = crate::show(&client, "epochs_committed").await? - epochs_before;
    let count: i64 = client
        .query_one("SELECT count(*) FROM big", &[])
        .await?
        .get(0);
    anyhow::ensure!(count as usize == load.rows, "{count} rows in big");
    if load.view {
        let in_view: i64 = client
            .query_one("SELECT CAST(sum(c) AS BIGINT) FROM per_n", &[])
            .await?
            .get(0);
        anyhow::ensure!(in_view as usize == load.rows, "{in_view} rows in per_n");
    }
    println!(
        "write: {} rows of 128 bytes by {} ({} rows each, {} connections), {}",
        load.rows,
        load.mode,
        load.batch,
        load.connections,
        if load.view {
            "with a group-by view"
        } else {
            "no view"
        }
    );
    println!(
        "    rows per second        {:>10.0}",
        load.rows as f64 / wall.as_secs_f64()
    );
    println!(
        "    rows per CPU-second    {:>10.0}  ({:.2} CPU-s of the server)",
        load.rows as f64 / cpu.as_secs_f64(),
        cpu.as_secs_f64()
    );
    if load.unique {
        println!("    with UNIQUE (n, id)");
    }
    println!("    epochs committed       {epochs:>10}");
    println!(
        "    peak resident memory   {:>10} MiB",
        server.peak_rss_kib()? / 1024
    );
    if load.alter {
        anyhow::ensure!(!load.view, "--alter needs a table no view reads");
        let cpu_before = server.cpu_time()?;
        let started = Instant::now();
        client
            .batch_execute("ALTER TABLE big ADD COLUMN added BIGINT DEFAULT 7")
            .await?;
        let (wall, cpu) = (started.elapsed(), server.cpu_time()? - cpu_before);
        let added: i64 = client
            .query_one("SELECT count(*) FROM big WHERE added = 7", &[])
            .await?
            .get(0);
        anyhow::ensure!(
            added as usize == load.rows,
            "{added} rows with the new column"
        );
        println!(
            "    ALTER TABLE ADD COLUMN {:>10.2} s, {:.2} CPU-s ({:.0} rows per CPU-second)",
            wall.as_secs_f64(),
            cpu.as_secs_f64(),
            load.rows as f64 / cpu.as_secs_f64()
        );
    }
    Ok(())
}

/// Rows `from..to` of table `big` by one `COPY`.
pub(crate) async fn copy_rows(
    client: &tokio_postgres::Client,
    from: usize,
    to: usize,
) -> anyhow::Result<()> {
    let payload = "x".repeat(PAYLOAD);
    let mut data = String::with_capacity((to - from) * 140);
    for i in from..to {
        data.push_str(&format!("{i}\t{}\t{payload}\n", i % 1000));
    }
    let sink = client.copy_in("COPY big FROM STDIN").await?;
    futures::pin_mut!(sink);
    futures::SinkExt::send(&mut sink, bytes::Bytes::from(data)).await?;
    sink.as_mut().finish().await?;
    Ok(())
}

async fn insert_rows(
    client: &tokio_postgres::Client,
    from: usize,
    to: usize,
) -> anyhow::Result<()> {
    let payload = "x".repeat(PAYLOAD);
    let values: Vec<String> = (from..to)
        .map(|i| format!("({}, {}, '{payload}')", i, i % 1000))
        .collect();
    client
        .batch_execute(&format!("INSERT INTO big VALUES {}", values.join(", ")))
        .await?;
    Ok(())
}
