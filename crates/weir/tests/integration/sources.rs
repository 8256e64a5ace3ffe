//! Datagen sources through crashes: views over a fast and a slow source
//! and a table under concurrent DML, SIGKILLed at random moments and
//! restarted with 1, 2 or 3 workers (views over the sources alone then run
//! as that many partitioned instances, their state dealt out again by
//! key; the others read each source with that many readers), must after every
//! restart hold exactly their queries over the source rows their readers
//! read (each split's rows up to its position, read at the same epoch as
//! the view) and the table as committed: no row lost, none doubled, no
//! epoch mixing records of two epochs (the join of the fast and the slow
//! source would show it). A source with a watermark feeds windows emitted
//! on close (1-second windows by `date_bin` and by `TUMBLE`, 2-second
//! windows every second by `HOP`): after every restart each window is
//! there once, exact over every row of the source in it, none is missing
//! below the last, and no row was counted late;
//! a view of session windows over it forgets each session the watermark
//! closes and must stay exact all the same. A temporal join of the fast
//! source with the table (`FOR SYSTEM_TIME AS OF PROCTIME()`) must give
//! each row read exactly one row.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::array::{Int32Array, RecordBatch, StringArray};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use rand::{Rng, SeedableRng};
use tokio_postgres::SimpleQueryMessage;
use weir_connectors::datagen::{split_rows, DatagenSpec};

use crate::common::{sorted_rows, sqlstate, TestServer};

const CYCLES: usize = 20;
const KEYS: i32 = 12;

/// A source: name, columns, WITH options.
type SourceSpec = (
    &'static str,
    &'static [(&'static str, DataType)],
    &'static [(&'static str, &'static str)],
);

const SOURCES: &[SourceSpec] = &[
    (
        "fast",
        &[
            ("id", DataType::Int64),
            ("k", DataType::Int32),
            ("v", DataType::Int32),
        ],
        &[
            ("rows_per_second", "3000"),
            ("seed", "11"),
            ("fields.id.kind", "sequence"),
            ("fields.k.min", "0"),
            ("fields.k.max", "11"),
            ("fields.v.min", "-1000"),
            ("fields.v.max", "1000"),
        ],
    ),
    (
        "slow",
        &[("id", DataType::Int64), ("k", DataType::Int32)],
        &[
            ("rows_per_second", "40"),
            ("fields.id.kind", "sequence"),
            ("fields.k.min", "0"),
            ("fields.k.max", "11"),
        ],
    ),
    (
        "timed",
        &[
            ("id", DataType::Int64),
            ("ts", DataType::Timestamp(TimeUnit::Microsecond, None)),
        ],
        &[
            ("rows_per_second", "2000"),
            ("fields.id.kind", "sequence"),
            ("fields.id.start", "0"),
            ("start_time", "1700000000000000"),
        ],
    ),
];

/// The watermark of source `timed`.
const TIMED_WATERMARK: &str = "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND";

/// The windows of `timed`, as `closed` groups them (`date_bin`, which the
/// check's DataFusion also runs).
const WINDOWS: &str =
    "SELECT date_bin(INTERVAL '1 second', ts, TIMESTAMP '1970-01-01 00:00:00') AS w, \
     count(*) AS n, sum(id) AS s FROM timed GROUP BY 1";

/// 2-second windows every second of `timed`, as the check's DataFusion
/// computes them: each row counted in the window of its second and in the
/// one starting a second earlier.
const HOP_WINDOWS: &str = "SELECT w, count(*) AS n, sum(id) AS s FROM (\
     SELECT date_bin(INTERVAL '1 second', ts, TIMESTAMP '1970-01-01 00:00:00') AS w, id FROM timed \
     UNION ALL \
     SELECT date_bin(INTERVAL '1 second', ts, TIMESTAMP '1970-01-01 00:00:00') - INTERVAL '1 second' AS w, id \
     FROM timed) AS rows GROUP BY w";

