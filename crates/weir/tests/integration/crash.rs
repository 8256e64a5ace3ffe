//! Crash recovery: the real binary under concurrent writes, killed with
//! SIGKILL at random moments, restarted on the same data folder.
//!
//! Writers insert batches of rows with ids they choose; a batch counts as
//! acknowledged once its INSERT returned. After each restart every
//! acknowledged batch must be there in full, and every batch must be all
//! there or not there at all. Transfers between accounts check that one
//! UPDATE of two rows is atomic across crashes: the total never changes.
//! Materialized views over both tables (aggregates, a join, top-N, a view
//! on a view) must equal their queries over the recovered tables after
//! every restart, and keep up with the writes that follow.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};

use crate::common::{assert_views_match, column, sorted_rows, TestServer};

const WRITERS: u64 = 8;
const BATCH: u64 = 5;
const ACCOUNTS: i64 = 10;
const CYCLES: usize = 5;

/// The views the crash cycles keep, and their queries.
const VIEWS: &[(&str, &str)] = &[
    ("ev_by_writer", "SELECT writer, count(*) AS n, max(batch) AS last FROM events GROUP BY writer"),
    ("ev_total", "SELECT count(*) AS n, sum(batch) AS s FROM events"),
    ("ev_accounts", "SELECT e.writer, e.batch, a.balance FROM events e JOIN accounts a ON e.writer = a.id WHERE e.batch % 10 = 0"),
    ("ev_latest", "SELECT id, batch FROM events ORDER BY id DESC LIMIT 5"),
    ("acct_richest", "SELECT id, balance FROM accounts ORDER BY balance DESC, id LIMIT 3"),
    ("ev_writers", "SELECT count(*) AS writers, sum(n) AS total FROM ev_by_writer"),
];

