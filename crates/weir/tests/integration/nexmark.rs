//! The Nexmark queries (`sql-tests/nexmark/*.sql`) as materialized views
//! over the `nexmark` connector, each checked against the same query run as
//! a batch query over the same events.
//!
//! One server runs every query as a view over a bounded event stream; a
//! second holds the same events, generated in this process by the
//! connector's own generator and loaded with COPY, as tables of the same
//! names, and runs each query as a plain SELECT (DataFusion's batch
//! execution). Once every view's readers stand at the stream's end, each
//! view must hold exactly what its query returns over the tables.
//!
//! The sources have the Flink kit's watermark (4 seconds behind the
//! latest event), so windowed aggregates and window joins free the
//! windows it passes while their output stays; a windowed view that
//! emits on window close must hold each window it emitted exactly, and
//! none missing below the last (the reference is the batch query over the
//! windows up to the last one emitted: the ones the watermark passed).
//! q12's processing-time windows depend on when the server read each
//! event, so it is checked by invariants instead: its windows hold every
//! bid once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use datafusion::arrow::csv::WriterBuilder;
use datafusion::arrow::record_batch::RecordBatch;
use futures::SinkExt;
use weir_connectors::nexmark::{table_schema, NexmarkSpec};
use weir_connectors::paced::RowGenerator;

use crate::common::{column, sorted_rows, TestServer};

/// Events in the stream (of all three kinds).
const EVENTS: u64 = 30_000;

/// The options of all three sources but their kind: 500 events per second
/// of event time, so that the stream spans a minute (six 10-second
/// windows).
const OPTIONS: &[(&str, &str)] = &[
    ("nexmark.event.num", "30000"),
    ("nexmark.event.rate", "500"),
    ("nexmark.emit.rate", "100000000"),
    ("nexmark.base.time", "1700000000000"),
    ("nexmark.seed", "3"),
];

const TABLES: [(&str, &str); 3] = [
    (
        "person",
        "id BIGINT, name TEXT, email_address TEXT, credit_card TEXT, city TEXT, state TEXT, date_time TIMESTAMP, extra TEXT",
    ),
    (
        "auction",
        "id BIGINT, item_name TEXT, description TEXT, initial_bid BIGINT, reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra TEXT",
    ),
    (
        "bid",
        "auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT, date_time TIMESTAMP, extra TEXT",
    ),
];

/// Each auction's bids and top price per 10-second window, as a view that
/// emits on window close.
const CLOSED_WINDOWS: &str = "SELECT auction, window_start, count(*) AS bids, max(price) AS top \
     FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY auction, window_start";

/// The query over processing time, whose windows depend on when rows
/// were read: checked by invariants ([`check_processing_time_windows`]).
const PROCESSING_TIME: &str = "q12";

/// q12's windows hold every bid once: their counts sum to the bids, each
/// 10 seconds long, a bidder's windows distinct and each bidder's counts
/// summing to the bidder's bids.
async fn check_processing_time_windows(
    client: &tokio_postgres::Client,
    reference: &tokio_postgres::Client,
) {
    let per_bidder = "SELECT bidder, sum(bid_count) FROM q12 GROUP BY bidder";
    let view = sorted_rows(client, per_bidder).await;
    let want = sorted_rows(
        reference,
        "SELECT bidder, count(*) FROM bid GROUP BY bidder",
    )
    .await;
    assert!(!want.is_empty(), "q12 has bids");
    assert!(view == want, "q12: each bidder's windows hold its bids");
    let odd = column(
        client,
        "SELECT count(*) FROM q12 WHERE endtime <> starttime + INTERVAL '10' SECOND \
         OR bid_count < 1",
    )
    .await;
    assert_eq!(odd, [Some("0".to_string())], "q12: 10-second windows");
    let repeated = column(
        client,
        "SELECT count(*) FROM (SELECT bidder, starttime FROM q12 GROUP BY 1, 2 \
         HAVING count(*) > 1) AS r",
    )
    .await;
    assert_eq!(repeated, [Some("0".to_string())], "q12: one row per window");
}

/// q13's side input table.
const SIDE_INPUT: &str = include_str!("../../../../sql-tests/nexmark/side_input.sql");

/// Every query under `sql-tests/nexmark` (`qN.sql`), by name, in numeric
/// order.
fn queries() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sql-tests/nexmark");
    let mut queries: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("sql-tests/nexmark")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .filter(|path| {
            let stem = path.file_stem().unwrap().to_string_lossy();
            stem.strip_prefix('q')
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).expect("a query"))
        })
        .collect();
    queries.sort_by_key(|(name, _)| name[1..].parse::<u32>().expect("qN"));
    queries
}