/// A view emitted on window close over `timed`: its name, its query, the
/// query the check runs instead (DataFusion has no `TUMBLE` or `HOP`),
/// and its windows' length in seconds.
type ClosedView = (&'static str, &'static str, &'static str, i64);

/// The views emitted on window close, grouped by `date_bin`, by `TUMBLE`
/// and by `HOP`.
const CLOSED_VIEWS: &[ClosedView] = &[
    ("closed", WINDOWS, WINDOWS, 1),
    (
        "tumbled",
        "SELECT window_start AS w, count(*) AS n, sum(id) AS s \
         FROM TUMBLE(timed, ts, INTERVAL '1' SECOND) GROUP BY window_start",
        WINDOWS,
        1,
    ),
    (
        "hopped",
        "SELECT window_start AS w, count(*) AS n, sum(id) AS s \
         FROM HOP(timed, ts, INTERVAL '1' SECOND, INTERVAL '2' SECOND) GROUP BY window_start",
        HOP_WINDOWS,
        2,
    ),
];

/// A temporal join of `fast` with `dims`, which writers change while the
/// rows stream: the label a row gets depends on when it came, but a left
/// join on the table's primary key gives each row exactly one row, so the
/// view must count every row the view read once ([`LOOKED_UP_CHECK`]).
const LOOKED_UP: &str = "looked_up";
const LOOKED_UP_CHECK: &str = "SELECT count(*) AS n, sum(id) AS s FROM fast";

/// The views, their queries, and for views on views the query the check
/// runs instead (over the upstream view, read at the same epoch).
const VIEWS: &[(&str, &str)] = &[
    ("by_key", "SELECT k, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM fast GROUP BY k"),
    ("skew_join", "SELECT f.k, count(*) AS pairs, sum(s.id) AS slow_ids FROM fast f JOIN slow s ON f.k = s.k WHERE f.v > 900 GROUP BY f.k"),
    ("labelled", "SELECT d.label, count(*) AS n, sum(f.v) AS s FROM fast f JOIN dims d ON f.k = d.k GROUP BY d.label"),
    ("top", "SELECT id, v FROM fast ORDER BY v DESC, id LIMIT 5"),
    ("top_per_key", "SELECT k, id, v, rn FROM (SELECT k, id, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, id) AS rn FROM fast) t WHERE rn <= 3"),
    ("distinct_per_key", "SELECT k, count(DISTINCT v) AS dv, count(DISTINCT v) FILTER (WHERE v % 2 = 0) AS even FROM fast GROUP BY k"),
    ("slow_total", "SELECT count(*) AS n, sum(id) AS s FROM slow"),
    ("on_view", "SELECT count(*) AS keys, sum(n) AS total FROM by_key"),
    (LOOKED_UP, "SELECT count(*) AS n, sum(f.id) AS s FROM fast f LEFT JOIN dims FOR SYSTEM_TIME AS OF PROCTIME() AS d ON f.k = d.k"),
    ("running", WINDOWS),
    ("sessions", SESSIONS),
];

/// Session windows over `timed` (rows 0.5 ms apart): of every ten rows
/// the first four, by the parity of their ids, so that each parity's
/// sessions (3 ms gap) hold two rows and close as the watermark passes.
/// Spelled with the window functions `SESSION(...)` stands for, which the
/// check's DataFusion runs too.
const SESSIONS: &str = "SELECT k, count(*) AS n, sum(id) AS s FROM (\
     SELECT id, id % 2 AS k, \
     session_start(ts, INTERVAL '3 milliseconds') OVER (PARTITION BY id % 2 ORDER BY ts) AS ws, \
     session_end(ts, INTERVAL '3 milliseconds') OVER (PARTITION BY id % 2 ORDER BY ts) AS we \
     FROM timed WHERE id % 10 < 4) AS rows GROUP BY k, ws, we";

fn create_source_sql(name: &str, columns: &[(&str, DataType)], options: &[(&str, &str)]) -> String {
    let columns: Vec<String> = columns
        .iter()
        .map(|(c, t)| {
            let sql_type = match t {
                DataType::Int64 => "bigint",
                DataType::Timestamp(..) => "timestamp",
                _ => "int",
            };
            format!("{c} {sql_type}")
        })
        .chain((name == "timed").then(|| TIMED_WATERMARK.to_owned()))
        .collect();
    let options: Vec<String> = options
        .iter()
        .map(|(k, v)| format!("{k} = '{v}'"))
        .collect();
    format!(
        "CREATE SOURCE {name} ({}) WITH (connector = 'datagen', {})",
        columns.join(", "),
        options.join(", ")
    )
}

/// Source `name`'s generator, as the server's.
fn source_spec(name: &str) -> DatagenSpec {
    let (_, columns, options) = SOURCES.iter().find(|s| s.0 == name).unwrap();
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(c, t)| Field::new(*c, t.clone(), false))
            .collect::<Vec<_>>(),
    ));
    let options: BTreeMap<String, String> = options
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    DatagenSpec::new(schema, &options, 0).unwrap()
}