/// `ev_writers` reads a view; this is its query over the tables.
fn batch_query(name: &str, query: &'static str) -> &'static str {
    match name {
        "ev_writers" => "SELECT count(*) AS writers, sum(n) AS total FROM (SELECT writer, count(*) AS n FROM events GROUP BY writer) t",
        _ => query,
    }
}

async fn write_until_error(
    conn: String,
    writer: u64,
    start: u64,
    acked: Arc<Mutex<BTreeSet<u64>>>,
) {
    let Ok((client, connection)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await
    else {
        return;
    };
    tokio::spawn(connection);
    let mut batch = start;
    loop {
        let first = writer * 1_000_000 + batch * BATCH;
        let values: Vec<String> = (first..first + BATCH)
            .map(|id| format!("({id}, {writer}, {batch})"))
            .collect();
        let sql = format!("INSERT INTO events VALUES {}", values.join(", "));
        if client.simple_query(&sql).await.is_err() {
            return;
        }
        acked.lock().unwrap().insert(writer * 1_000_000 + batch);
        let a = (batch as i64) % ACCOUNTS;
        let b = (a + 1 + writer as i64) % ACCOUNTS;
        if a != b {
            let transfer = format!(
                "UPDATE accounts SET balance = balance + CASE WHEN id = {a} THEN -1 ELSE 1 END WHERE id IN ({a}, {b})"
            );
            if client.simple_query(&transfer).await.is_err() {
                return;
            }
        }
        batch += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_write() {
    kill_cycles(TestServer::start().await).await;
}

/// Writers and transfers against `server`, SIGKILL at random moments,
/// restart on the same state, and the checks described at the top.
pub async fn kill_cycles(mut server: TestServer) {
    let seed: u64 = std::env::var("WEIR_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE events (id BIGINT PRIMARY KEY, writer BIGINT NOT NULL, batch BIGINT NOT NULL);
             CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)",
        )
        .await
        .unwrap();
    let accounts: Vec<String> = (0..ACCOUNTS).map(|i| format!("({i}, 100)")).collect();
    client
        .batch_execute(&format!(
            "INSERT INTO accounts VALUES {}",
            accounts.join(", ")
        ))
        .await
        .unwrap();
    crate::common::create_views(&client, VIEWS).await;
    let checks: Vec<(&str, &str)> = VIEWS.iter().map(|&(n, q)| (n, batch_query(n, q))).collect();
    drop(client);
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let mut next_batch = vec![0u64; WRITERS as usize];
    for cycle in 0..CYCLES {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                tokio::spawn(write_until_error(
                    server.conn_string(),
                    w,
                    next_batch[w as usize],
                    acked.clone(),
                ))
            })
            .collect();
        // Let the writers make some progress whatever the machine's speed,
        // then kill at a random moment.
        let before = acked.lock().unwrap().len();
        crate::common::wait_until(Duration::from_secs(20), || {
            acked.lock().unwrap().len() >= before + 10
        })
        .await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..500))).await;
        server.restart_after_kill().await;
        for w in writers {
            w.await.unwrap();
        }
        let client = server.client().await;
        let present: BTreeSet<(u64, u64)> = client
            .query(
                "SELECT writer, batch, count(*) FROM events GROUP BY writer, batch",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| {
                let (w, b, n): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
                assert_eq!(
                    n as u64, BATCH,
                    "cycle {cycle}: batch {w}/{b} is half there"
                );
                (w as u64, b as u64)
            })
            .collect();
        let acked_now = acked.lock().unwrap().clone();
        for key in &acked_now {
            let (w, b) = (key / 1_000_000, key % 1_000_000);
            assert!(
                present.contains(&(w, b)),
                "cycle {cycle}: acknowledged batch {w}/{b} was lost (seed {seed})"
            );
        }
        for w in 0..WRITERS {
            // Each writer's batches commit in order, so the committed ones
            // are 0..=last with no gap. The batch in flight at the kill may
            // or may not be among them; the writer goes on after the last.
            let batches: Vec<u64> = present
                .iter()
                .filter(|(pw, _)| *pw == w)
                .map(|(_, b)| *b)
                .collect();
            if let Some(&last) = batches.iter().max() {
                assert_eq!(
                    batches.len() as u64,
                    last + 1,
                    "cycle {cycle}: writer {w} has a gap"
                );
                next_batch[w as usize] = last + 1;
            }
        }
        let total = column(&client, "SELECT sum(balance) FROM accounts").await;
        assert_eq!(
            total,
            vec![Some((ACCOUNTS * 100).to_string())],
            "cycle {cycle}: a transfer was torn"
        );
        assert_views_match(
            &client,
            &checks,
            &format!("after restart {cycle} (seed {seed})"),
        )
        .await;
    }
    let client = server.client().await;
    let more: Vec<String> = (0..50)
        .map(|i| format!("({}, 99, {i})", 99_000_000 + i))
        .collect();
    client
        .batch_execute(&format!("INSERT INTO events VALUES {}", more.join(", ")))
        .await
        .unwrap();
    assert_views_match(&client, &checks, "after the last restart").await;
    assert!(
        acked.lock().unwrap().len() > 20,
        "the writers should have made progress"
    );
}

