//! Sinks that deliver committed epochs: the PostgreSQL sink against a
//! real PostgreSQL (see `reference_postgres`): upserts and appends applied
//! per epoch, the errors of sinks it cannot deliver, a target that fails
//! for a while (changes wait in the checkpoint, shown by `SHOW SINKS`, and
//! arrive once it is back); the file sink's Parquet objects; and both
//! delivering every row exactly once through SIGKILL cycles of a server
//! reading a datagen source.

use std::path::Path;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, Int64Array, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::common::{sorted_rows, sqlstate, TestServer};
use crate::reference_postgres::{connect, fresh_database, Endpoint};

/// The `WITH (...)` of a PostgreSQL sink into `table` of database `url`.
fn sink_options(url: &str, table: &str, kind: &str) -> String {
    let Endpoint {
        host,
        port,
        user,
        database,
    } = Endpoint::of(url);
    format!(
        "connector = 'postgres', host = '{host}', port = '{port}', user = '{user}', \
         database = '{database}', table = '{table}', type = '{kind}'"
    )
}

/// Waits until `query` answers the same on the target and on Weir, and
/// returns the rows; panics after `limit` with both.
async fn wait_delivered(
    target: &Client,
    target_query: &str,
    weir: &Client,
    weir_query: &str,
    limit: Duration,
) -> Vec<Vec<Option<String>>> {
    let started = Instant::now();
    loop {
        let expected = sorted_rows(weir, weir_query).await;
        let delivered = sorted_rows(target, target_query).await;
        if delivered == expected {
            return delivered;
        }
        if started.elapsed() > limit {
            let sinks = sorted_rows(weir, "SHOW SINKS").await;
            panic!(
                "{target_query}: PostgreSQL holds {delivered:?}, Weir {expected:?}; sinks: {sinks:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `SHOW SINKS`' row for `name`: (delivered epoch, pending epochs,
/// pending rows, last error).
pub(crate) async fn sink_status(weir: &Client, name: &str) -> (u64, u64, u64, String) {
    let rows = sorted_rows(weir, "SHOW SINKS").await;
    let row = rows
        .iter()
        .find(|r| r[0].as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no sink {name} in {rows:?}"));
    let number = |i: usize| row[i].as_deref().unwrap_or("0").parse::<u64>().unwrap_or(0);
    (
        number(3),
        number(4),
        number(5),
        row[6].clone().unwrap_or_default(),
    )
}

/// Waits until sink `name`'s status satisfies `done`, and returns it;
/// panics after 30 s with the last one.
pub(crate) async fn wait_status(
    weir: &Client,
    name: &str,
    done: impl Fn(&(u64, u64, u64, String)) -> bool,
) -> (u64, u64, u64, String) {
    let started = Instant::now();
    loop {
        let status = sink_status(weir, name).await;
        if done(&status) {
            return status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "sink {name}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn postgres_sinks_apply_each_epoch_and_refuse_what_they_cannot_deliver() {
    let (_postgres, url) = fresh_database("weir_sink_basic").await;
    let target = connect(&url).await;
    target
        .batch_execute(
            "CREATE TABLE totals (k int PRIMARY KEY, n bigint NOT NULL, s numeric, label text);
             CREATE TABLE events (id bigint, v text, at timestamptz);
             SET TimeZone = 'UTC'",
        )
        .await
        .unwrap();
    let server = TestServer::start().await;
    let weir = server.client().await;
    weir.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY, k int, v text);
         CREATE TABLE e (id bigint, v text, at timestamptz) APPEND ONLY",
    )
    .await
    .unwrap();
    let upsert =
        |table: &str| format!("{}, primary_key = 'k'", sink_options(&url, table, "upsert"));
    let append = |table: &str| sink_options(&url, table, "append-only");
    let totals = "SELECT k, count(*) AS n, sum(id) AS s, max(v) AS label FROM t GROUP BY k";
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (sql, state) in [
        // An aggregate updates its rows: append-only cannot deliver it.
        (
            format!("CREATE SINK bad AS {totals} WITH ({})", append("totals")),
            "22023",
        ),
        (
            format!("CREATE SINK bad AS {totals} WITH ({})", upsert("missing")),
            "42P01",
        ),
        (
            format!(
                "CREATE SINK bad AS SELECT id, v, 1 AS k FROM e WITH ({})",
                append("events")
            ),
            "42703",
        ),
        (
            format!(
                "CREATE SINK bad AS {totals} WITH ({})",
                sink_options(&url, "totals", "upsert")
            ),
            "22023",
        ),
        (
            format!(
                "CREATE SINK bad AS {totals} WITH ({}, primary_key = 'nope')",
                sink_options(&url, "totals", "upsert")
            ),
            "42703",
        ),
        (
            format!(
                "CREATE SINK bad AS {totals} WITH ({}, port = '{closed_port}')",
                upsert("totals")
            ),
            "08001",
        ),
        (
            format!(
                "CREATE SINK bad AS {totals} WITH ({}, colour = 'red')",
                upsert("totals")
            ),
            "22023",
        ),
    ] {
        assert_eq!(sqlstate(&weir, &sql).await, state, "{sql}");
    }
    weir.batch_execute("INSERT INTO t VALUES (1, 1, 'a'), (2, 2, 'b')")
        .await
        .unwrap();
    weir.batch_execute(&format!(
        "CREATE SINK totals_sink AS {totals} WITH ({});
         CREATE SINK events_sink AS SELECT id, v, at FROM e WITH ({})",
        upsert("totals"),
        append("events")
    ))
    .await
    .unwrap();
    let target_totals = "SELECT k, n, s::text, label FROM totals";
    let weir_totals = "SELECT k, count(*), sum(id)::text, max(v) FROM t GROUP BY k";
    let totals_delivered = || {
        wait_delivered(
            &target,
            target_totals,
            &weir,
            weir_totals,
            Duration::from_secs(30),
        )
    };
    // The backfill (the rows before the sink) is delivered too.
    totals_delivered().await;
    for statements in [
        "INSERT INTO t SELECT i, i % 7, 'v' || i FROM generate_series(3, 300) AS g(i)",
        "UPDATE t SET k = 3, v = 'moved' WHERE id < 40",
        // Group 5 disappears: its row is deleted from the target.
        "DELETE FROM t WHERE k = 5",
        "INSERT INTO e VALUES (1, 'x''y\\z', '2024-01-01 10:00:00+02'), (2, NULL, NULL), (1, 'x''y\\z', '2024-01-01 10:00:00+02')",
        "INSERT INTO e SELECT i, 'row ' || i, TIMESTAMPTZ '2024-06-01 00:00:00+00' + i * INTERVAL '1 minute' FROM generate_series(3, 500) AS g(i)",
    ] {
        weir.batch_execute(statements).await.unwrap();
    }
    let delivered = totals_delivered().await;
    assert_eq!(delivered.len(), 6, "groups 0-6 but 5: {delivered:?}");
    let events = wait_delivered(
        &target,
        "SELECT id, v, at::text FROM events",
        &weir,
        "SELECT id, v, at::text FROM e",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        events.len(),
        501,
        "duplicates are delivered as often as inserted"
    );
    wait_status(&weir, "totals_sink", |(delivered, pending, _, error)| {
        *delivered > 0 && *pending == 0 && error.is_empty()
    })
    .await;

    // The target fails for a while: changes wait in Weir's checkpoints,
    // SHOW SINKS says what waits and why, and all of it arrives once the
    // target is back.
    target
        .batch_execute("ALTER TABLE totals RENAME TO totals_away")
        .await
        .unwrap();
    weir.batch_execute("INSERT INTO t VALUES (1000, 9, 'late'); FLUSH")
        .await
        .unwrap();
    weir.batch_execute("INSERT INTO t VALUES (1001, 9, 'later'); FLUSH")
        .await
        .unwrap();
    let (_, _, rows, error) = wait_status(&weir, "totals_sink", |(_, pending, _, error)| {
        *pending >= 2 && !error.is_empty()
    })
    .await;
    assert!(rows >= 2, "the two rows wait: {rows}");
    assert!(
        error.contains("totals"),
        "the error names the target: {error}"
    );
    target
        .batch_execute("ALTER TABLE totals_away RENAME TO totals")
        .await
        .unwrap();
    totals_delivered().await;
    wait_status(&weir, "totals_sink", |(_, pending, rows, error)| {
        (*pending, *rows, error.as_str()) == (0, 0, "")
    })
    .await;

    let progress = sorted_rows(&target, "SELECT sink FROM weir_sink_progress").await;
    assert_eq!(
        progress,
        [
            [Some("events_sink".to_owned())],
            [Some("totals_sink".to_owned())]
        ]
    );
    weir.batch_execute("DROP SINK totals_sink; DROP SINK events_sink")
        .await
        .unwrap();
    assert!(sorted_rows(&weir, "SHOW SINKS").await.is_empty());
}

/// Rows the datagen source of the crash test produces in all.
const TOTAL_ROWS: u64 = 24_000;

#[tokio::test]
async fn a_postgres_sink_delivers_every_epoch_once_through_sigkill_cycles() {
    const CYCLES: usize = 10;
    let (_postgres, url) = fresh_database("weir_sink_crash").await;
    let target = connect(&url).await;
    target
        .batch_execute(
            "CREATE TABLE all_rows (id bigint, k int);
             CREATE TABLE per_key (k int PRIMARY KEY, n bigint, s bigint)",
        )
        .await
        .unwrap();
    let files = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms"]).await;
    let weir = server.client().await;
    weir.batch_execute(&format!(
        "CREATE SOURCE src (id bigint, k int) WITH (connector = 'datagen', \
             rows_per_second = '2000', total_rows = '{TOTAL_ROWS}', seed = '5', \
             fields.id.kind = 'sequence', fields.k.min = '0', fields.k.max = '9');
         CREATE SINK all_rows_sink AS SELECT id, k FROM src WITH ({});
         CREATE SINK per_key_sink AS SELECT k, count(*) AS n, sum(id)::bigint AS s \
             FROM src GROUP BY k WITH ({}, primary_key = 'k');
         CREATE SINK files_sink AS SELECT id, k FROM src \
             WITH (connector = 'filesystem', path = '{}', format = 'parquet')",
        sink_options(&url, "all_rows", "append-only"),
        sink_options(&url, "per_key", "upsert"),
        files.path().display(),
    ))
    .await
    .unwrap();
    drop(weir);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut delivered_before_kill = Vec::new();
    for _ in 0..CYCLES {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1200))).await;
        let count = sorted_rows(&target, "SELECT count(*) FROM all_rows").await;
        delivered_before_kill.push(count[0][0].clone().unwrap_or_default());
        server.restart_after_kill().await;
    }
    // Every row once, whatever was delivered before each kill.
    let started = Instant::now();
    let count = loop {
        let count: u64 = sorted_rows(&target, "SELECT count(*) FROM all_rows").await[0][0]
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        if count >= TOTAL_ROWS || started.elapsed() > Duration::from_secs(120) {
            break count;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Rows delivered after the count reached the total would be doubles.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let summary = sorted_rows(
        &target,
        "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM all_rows",
    )
    .await;
    assert_eq!(
        count, TOTAL_ROWS,
        "deliveries before each kill: {delivered_before_kill:?}"
    );
    let distinct = summary[0][1].as_deref().unwrap().parse::<u64>().unwrap();
    assert_eq!(
        (summary[0][0].as_deref(), distinct),
        (Some(TOTAL_ROWS.to_string().as_str()), TOTAL_ROWS),
        "every source row exactly once: {summary:?}"
    );
    let growing: Vec<u64> = delivered_before_kill
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    assert!(
        growing.iter().filter(|&&c| c > 0 && c < TOTAL_ROWS).count() >= 3,
        "several kills came while rows were being delivered: {growing:?}"
    );
    // The upsert sink's rows are the aggregate of what was appended.
    let weir = server.client().await;
    wait_delivered(
        &target,
        "SELECT k, n, s FROM per_key",
        &target,
        "SELECT k, count(*), sum(id) FROM all_rows GROUP BY k",
        Duration::from_secs(30),
    )
    .await;
    wait_status(&weir, "per_key_sink", |(delivered, pending, _, error)| {
        *delivered > 0 && *pending == 0 && error.is_empty()
    })
    .await;
    // The files hold every row once too: an epoch written again before a
    // kill and after it is the same object.
    wait_status(&weir, "files_sink", |(_, pending, _, error)| {
        *pending == 0 && error.is_empty()
    })
    .await;
    let (objects, rows) = parquet_ids(files.path());
    let mut ids = rows.clone();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        (rows.len() as u64, ids.len() as u64),
        (TOTAL_ROWS, TOTAL_ROWS),
        "{objects} objects"
    );
    server.kill();
}

/// Whether `name` is a local object store's upload in progress.
fn staging(name: &str) -> bool {
    name.rsplit_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The Parquet objects a file sink wrote under `dir` (each named by its
/// epoch), and the `id` column of all their rows.
pub(crate) fn parquet_ids(dir: &Path) -> (usize, Vec<i64>) {
    let mut objects = 0;
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if staging(&name) {
            // object_store's local put writes `<name>#<n>` and renames it;
            // one the kill interrupted is left behind, and listings skip it.
            continue;
        }
        let epoch = name
            .strip_suffix(".parquet")
            .unwrap_or_else(|| panic!("{name}: a file sink writes only <epoch>.parquet"));
        assert!(
            epoch.len() == 20 && epoch.bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
        objects += 1;
        for batch in ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap()
        {
            let batch = batch.unwrap();
            let column = batch.column_by_name("id").expect("an id column");
            let column = column.as_any().downcast_ref::<Int64Array>().unwrap();
            ids.extend(column.values().iter().copied());
        }
    }
    (objects, ids)
}

#[tokio::test]
async fn file_sinks_write_each_committed_epoch_as_one_parquet_object() {
    let files = tempfile::tempdir().unwrap();
    let path = files.path().display().to_string();
    let server = TestServer::start().await;
    let weir = server.client().await;
    weir.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY, v text);
         CREATE TABLE e (id bigint, v text) APPEND ONLY",
    )
    .await
    .unwrap();
    for (sql, state) in [
        (format!("CREATE SINK f AS SELECT * FROM t WITH (connector = 'filesystem', path = '{path}')"), "22023"),
        (format!("CREATE SINK f AS SELECT * FROM e WITH (connector = 'filesystem', path = '{path}', format = 'csv')"), "0A000"),
        ("CREATE SINK f AS SELECT * FROM e WITH (connector = 'filesystem')".to_owned(), "22023"),
        (format!("CREATE SINK f AS SELECT * FROM e WITH (connector = 'filesystem', path = '{path}', colour = 'red')"), "22023"),
    ] {
        assert_eq!(sqlstate(&weir, &sql).await, state, "{sql}");
    }
    weir.batch_execute("INSERT INTO e VALUES (1, 'before the sink')")
        .await
        .unwrap();
    weir.batch_execute(&format!(
        "CREATE SINK f AS SELECT id, v FROM e WHERE id % 10 <> 7 \
         WITH (connector = 'filesystem', path = '{path}', format = 'parquet', type = 'append-only')"
    ))
    .await
    .unwrap();
    for statement in [
        "INSERT INTO e VALUES (2, 'a'), (2, 'a'), (3, NULL)",
        "INSERT INTO e SELECT i, 'row ' || i FROM generate_series(4, 1000) AS g(i)",
        "INSERT INTO e VALUES (17, 'filtered out'), (1001, 'last')",
    ] {
        weir.batch_execute(statement).await.unwrap();
    }
    weir.batch_execute("FLUSH").await.unwrap();
    wait_status(&weir, "f", |(delivered, pending, _, error)| {
        *delivered > 0 && *pending == 0 && error.is_empty()
    })
    .await;
    let (objects, mut ids) = parquet_ids(files.path());
    assert!(
        objects >= 4,
        "the backfill and each statement: {objects} objects"
    );
    ids.sort_unstable();
    let mut expected: Vec<i64> = sorted_rows(&weir, "SELECT id FROM e WHERE id % 10 <> 7")
        .await
        .iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    expected.sort_unstable();
    assert!(expected.windows(2).any(|w| w[0] == w[1]), "a duplicate row");
    assert_eq!(ids, expected, "every row as often as inserted");
    // Texts and NULLs as written.
    let mut texts = Vec::new();
    for entry in std::fs::read_dir(files.path()).unwrap() {
        let file = std::fs::File::open(entry.unwrap().path()).unwrap();
        for batch in ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
        {
            let batch = batch.unwrap();
            let v = batch.column_by_name("v").unwrap();
            let v = v.as_any().downcast_ref::<StringArray>().unwrap();
            texts.extend((0..v.len()).map(|i| v.is_valid(i).then(|| v.value(i).to_owned())));
        }
    }
    assert!(texts.contains(&None) && texts.contains(&Some("before the sink".to_owned())));
    assert!(!texts.contains(&Some("filtered out".to_owned())));
}