/// The rows of a source up to each split's position, as the server
/// generates them.
fn source_rows(name: &str, positions: &[u64]) -> RecordBatch {
    let spec = source_spec(name);
    let schema = spec.schema().clone();
    let batches: Vec<RecordBatch> = positions
        .iter()
        .enumerate()
        .flat_map(|(split, &position)| split_rows(split as u32, position))
        .map(|rows| spec.generate(rows.start, (rows.end - rows.start) as usize))
        .collect();
    concat_batches(&schema, &batches).unwrap()
}

/// Each (view, source)'s split positions at the epoch `client` reads.
async fn split_positions(client: &tokio_postgres::Client) -> HashMap<(String, String), Vec<u64>> {
    let mut positions: HashMap<(String, String), Vec<u64>> = HashMap::new();
    let rows = sorted_rows(
        client,
        "SELECT view, source, split, position FROM weir_source_splits",
    )
    .await;
    for row in rows {
        let text = |i: usize| row[i].clone().unwrap();
        let splits = positions.entry((text(0), text(1))).or_default();
        let split: usize = text(2).parse().unwrap();
        splits.resize(splits.len().max(split + 1), 0);
        splits[split] = text(3).parse().unwrap();
    }
    positions
}

/// A query's rows as text, sorted, run by DataFusion over `tables`.
async fn expected(query: &str, tables: Vec<(&str, RecordBatch)>) -> Vec<Vec<Option<String>>> {
    let ctx = SessionContext::new();
    ctx.register_udwf(weir_stream::session::session_start());
    ctx.register_udwf(weir_stream::session::session_end());
    for (name, batch) in tables {
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]]).unwrap();
        ctx.register_table(name, Arc::new(table)).unwrap();
    }
    let batches = ctx.sql(query).await.unwrap().collect().await.unwrap();
    let mut rows = Vec::new();
    for batch in batches {
        // Timestamps as the server writes them.
        let options = FormatOptions::default().with_timestamp_format(Some("%Y-%m-%d %H:%M:%S"));
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .zip(&formatters)
                    .map(|(c, f)| (!c.is_null(row)).then(|| f.value(row).to_string()))
                    .collect(),
            );
        }
    }
    rows.sort();
    rows
}