#[tokio::test]
async fn catalog_and_rows_survive_a_clean_restart_and_a_kill() {
    let mut server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE kv (k TEXT PRIMARY KEY, v INT DEFAULT 42);
             CREATE TABLE log (msg TEXT);
             CREATE VIEW doubled AS SELECT k, v * 2 AS v2 FROM kv;
             INSERT INTO kv VALUES ('a', 1), ('b', 2);
             INSERT INTO kv (k) VALUES ('c');
             UPDATE kv SET v = 20 WHERE k = 'b';
             DELETE FROM kv WHERE k = 'a';
             INSERT INTO log VALUES ('x'), ('x'), ('y');
             DELETE FROM log WHERE msg = 'y';",
        )
        .await
        .unwrap();
    drop(client);
    let status = server.terminate();
    assert!(status.success(), "clean shutdown: {status}");
    server.restart_after_kill().await;
    let check = |client: tokio_postgres::Client, log_rows: &'static str| async move {
        assert_eq!(
            column(&client, "SELECT k || '=' || v FROM kv ORDER BY k").await,
            vec![Some("b=20".into()), Some("c=42".into())]
        );
        assert_eq!(
            column(&client, "SELECT v2 FROM doubled ORDER BY k").await,
            vec![Some("40".into()), Some("84".into())]
        );
        assert_eq!(
            column(&client, "SELECT count(*) FROM log").await,
            vec![Some(log_rows.into())]
        );
    };
    check(server.client().await, "2").await;
    let client = server.client().await;
    client
        .batch_execute("INSERT INTO log VALUES ('after restart')")
        .await
        .unwrap();
    // A table and an index made in a committed block survive the kill with
    // the block's rows; one made in a rolled-back block never existed.
    client
        .batch_execute(
            "BEGIN;
             CREATE TABLE made_in_block (id INT PRIMARY KEY, tag TEXT);
             CREATE INDEX made_in_block_tag ON made_in_block (tag);
             INSERT INTO made_in_block VALUES (1, 'kept'), (2, 'kept'), (3, 'other');
             COMMIT;
             BEGIN;
             CREATE TABLE rolled_back (id INT);
             ROLLBACK",
        )
        .await
        .unwrap();
    server.restart_after_kill().await;
    let client = server.client().await;
    assert_eq!(
        column(&client, "SELECT count(*) FROM log").await,
        vec![Some("3".into())]
    );
    assert_eq!(
        column(
            &client,
            "SELECT id FROM made_in_block WHERE tag = 'kept' ORDER BY id"
        )
        .await,
        vec![Some("1".into()), Some("2".into())]
    );
    let indexes = "SELECT count(*) FROM pg_class WHERE relname = 'made_in_block_tag'";
    assert_eq!(column(&client, indexes).await, vec![Some("1".into())]);
    let gone = client.simple_query("SELECT * FROM rolled_back").await;
    assert_eq!(gone.unwrap_err().code().unwrap().code(), "42P01");
    // Row ids keep counting after recovery: no clash with recovered rows.
    client
        .batch_execute("INSERT INTO log VALUES ('z')")
        .await
        .unwrap();
    check(client, "4").await;
}