fn options(table: &str) -> BTreeMap<String, String> {
    OPTIONS
        .iter()
        .chain(&[("nexmark.table.type", table)])
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The events of `table`'s kind, as the server's sources generate them.
fn events(table: &str) -> RecordBatch {
    let options = options(table);
    let spec = NexmarkSpec::new(table_schema(&options).unwrap(), &options, 0).unwrap();
    spec.generate(0..EVENTS, None)
}

/// `batch` as CSV for `COPY ... FROM STDIN (FORMAT csv)`.
fn csv(batch: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = WriterBuilder::new()
        .with_header(false)
        .with_timestamp_format("%Y-%m-%d %H:%M:%S%.6f".into())
        .build(&mut out);
    writer.write(batch).unwrap();
    drop(writer);
    out
}

#[tokio::test]
async fn nexmark_views_equal_their_queries_over_the_same_events() {
    let queries = queries();
    assert!(queries.len() >= 13, "{} queries", queries.len());

    let mut streaming = TestServer::start().await;
    let client = streaming.client().await;
    for (table, _) in TABLES {
        let with: Vec<String> = options(table)
            .iter()
            .map(|(k, v)| format!("{k} = '{v}'"))
            .collect();
        // The Flink kit's watermark; a source without a column list takes
        // the connector's columns, and the clause alone in parentheses.
        client
            .batch_execute(&format!(
                "CREATE SOURCE {table} (WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
                 WITH (connector = 'nexmark', {})",
                with.join(", ")
            ))
            .await
            .unwrap();
    }
    client.batch_execute(SIDE_INPUT).await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE MATERIALIZED VIEW closed_windows AS {CLOSED_WINDOWS} EMIT ON WINDOW CLOSE"
        ))
        .await
        .unwrap();
    for (name, query) in &queries {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("view {name}: {e}"));
    }

    let mut batch = TestServer::start().await;
    let reference = batch.client().await;
    let mut loaded = 0;
    for (table, columns) in TABLES {
        reference
            .batch_execute(&format!("CREATE TABLE {table} ({columns})"))
            .await
            .unwrap();
        let events = events(table);
        loaded += events.num_rows();
        let sink = reference
            .copy_in(&format!("COPY {table} FROM STDIN (FORMAT csv)"))
            .await
            .unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from(csv(&events))).await.unwrap();
        sink.finish().await.unwrap();
    }
    assert_eq!(loaded as u64, EVENTS, "the three kinds make up the stream");
    reference.batch_execute(SIDE_INPUT).await.unwrap();

    // Every view's readers reach the end of the stream.
    let readers = "SELECT count(*) FROM weir_source_readers WHERE position < 30000";
    let started = Instant::now();
    while column(&client, readers).await != [Some("0".to_string())] {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "readers still behind: {:?}",
            sorted_rows(&client, "SELECT * FROM weir_source_readers").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let read = column(&client, "SELECT count(*) FROM weir_source_readers").await;
    let read: usize = read[0].as_ref().unwrap().parse().unwrap();
    assert!(
        read >= queries.len(),
        "every view reads a source: {read} readers"
    );

    for (name, query) in &queries {
        if name == PROCESSING_TIME {
            check_processing_time_windows(&client, &reference).await;
            continue;
        }
        let view = sorted_rows(&client, &format!("SELECT * FROM {name}")).await;
        let want = sorted_rows(&reference, query).await;
        assert!(!want.is_empty(), "{name} has rows over {EVENTS} events");
        assert_eq!(view.len(), want.len(), "{name}: rows");
        assert!(
            view == want,
            "{name}: the view differs from its query over the events"
        );
    }
    // The watermark the last rows moved closes windows one epoch later.
    client
        .batch_execute("CHECKPOINT; CHECKPOINT")
        .await
        .unwrap();
    let closed = sorted_rows(&client, "SELECT * FROM closed_windows").await;
    let last = closed
        .iter()
        .filter_map(|row| row[1].clone())
        .max()
        .expect("windows closed");
    let want = sorted_rows(
        &reference,
        &format!("SELECT * FROM ({CLOSED_WINDOWS}) AS w WHERE window_start <= '{last}'"),
    )
    .await;
    let windows: std::collections::BTreeSet<_> = want.iter().map(|row| row[1].clone()).collect();
    assert!(windows.len() >= 4, "windows closed: {windows:?}");
    assert_eq!(closed.len(), want.len(), "closed windows: rows");
    assert!(
        closed == want,
        "the closed windows differ from the batch query"
    );
    let late = column(
        &client,
        "SELECT sum(late_rows) FROM weir_view_operators WHERE view = 'closed_windows'",
    )
    .await;
    assert_eq!(late, vec![Some("0".to_string())], "no bid is late");
    streaming.kill();
    batch.kill();
}