/// Reads every view, the split positions and the table at one epoch and
/// checks each view against its query over exactly those inputs. Returns
/// the positions.
async fn check_views(
    client: &tokio_postgres::Client,
    context: &str,
) -> HashMap<(String, String), Vec<u64>> {
    client.batch_execute("BEGIN").await.unwrap();
    let positions = split_positions(client).await;
    let totals: HashMap<(String, String), u64> = sorted_rows(
        client,
        "SELECT view, source, position FROM weir_source_readers",
    )
    .await
    .into_iter()
    .map(|r| {
        let text = |i: usize| r[i].clone().unwrap();
        ((text(0), text(1)), text(2).parse().unwrap())
    })
    .collect();
    for (reader, splits) in &positions {
        assert_eq!(
            totals.get(reader),
            Some(&splits.iter().sum()),
            "{context}: a reader's position is the sum of its splits'"
        );
    }
    let dims = sorted_rows(client, "SELECT k, label FROM dims").await;
    let mut contents = HashMap::new();
    for (name, _) in VIEWS {
        contents.insert(
            *name,
            sorted_rows(client, &format!("SELECT * FROM {name}")).await,
        );
    }
    let on_view_query = sorted_rows(
        client,
        "SELECT count(*) AS keys, sum(n) AS total FROM by_key",
    )
    .await;
    let mut closed = Vec::new();
    for view in CLOSED_VIEWS {
        closed.push((
            view,
            sorted_rows(client, &format!("SELECT * FROM {}", view.0)).await,
        ));
    }
    client.batch_execute("COMMIT").await.unwrap();
    for ((name, _, windows, span), rows) in closed {
        check_closed_windows(&rows, windows, *span, &format!("{context}: view {name}")).await;
    }

    let dims = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("label", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(Int32Array::from_iter_values(
                dims.iter()
                    .map(|r| r[0].as_ref().unwrap().parse::<i32>().unwrap()),
            )),
            Arc::new(StringArray::from_iter_values(
                dims.iter().map(|r| r[1].clone().unwrap()),
            )),
        ],
    )
    .unwrap();
    for (name, query) in VIEWS {
        let want = if *name == "on_view" {
            on_view_query.clone()
        } else {
            let mut tables = vec![("dims", dims.clone())];
            for (source, ..) in SOURCES {
                if let Some(splits) = positions.get(&(name.to_string(), source.to_string())) {
                    tables.push((source, source_rows(source, splits)));
                }
            }
            let query = if *name == LOOKED_UP {
                LOOKED_UP_CHECK
            } else {
                query
            };
            expected(query, tables).await
        };
        let got = &contents[name];
        if *got != want {
            let only_in = |a: &[Vec<Option<String>>], b: &[Vec<Option<String>>]| {
                a.iter()
                    .filter(|row| !b.contains(row))
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            panic!(
                "{context}: view {name} differs from its query over its inputs \
                 ({} rows against {}; rows read {totals:?}; positions {:?})\n\
                 only in the view: {:?}\nonly in the query: {:?}",
                got.len(),
                want.len(),
                positions
                    .iter()
                    .filter(|((view, _), _)| view == name)
                    .collect::<Vec<_>>(),
                only_in(got, &want),
                only_in(&want, got),
            );
        }
    }
    positions
}

/// `closed` (windows of `timed` emitted on close, sorted) against
/// `windows` (a query naming each window's start `w`) over every row of
/// the source up to the last window's end (`span` seconds after its
/// start): each window once and exact, none missing below the last.
async fn check_closed_windows(
    closed: &[Vec<Option<String>>],
    windows: &str,
    span: i64,
    context: &str,
) {
    let Some(last) = closed.last() else {
        return;
    };
    let spec = source_spec("timed");
    // Rows run at 2000 a second from 1700000000 s: those up to the end of
    // the last window, and a second more.
    let last_start =
        chrono::NaiveDateTime::parse_from_str(last[0].as_deref().unwrap(), "%Y-%m-%d %H:%M:%S")
            .unwrap_or_else(|e| panic!("{context}: window start {last:?}: {e}"));
    let seconds = (last_start.and_utc().timestamp() - 1_700_000_000 + span + 1) as usize;
    let rows = spec.generate(0, seconds * 2000);
    let query = format!(
        "SELECT * FROM ({windows}) AS windows WHERE w <= TIMESTAMP '{}'",
        last_start.format("%Y-%m-%d %H:%M:%S")
    );
    let want = expected(&query, vec![("timed", rows)]).await;
    assert_eq!(
        closed,
        &want[..],
        "{context}: the windows emitted on close differ from the source's windows"
    );
}