/// The `tick_total` view and its reader's position, at one epoch.
async fn tick_view(client: &tokio_postgres::Client) -> (i64, i64, i64) {
    client.batch_execute("CHECKPOINT; BEGIN").await.unwrap();
    let position: i64 = client
        .query_one(
            "SELECT CAST(position AS BIGINT) FROM weir_source_readers WHERE view = 'tick_total'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let row = client
        .query_one("SELECT n, coalesce(s, 0)::bigint FROM tick_total", &[])
        .await
        .unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    (position, row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_while_writing_restores_a_consistent_epoch() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE b (id BIGINT PRIMARY KEY, v TEXT NOT NULL);
             CREATE VIEW b_count AS SELECT count(*) AS n FROM b;
             INSERT INTO b SELECT x, 'before' FROM generate_series(1, 1000) AS t(x);
             CREATE MATERIALIZED VIEW b_groups AS SELECT v, count(*) AS n, max(id) AS top FROM b GROUP BY v;
             CREATE SOURCE ticks (id BIGINT) WITH (connector = 'datagen', rows_per_second = 500, fields.id.kind = 'sequence');
             CREATE MATERIALIZED VIEW tick_total AS SELECT count(*) AS n, sum(id) AS s FROM ticks",
        )
        .await
        .unwrap();
    // A writer keeps inserting while the backup runs.
    let conn = server.conn_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let mut id = 1_000_000i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                client
                    .execute("INSERT INTO b VALUES ($1, 'during')", &[&id])
                    .await
                    .unwrap();
                id += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let target = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("backup")
        .arg("--from")
        .arg(&server.data_dir)
        .arg("--to")
        .arg(target.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("copied epoch"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();

    let restored = TestServer::start_in(target.path()).await;
    let copy = restored.client().await;
    let before = column(&copy, "SELECT count(*) FROM b WHERE v = 'before'").await;
    assert_eq!(before, vec![Some("1000".into())]);
    let total: i64 = copy
        .query_one("SELECT count(*) FROM b", &[])
        .await
        .unwrap()
        .get(0);
    let live: i64 = client
        .query_one("SELECT count(*) FROM b", &[])
        .await
        .unwrap()
        .get(0);
    assert!(total >= 1000 && total <= live, "{total} of {live}");
    // Views come back with the copy: the table's view equals its query, and
    // the source's view holds exactly the rows before its reader's position.
    assert_views_match(
        &copy,
        &[(
            "b_groups",
            "SELECT v, count(*) AS n, max(id) AS top FROM b GROUP BY v",
        )],
        "restored backup",
    )
    .await;
    let (position, n, s) = tick_view(&copy).await;
    assert!(position > 0, "the source was read before the backup");
    assert_eq!((n, s), (position, position * (position + 1) / 2));
    // ... and the copy goes on reading the source from there.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (later, n, s) = tick_view(&copy).await;
    assert!(later > position, "the copy's reader moved on");
    assert_eq!((n, s), (later, later * (later + 1) / 2));
    // The copy is one epoch: its 'during' rows are a prefix of the writer's.
    let max: i64 = copy
        .query_one(
            "SELECT coalesce(max(id), 999999) FROM b WHERE v = 'during'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(total - 1000, max - 999_999, "no gaps in the copied writes");
    assert_eq!(
        column(&copy, "SELECT n FROM b_count").await,
        vec![Some(total.to_string())]
    );
}

fn folder_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| {
                    let path = e.unwrap().path();
                    if path.is_dir() {
                        folder_bytes(&path)
                    } else {
                        std::fs::metadata(&path).map_or(0, |m| m.len())
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn steady_updates_keep_the_state_folder_bounded() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE hot (k INT PRIMARY KEY, v BIGINT, pad TEXT);
             INSERT INTO hot SELECT x, 0, repeat('p', 100) FROM generate_series(1, 5000) AS t(x);
             CREATE MATERIALIZED VIEW hot_groups AS SELECT k % 50 AS g, max(v) AS top, count(*) AS n FROM hot GROUP BY k % 50",
        )
        .await
        .unwrap();
    let mut peak = 0;
    for round in 0..300i64 {
        let lo = (round * 97) % 5000;
        client
            .execute(
                "UPDATE hot SET v = v + 1 WHERE k BETWEEN $1 AND $2",
                &[&(lo as i32), &(lo as i32 + 400)],
            )
            .await
            .unwrap();
        peak = peak.max(folder_bytes(&server.data_dir));
    }
    let row = client
        .query_one(
            "SELECT CAST(sum(base_bytes + delta_bytes) AS BIGINT), CAST(max(deltas) AS BIGINT) FROM weir_state_tables",
            &[],
        )
        .await
        .unwrap();
    let (live, deltas): (i64, i64) = (row.get(0), row.get(1));
    eprintln!("state folder peak {peak} bytes, live files {live} bytes, {deltas} deltas");
    assert!(deltas < 64, "the delta chains are compacted: {deltas}");
    // Each update rewrites ~8% of the rows, so 300 of them wrote many times
    // the table; the folder holds at most the files of 3 manifests.
    assert!(
        peak < 6 * live as u64 + (2 << 20),
        "state folder peaked at {peak} bytes for {live} live bytes"
    );
}

/// A temporal filter's rows come in and leave as the clock moves, across
/// SIGKILLs: a row let in before a kill is not let in again after it, and
/// none is retracted twice, so once every row's time has passed the
/// views are empty again.
#[tokio::test]
async fn temporal_filter_rows_come_and_go_across_kills() {
    const ROWS: u64 = 30;
    const STEP_MS: u64 = 200;
    let mut server = TestServer::start().await;
    let client = server.client().await;
    // Row i's time is i * 200 ms after the insert; each is in `recent`
    // for the two seconds after its time.
    let values: Vec<String> = (0..ROWS)
        .map(|i| format!("({i}, now() + INTERVAL '{} milliseconds')", i * STEP_MS))
        .collect();
    client
        .batch_execute(&format!(
            "CREATE TABLE ev (id INT PRIMARY KEY, ts TIMESTAMP);
             CREATE MATERIALIZED VIEW recent AS SELECT id FROM ev
               WHERE ts <= now() AND ts > now() - INTERVAL '2 seconds';
             CREATE MATERIALIZED VIEW recent_count AS SELECT count(*) AS n FROM recent;
             INSERT INTO ev VALUES {};",
            values.join(", ")
        ))
        .await
        .unwrap();
    let inserted = std::time::Instant::now();
    let mut most_seen = 0;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        server.kill();
        server.restart_after_kill().await;
        let client = server.client().await;
        let ids: Vec<i64> = column(&client, "SELECT id FROM recent ORDER BY id")
            .await
            .into_iter()
            .map(|v| v.unwrap().parse().unwrap())
            .collect();
        // The rows in are those of one stretch of time, each once.
        let distinct: BTreeSet<i64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len(), "a row is in twice: {ids:?}");
        if let (Some(first), Some(last)) = (ids.first(), ids.last()) {
            assert_eq!(
                (last - first + 1) as usize,
                ids.len(),
                "not one stretch: {ids:?}"
            );
        }
        most_seen = most_seen.max(ids.len());
    }
    assert!(most_seen > 0, "no row was ever in the view");
    // Every row's time and two seconds more have passed.
    let all_out = Duration::from_millis(ROWS * STEP_MS + 2_000 + 1_000);
    tokio::time::sleep(all_out.saturating_sub(inserted.elapsed())).await;
    let client = server.client().await;
    client.batch_execute("CHECKPOINT").await.unwrap();
    assert_eq!(
        column(&client, "SELECT count(*) FROM recent").await,
        vec![Some("0".into())]
    );
    assert_eq!(
        column(&client, "SELECT n FROM recent_count").await,
        vec![Some("0".into())]
    );
}

/// The rows a sink delivered since the server started, as `SHOW SINKS`
/// reports them.
async fn rows_delivered(client: &tokio_postgres::Client, sink: &str) -> Option<u64> {
    sorted_rows(client, "SHOW SINKS")
        .await
        .into_iter()
        .find(|row| row[0].as_deref() == Some(sink))
        .map(|row| row[2].as_deref().expect("a count").parse().unwrap())
}

/// A sink over a source runs on after a SIGKILL: it is restored with its
/// state, its readers resume, and it delivers again.
#[tokio::test]
async fn a_sink_runs_on_after_a_kill() {
    let mut server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE SOURCE clicks (id BIGINT, page INT) WITH (connector = 'datagen',
               rows_per_second = 2000, fields.id.kind = 'sequence', fields.page.min = 1,
               fields.page.max = 5);
             CREATE SINK per_page AS SELECT page, count(*) AS n FROM clicks GROUP BY page
               WITH (connector = 'blackhole')",
        )
        .await
        .unwrap();
    for round in 0..2 {
        let client = server.client().await;
        let started = std::time::Instant::now();
        let mut delivered = 0;
        while delivered == 0 && started.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            delivered = rows_delivered(&client, "per_page").await.expect("listed");
        }
        assert!(delivered > 0, "round {round}: the sink delivered nothing");
        let error = client
            .simple_query("SELECT * FROM per_page")
            .await
            .unwrap_err();
        assert_eq!(error.code().unwrap().code(), "42809");
        server.kill();
        server.restart_after_kill().await;
    }
}

/// What sequence numbers the clients saw: ids of rows an INSERT returned,
/// and numbers a bare `SELECT nextval` returned.
#[derive(Default)]
struct SeenNumbers {
    row_ids: BTreeSet<i64>,
    selected: BTreeSet<i64>,
}

/// Takes numbers until the server goes away: each task alternates
/// INSERTs into a `SERIAL` table (ids from RETURNING) and `SELECT
/// nextval` of a plain sequence, recording what came back.
async fn take_numbers_until_error(conn: String, seen: Arc<Mutex<SeenNumbers>>) {
    let Ok((client, connection)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await
    else {
        return;
    };
    tokio::spawn(connection);
    loop {
        let Ok(rows) = client
            .query(
                "INSERT INTO numbered (note) VALUES ('a'), ('b'), ('c') RETURNING id",
                &[],
            )
            .await
        else {
            return;
        };
        let ids: Vec<i64> = rows.iter().map(|r| i64::from(r.get::<_, i32>(0))).collect();
        seen.lock().unwrap().row_ids.extend(ids);
        let Ok(row) = client.query_one("SELECT nextval('tickets')", &[]).await else {
            return;
        };
        seen.lock().unwrap().selected.insert(row.get::<_, i64>(0));
        // Two statements in one simple query (an implicit block), and a
        // block: numbers count as seen once the query or COMMIT returned.
        for sql in [
            "SELECT nextval('tickets'); SELECT nextval('tickets')",
            "BEGIN; SELECT nextval('tickets'); COMMIT",
        ] {
            let Ok(messages) = client.simple_query(sql).await else {
                return;
            };
            let numbers = messages.iter().filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse::<i64>().ok(),
                _ => None,
            });
            seen.lock().unwrap().selected.extend(numbers);
        }
    }
}