/// Upserts and deletes on `dims` until the connection fails; records the
/// last acknowledged value of each key and the statement in flight.
async fn write_dims(conn: String, state: Arc<Mutex<DimsState>>, seed: u64) {
    let Ok((client, connection)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await
    else {
        return;
    };
    tokio::spawn(connection);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    loop {
        let k = rng.random_range(0..KEYS);
        let label = if rng.random_bool(0.2) {
            None
        } else {
            Some(format!("l{}", rng.random_range(0..4)))
        };
        let sql = match &label {
            Some(l) => format!(
                "INSERT INTO dims VALUES ({k}, '{l}') ON CONFLICT (k) DO UPDATE SET label = excluded.label"
            ),
            None => format!("DELETE FROM dims WHERE k = {k}"),
        };
        state.lock().unwrap().in_flight = Some((k, label.clone()));
        if client.simple_query(&sql).await.is_err() {
            return;
        }
        {
            let mut state = state.lock().unwrap();
            state.acked.insert(k, label);
            state.in_flight = None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[derive(Default)]
struct DimsState {
    acked: HashMap<i32, Option<String>>,
    in_flight: Option<(i32, Option<String>)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagen_views_are_exact_through_sigkill_cycles() {
    kill_cycles(TestServer::start().await).await;
}

/// The cycles described at the top, against `server`.
pub async fn kill_cycles(mut server: TestServer) {
    let seed: u64 = std::env::var("WEIR_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE dims (k INT PRIMARY KEY, label TEXT NOT NULL)")
        .await
        .unwrap();
    for (name, columns, options) in SOURCES {
        client
            .batch_execute(&create_source_sql(name, columns, options))
            .await
            .unwrap();
    }
    crate::common::create_views(&client, VIEWS).await;
    for (name, query, ..) in CLOSED_VIEWS {
        client
            .batch_execute(&format!(
                "CREATE MATERIALIZED VIEW {name} AS {query} EMIT ON WINDOW CLOSE"
            ))
            .await
            .unwrap();
    }
    drop(client);
    let state = Arc::new(Mutex::new(DimsState::default()));
    let mut last_positions: HashMap<(String, String), Vec<u64>> = HashMap::new();
    for cycle in 0..CYCLES {
        // Each restart may deal the sources' splits to a different number
        // of readers.
        let workers = 1 + cycle % 3;
        server.set_arg("--workers", &workers.to_string());
        let writer = tokio::spawn(write_dims(
            server.conn_string(),
            state.clone(),
            seed * 1000 + cycle as u64,
        ));
        tokio::time::sleep(Duration::from_millis(rng.random_range(150..1200))).await;
        server.restart_after_kill().await;
        writer.await.unwrap();

        let client = server.client().await;
        let dims: HashMap<i32, String> = sorted_rows(&client, "SELECT k, label FROM dims")
            .await
            .into_iter()
            .map(|r| {
                (
                    r[0].as_ref().unwrap().parse().unwrap(),
                    r[1].clone().unwrap(),
                )
            })
            .collect();
        {
            let mut state = state.lock().unwrap();
            let in_flight = state.in_flight.take();
            for k in 0..KEYS {
                let now = dims.get(&k).cloned();
                let acked = state.acked.get(&k).cloned().flatten();
                let possible = in_flight
                    .as_ref()
                    .is_some_and(|(fk, fl)| *fk == k && *fl == now);
                assert!(
                    now == acked || possible,
                    "cycle {cycle}: dims key {k} is {now:?}, acknowledged {acked:?} (seed {seed})"
                );
                // What recovery kept is what later checks build on.
                state.acked.insert(k, now);
            }
        }
        let positions = check_views(&client, &format!("after restart {cycle} (seed {seed})")).await;
        // Views over sources and tables run as one instance per worker;
        // a view over a view runs in the coordinator.
        for (view, instances) in [
            ("by_key", workers),
            ("skew_join", workers),
            ("labelled", workers),
            (LOOKED_UP, workers),
            ("on_view", 1),
        ] {
            let sql = format!(
                "SELECT max(instances) FROM weir_view_operators WHERE view = '{view}' AND name <> 'Output'"
            );
            let mut seen = Vec::new();
            for _ in 0..100 {
                client.batch_execute("CHECKPOINT").await.unwrap();
                seen = crate::common::column(&client, &sql).await;
                if seen == vec![Some(instances.to_string())] {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(
                seen,
                vec![Some(instances.to_string())],
                "cycle {cycle}: {view} with {workers} workers"
            );
        }
        for (reader, splits) in &positions {
            let before = last_positions.get(reader).cloned().unwrap_or_default();
            for (split, (&now, &then)) in splits.iter().zip(&before).enumerate() {
                assert!(
                    now >= then,
                    "cycle {cycle}: split {split} of {reader:?} went back from {then} to {now}"
                );
            }
        }
        last_positions = positions;
    }
    // The views kept up with the sources: readers moved on across cycles.
    let read = |view: &str, source: &str| -> u64 {
        last_positions[&(view.to_string(), source.to_string())]
            .iter()
            .sum()
    };
    let (fast, slow) = (read("by_key", "fast"), read("slow_total", "slow"));
    assert!(
        fast > 1000 && slow > 10,
        "readers barely moved: fast {fast}, slow {slow}"
    );
    // Windows closed as the watermark moved, and no row was late.
    let client = server.client().await;
    for (name, ..) in CLOSED_VIEWS {
        let windows = sorted_rows(&client, &format!("SELECT * FROM {name}")).await;
        assert!(
            windows.len() >= 3,
            "the watermark closed {} windows of {name}",
            windows.len()
        );
        let late = crate::common::column(
            &client,
            &format!("SELECT sum(late_rows) FROM weir_view_operators WHERE view = '{name}'"),
        )
        .await;
        assert_eq!(
            late,
            vec![Some("0".to_string())],
            "no row of `timed` is late in {name}"
        );
    }
    // The sessions operator holds only the sessions the watermark (1 s
    // behind, and moved at each epoch) has not closed: some 2 seconds'
    // rows of the parities' 800 a second (more on a loaded machine, whose
    // epochs are longer), not all it read.
    let held = crate::common::column(
        &client,
        "SELECT sum(state_rows) FROM weir_view_operators \
         WHERE view = 'sessions' AND name LIKE 'Window: sessions%'",
    )
    .await;
    let held: u64 = held[0]
        .as_ref()
        .expect("a sessions operator")
        .parse()
        .unwrap();
    let read = read("sessions", "timed") * 4 / 10;
    assert!(
        read > 5000 && held * 5 < read,
        "the sessions operator holds {held} of the {read} rows it read"
    );
    server.kill();
}

/// A reader position written before sources had splits (rows read in the
/// source's order, as the previous Weir wrote it) resumes at the same row,
/// whatever the number of readers now: nothing read twice, nothing skipped.
#[tokio::test]
async fn a_position_from_before_splits_resumes_at_the_same_row() {
    const TOTAL: u64 = 60_000;
    let mut server = TestServer::start_with(&["--workers", "1"]).await;
    let client = server.client().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE ids (id bigint) WITH (connector = 'datagen', rows_per_second = '40000', \
             total_rows = '{TOTAL}', fields.id.kind = 'sequence');
             CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS n, sum(id) AS s FROM ids"
        ))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    client.batch_execute("CHECKPOINT").await.unwrap();
    drop(client);
    assert!(server.terminate().success());

    // One reader read the source in its order, so the rows read are the
    // first `offset`: write the position as the previous Weir did.
    let mut manifests: Vec<_> = std::fs::read_dir(server.data_dir.join("manifest"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    manifests.sort();
    let newest = manifests.pop().expect("a manifest");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&newest).unwrap()).unwrap();
    let sources = manifest["sources"].as_object_mut().unwrap();
    assert_eq!(sources.len(), 1);
    let splits = sources.values_mut().next().unwrap();
    let offset: u64 = splits
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .sum();
    assert!(offset > 0 && offset < TOTAL, "stopped midway: {offset}");
    *splits = serde_json::json!(offset);
    std::fs::write(&newest, serde_json::to_vec(&manifest).unwrap()).unwrap();

    server.set_arg("--workers", "3");
    server.restart_after_kill().await;
    let client = server.client().await;
    let position = crate::common::column(&client, "SELECT position FROM weir_source_readers").await;
    assert!(
        position[0].as_ref().unwrap().parse::<u64>().unwrap() >= offset,
        "resumed at {position:?}, before {offset}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while crate::common::column(&client, "SELECT position FROM weir_source_readers").await
        != vec![Some(TOTAL.to_string())]
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the source never ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        sorted_rows(&client, "SELECT n, s FROM totals").await,
        vec![vec![
            Some(TOTAL.to_string()),
            Some((TOTAL * (TOTAL + 1) / 2).to_string())
        ]]
    );
    server.kill();
}

#[tokio::test]
async fn source_statements_and_their_errors() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE SOURCE s (id bigint, v int) WITH (connector = 'datagen', total_rows = 50, rows_per_second = 100000, fields.id.kind = 'sequence');
             CREATE SOURCE IF NOT EXISTS s (x int) WITH (connector = 'datagen');",
        )
        .await
        .unwrap();
    let show = client.simple_query("SHOW SOURCES").await.unwrap();
    let names: Vec<String> = show
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some(format!("{} {}", r.get(0).unwrap(), r.get(1).unwrap()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(names, vec!["s datagen"]);
    for (sql, code) in [
        ("SELECT * FROM s", "0A000"),
        ("INSERT INTO s VALUES (1, 2)", "42809"),
        ("CREATE SOURCE s2 (x int) WITH (connector = 'pulsar')", "0A000"),
        ("CREATE SOURCE s2 (x int)", "22023"),
        ("CREATE SOURCE s2 (x int) WITH (connector = 'datagen', fields.y.kind = 'sequence')", "22023"),
        ("CREATE SOURCE s2 (x int) WITH (connector = 'datagen', fields.x.min = 5, fields.x.max = 1)", "22023"),
        ("CREATE SOURCE s2 (x int[]) WITH (connector = 'datagen')", "22023"),
        ("CREATE SOURCE s2 (x int) WITH (connector = 'datagen', rows_per_second = 0)", "22023"),
        ("CREATE SOURCE s (x int) WITH (connector = 'datagen')", "42P07"),
        ("CREATE SOURCE s2 (x int) WITH (connector 'datagen')", "42601"),
        ("DROP TABLE s", "42809"),
        ("DROP SOURCE nope", "42P01"),
    ] {
        assert_eq!(sqlstate(&client, sql).await, code, "{sql}");
    }
    // A bounded source: the view ends with exactly its rows.
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(id) AS s FROM s",
        )
        .await
        .unwrap();
    let mut rows = Vec::new();
    for _ in 0..100 {
        client.batch_execute("CHECKPOINT").await.unwrap();
        rows = sorted_rows(&client, "SELECT n, s FROM total").await;
        if rows == vec![vec![Some("50".into()), Some("1275".into())]] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rows, vec![vec![Some("50".into()), Some("1275".into())]]);
    assert_eq!(sqlstate(&client, "DROP SOURCE s").await, "2BP01");
    client.batch_execute("DROP SOURCE s CASCADE").await.unwrap();
    assert_eq!(sqlstate(&client, "SELECT * FROM total").await, "42P01");
    assert_eq!(sqlstate(&client, "SELECT * FROM s").await, "42P01");
}

/// A reader that reads nothing holds a view's watermark back only until
/// `--watermark-idle-timeout`: 1,000 rows all fall in the first block of
/// the source's first split, so of two workers' readers one reads them
/// all (over 5 s) and the other none. With a 1 s timeout the empty reader
/// is idle while the other still reads, and the windows close; with an
/// hour's, it holds every window open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_reader_holds_the_watermark_back_only_until_its_timeout() {
    for (timeout, closes) in [("1s", true), ("1h", false)] {
        let server =
            TestServer::start_with(&["--workers", "2", "--watermark-idle-timeout", timeout]).await;
        let client = server.client().await;
        client
            .batch_execute(
                "CREATE SOURCE timed (id bigint, ts timestamp, WATERMARK FOR ts AS ts) \
                 WITH (connector = 'datagen', rows_per_second = '200', total_rows = '1000', \
                 fields.id.kind = 'sequence', start_time = '1700000000000000'); \
                 CREATE MATERIALIZED VIEW every_row AS SELECT count(*) AS n FROM timed; \
                 CREATE MATERIALIZED VIEW closed AS \
                 SELECT date_bin(INTERVAL '1 second', ts, TIMESTAMP '1970-01-01 00:00:00') AS w, \
                 count(*) AS n FROM timed GROUP BY 1 EMIT ON WINDOW CLOSE",
            )
            .await
            .unwrap();
        let count = |sql: &'static str| {
            let client = &client;
            async move {
                crate::common::column(client, sql).await[0]
                    .as_deref()
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap()
            }
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while count("SELECT n FROM every_row").await < 1000 {
            assert!(
                std::time::Instant::now() < deadline,
                "{timeout}: the rows did not arrive"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The event times span 4.995 s: once the watermark reaches the
        // last, 4 of the 5 windows of a second (200 rows each) are closed.
        let windows = if closes {
            while count("SELECT count(*) FROM closed").await < 4 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{timeout}: windows stayed open"
                );
                client.batch_execute("CHECKPOINT").await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            count("SELECT sum(n) FROM closed").await
        } else {
            // Well past the rows, and past the 1 s timeout above.
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(700)).await;
                client.batch_execute("CHECKPOINT").await.unwrap();
            }
            count("SELECT count(*) FROM closed").await
        };
        let expected = if closes { 800 } else { 0 };
        assert_eq!(windows, expected, "--watermark-idle-timeout {timeout}");
    }
}