/// Sequence numbers through SIGKILL: every row a client was told it
/// inserted is there, and no number a client saw (a row's id, or a bare
/// `nextval`) is handed out again after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_numbers_are_never_handed_out_twice_through_sigkill() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut server = TestServer::start().await;
    server
        .client()
        .await
        .batch_execute(
            "CREATE TABLE numbered (id SERIAL PRIMARY KEY, note TEXT);
             CREATE SEQUENCE tickets",
        )
        .await
        .unwrap();
    let seen = Arc::new(Mutex::new(SeenNumbers::default()));
    for cycle in 0..CYCLES {
        let tasks: Vec<_> = (0..4)
            .map(|_| tokio::spawn(take_numbers_until_error(server.conn_string(), seen.clone())))
            .collect();
        let (selected, rows) = {
            let seen = seen.lock().unwrap();
            (seen.selected.len(), seen.row_ids.len())
        };
        // Each cycle waits for its numbers (the counts asserted at the
        // end), however slowly a loaded machine hands them out.
        crate::common::wait_until(Duration::from_secs(30), || {
            let seen = seen.lock().unwrap();
            seen.selected.len() >= selected + 10 && seen.row_ids.len() >= rows + 30
        })
        .await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        server.restart_after_kill().await;
        for task in tasks {
            task.await.unwrap();
        }
        let client = server.client().await;
        let stored: BTreeSet<i64> = client
            .query("SELECT id FROM numbered", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| i64::from(r.get::<_, i32>(0)))
            .collect();
        let (max_row_id, max_selected) = {
            let seen = seen.lock().unwrap();
            let missing: Vec<&i64> = seen.row_ids.difference(&stored).collect();
            assert!(
                missing.is_empty(),
                "cycle {cycle}: acknowledged rows lost: {missing:?}"
            );
            let max = |numbers: &BTreeSet<i64>| numbers.last().copied().unwrap_or(0);
            (max(&seen.row_ids), max(&seen.selected))
        };
        // The next numbers are past every one a client saw.
        let next_id: i32 = client
            .query_one("SELECT nextval('numbered_id_seq')::int", &[])
            .await
            .unwrap()
            .get(0);
        let next_ticket: i64 = client
            .query_one("SELECT nextval('tickets')", &[])
            .await
            .unwrap()
            .get(0);
        let max_stored = stored.iter().max().copied().unwrap_or(0);
        assert!(
            i64::from(next_id) > max_stored.max(max_row_id),
            "cycle {cycle}: id {next_id} handed out again (stored up to {max_stored})"
        );
        assert!(
            next_ticket > max_selected,
            "cycle {cycle}: nextval gave {next_ticket} after a client saw {max_selected}"
        );
    }
    let seen = seen.lock().unwrap();
    // The clients did take numbers (each cycle waits for ten more).
    assert!(
        seen.selected.len() >= 10 * CYCLES,
        "{}",
        seen.selected.len()
    );
    assert!(seen.row_ids.len() >= 30 * CYCLES, "{}", seen.row_ids.len());
}

/// Inserts rows with ids from `next` on until the server goes away;
/// records the ids of acknowledged inserts.
async fn insert_until_error(conn: String, next: i64, acked: Arc<Mutex<BTreeSet<i64>>>) {
    let Ok((client, connection)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await
    else {
        return;
    };
    tokio::spawn(connection);
    for id in next.. {
        let sql = format!("INSERT INTO altered (id, v) VALUES ({id}, {id} * 2)");
        if client.batch_execute(&sql).await.is_err() {
            return;
        }
        acked.lock().unwrap().insert(id);
    }
}

/// `ALTER TABLE ... ADD COLUMN` while another connection inserts, killed
/// at random moments (during the rewrite, or just after it returned):
/// after each restart every acknowledged insert and every acknowledged
/// column is there, and each column holds its default in every row,
/// rows inserted before it and after it alike. The table is written again
/// by each `ALTER`, so a lost or half-applied one would show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_commits_whole_through_sigkill() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let mut server = TestServer::start().await;
    server
        .client()
        .await
        .batch_execute(
            "CREATE TABLE altered (id BIGINT PRIMARY KEY, v BIGINT);
             INSERT INTO altered SELECT x, x * 2 FROM generate_series(1000000, 1019999) AS x",
        )
        .await
        .unwrap();
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let mut columns_acked = BTreeSet::new();
    let mut alters = 0;
    for cycle in 0..CYCLES {
        let writer = tokio::spawn(insert_until_error(
            server.conn_string(),
            (cycle as i64) * 1_000_000_000 + 1,
            acked.clone(),
        ));
        // Two ALTERs a cycle: the first waited for, the second killed at
        // a random moment.
        for k in 0..2 {
            let column = cycle * 2 + k;
            let sql = format!("ALTER TABLE altered ADD COLUMN c{column} BIGINT DEFAULT {column}");
            let client = server.client().await;
            let alter = tokio::spawn(async move { client.batch_execute(&sql).await.is_ok() });
            if k == 0 {
                assert!(alter.await.unwrap(), "cycle {cycle}: ALTER failed");
                columns_acked.insert(column);
                alters += 1;
            } else {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..400))).await;
                server.restart_after_kill().await;
                if alter.await.unwrap() {
                    columns_acked.insert(column);
                    alters += 1;
                }
            }
        }
        writer.await.unwrap();
        let client = server.client().await;
        let stored: BTreeSet<i64> = client
            .query(
                "SELECT id FROM altered WHERE id < 1000000 OR id >= 1020000",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, i64>(0))
            .collect();
        let missing: Vec<i64> = acked.lock().unwrap().difference(&stored).copied().collect();
        assert!(
            missing.is_empty(),
            "cycle {cycle}: acknowledged rows lost: {missing:?}"
        );
        let present: BTreeSet<usize> = client
            .query(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_name = 'altered' AND column_name LIKE 'c%'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0)[1..].parse().unwrap())
            .collect();
        let lost: Vec<&usize> = columns_acked.difference(&present).collect();
        assert!(
            lost.is_empty(),
            "cycle {cycle}: acknowledged columns lost: {lost:?}"
        );
        for column in &present {
            let wrong: i64 = client
                .query_one(
                    &format!(
                        "SELECT count(*) FROM altered \
                         WHERE c{column} IS DISTINCT FROM {column} OR v <> id * 2"
                    ),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(wrong, 0, "cycle {cycle}: rows without c{column}'s default");
        }
        let total: i64 = client
            .query_one("SELECT count(*) FROM altered", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(total as usize, 20_000 + stored.len(), "cycle {cycle}");
    }
    // The operations did happen: every cycle's first ALTER, and inserts.
    assert!(alters >= CYCLES, "{alters}");
    assert!(
        acked.lock().unwrap().len() >= CYCLES,
        "{:?}",
        acked.lock().unwrap().len()
    );
}
