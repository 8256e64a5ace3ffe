//! File sources (`connector = 'filesystem'`): CSV and Parquet files read
//! once each through SIGKILL cycles while new files keep arriving, JSON
//! lines with bad records, what `CREATE SOURCE` refuses, a file that
//! vanished before it was read, and objects on S3 reached with the
//! source's own settings and a secret.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use parquet::arrow::ArrowWriter;
use rand::{Rng, SeedableRng};

use crate::common::{create_views, outcome, sorted_rows, sqlstate, TestServer};
use crate::kafka::{row, wait_rows};
use crate::orders::{amount, total_rows};

/// Orders `ids` as CSV with a header.
fn csv(ids: std::ops::Range<u64>) -> String {
    let mut text = String::from("id,customer,amount\n");
    for id in ids {
        text.push_str(&format!("{id},c{},{}\n", id % 7, amount(id)));
    }
    text
}

/// Orders `ids` as a Parquet file's bytes (`amount` before `id`, as a
/// file's own column order may be).
fn parquet(ids: std::ops::Range<u64>) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("amount", DataType::Int64, false),
        Field::new("id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
    ]));
    let rows = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(
                ids.clone().map(|id| amount(id) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                ids.clone().map(|id| id as i64),
            )),
            Arc::new(StringArray::from_iter_values(
                ids.map(|id| format!("c{}", id % 7)),
            )),
        ],
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
    writer.write(&rows).unwrap();
    writer.close().unwrap();
    bytes
}

/// Writes `bytes` as `dir/name` whole: aside under a hidden name, then
/// renamed (a file source leaves hidden files out).
fn write_whole(dir: &Path, name: &str, bytes: &[u8]) {
    let aside = dir.join(format!(".{name}.tmp"));
    std::fs::write(&aside, bytes).unwrap();
    std::fs::rename(aside, dir.join(name)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sources_read_every_row_once_through_sigkill_cycles() {
    let files = tempfile::tempdir().unwrap();
    let (csv_dir, parquet_dir) = (files.path().join("csv"), files.path().join("parquet"));
    std::fs::create_dir_all(&csv_dir).unwrap();
    std::fs::create_dir_all(&parquet_dir).unwrap();
    let mut server = TestServer::start().await;
    let weir = server.client().await;
    weir.batch_execute(&format!(
        "CREATE SOURCE orders_csv (id bigint, customer text, amount bigint) WITH (
           connector = 'filesystem', path = '{}', format = 'csv', csv.header = 'true',
           source.monitor-interval = '100ms');
         CREATE SOURCE orders_parquet (id bigint, customer text, amount bigint) WITH (
           connector = 'filesystem', path = '{}', format = 'parquet', match_pattern = '*.parquet',
           source.monitor-interval = '100ms')",
        csv_dir.display(),
        parquet_dir.display()
    ))
    .await
    .unwrap();
    let totals = "SELECT customer, count(*) AS n, sum(amount) AS total FROM";
    let ids = "SELECT count(*) AS n, count(DISTINCT id) AS ids FROM";
    create_views(
        &weir,
        &[
            (
                "csv_totals",
                &format!("{totals} orders_csv GROUP BY customer"),
            ),
            ("csv_ids", &format!("{ids} orders_csv")),
            (
                "parquet_totals",
                &format!("{totals} orders_parquet GROUP BY customer"),
            ),
            ("parquet_ids", &format!("{ids} orders_parquet")),
        ],
    )
    .await;

    // A writer lands files of the same orders in both folders (some of
    // many batches, so that checkpoints fall inside files) while the
    // server is killed and restarted.
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writing = {
        let (written, stop) = (written.clone(), stop.clone());
        let (csv_dir, parquet_dir) = (csv_dir.clone(), parquet_dir.clone());
        tokio::task::spawn_blocking(move || {
            let mut next = 0u64;
            let mut file = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let rows = if file.is_multiple_of(5) {
                    30_000
                } else {
                    1 + file * 7919 % 3000
                };
                let ids = next..next + rows;
                write_whole(
                    &csv_dir,
                    &format!("orders-{file:05}.csv"),
                    csv(ids.clone()).as_bytes(),
                );
                write_whole(
                    &parquet_dir,
                    &format!("orders-{file:05}.parquet"),
                    &parquet(ids),
                );
                next += rows;
                file += 1;
                written.store(next, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(40));
            }
            file
        })
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1200))).await;
        server.restart_after_kill().await;
    }
    stop.store(true, Ordering::Relaxed);
    let files_written = writing.await.unwrap();
    let n = written.load(Ordering::Relaxed);
    assert!(
        files_written >= 20,
        "only {files_written} files were written"
    );

    // Every order once, in both formats.
    let weir = server.client().await;
    let all = row(&[&n.to_string(), &n.to_string()]);
    for view in ["csv_ids", "parquet_ids"] {
        wait_rows(
            &weir,
            &format!("SELECT n, ids FROM {view}"),
            std::slice::from_ref(&all),
            Duration::from_secs(120),
        )
        .await;
    }
    // The totals views read the files through their own readers: they may
    // still be catching up when the id views are done.
    let expected = total_rows(n, 7);
    for view in ["csv_totals", "parquet_totals"] {
        wait_rows(
            &weir,
            &format!("SELECT customer, n, total FROM {view}"),
            &expected,
            Duration::from_secs(120),
        )
        .await;
    }
    assert_eq!(
        sorted_rows(&weir, "SELECT source, files FROM weir_source_files").await,
        vec![
            row(&["orders_csv", &files_written.to_string()]),
            row(&["orders_parquet", &files_written.to_string()]),
        ]
    );
}

/// `CREATE SOURCE name` of `(id bigint, name text)` over `dir`, listed
/// every 100 ms, with `extra` options.
fn create_source(name: &str, dir: &Path, extra: &str) -> String {
    format!(
        "CREATE SOURCE {name} (id bigint, name text) WITH (connector = 'filesystem', \
         path = '{}', source.monitor-interval = '100ms'{extra})",
        dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sources_skip_or_fail_on_bad_records_and_refuse_what_they_cannot_read() {
    let files = tempfile::tempdir().unwrap();
    let dir = files.path();
    let server = TestServer::start().await;
    let weir = server.client().await;

    // What cannot be read is refused when the source is created.
    for extra in [
        "",
        ", format = 'avro'",
        ", format = 'csv', topic = 't'",
        ", format = 'json', csv.header = 'true'",
        ", format = 'csv', match_pattern = '['",
    ] {
        let sql = create_source("refused", dir, extra);
        assert_eq!(sqlstate(&weir, &sql).await, "22023", "{extra}");
    }
    let sql = create_source("refused", dir, ", format = 'csv'").replace("'100ms'", "'often'");
    assert_eq!(sqlstate(&weir, &sql).await, "22023");

    write_whole(
        dir,
        "a.json",
        b"{\"id\": 1, \"name\": \"one\"}\n\n{\"id\": oops}\n{\"id\": \"3\", \"name\": \"three\", \"more\": 1}\n",
    );
    weir.batch_execute(&format!(
        "{}; {}; {}; {};
         CREATE MATERIALIZED VIEW skipped AS SELECT id, name FROM skipping;
         CREATE MATERIALIZED VIEW kept AS SELECT id FROM keeping;
         CREATE MATERIALIZED VIEW failed AS SELECT id FROM failing;
         CREATE MATERIALIZED VIEW matched AS SELECT id FROM only_b",
        create_source("skipping", dir, ", format = 'json', bad_records = 'skip'"),
        create_source(
            "keeping",
            dir,
            ", format = 'json', bad_records = 'dead_letter'"
        ),
        create_source("failing", dir, ", format = 'json'"),
        create_source(
            "only_b",
            dir,
            ", format = 'json', match_pattern = 'b*.json'"
        ),
    ))
    .await
    .unwrap();
    // Blank lines are nothing; a record that does not parse is left out
    // and counted with its file and byte; unknown fields are ignored.
    wait_rows(
        &weir,
        "SELECT id, name FROM skipped",
        &[row(&["1", "one"]), row(&["3", "three"])],
        Duration::from_secs(30),
    )
    .await;
    let errors = sorted_rows(
        &weir,
        "SELECT source, bad_records, last_error FROM weir_source_errors WHERE source = 'skipping'",
    )
    .await;
    assert_eq!(errors[0][1].as_deref(), Some("1"), "{errors:?}");
    assert!(
        errors[0][2]
            .as_deref()
            .is_some_and(|e| e.contains("a.json\" byte 26")),
        "{errors:?}"
    );
    // With bad_records = 'dead_letter' it is also kept, as it was read;
    // the skipping source keeps none.
    wait_rows(
        &weir,
        "SELECT id FROM kept",
        &[row(&["1"]), row(&["3"])],
        Duration::from_secs(30),
    )
    .await;
    let letters = sorted_rows(
        &weir,
        "SELECT source, place LIKE 'file %a.json\" byte 26', value = '{\"id\": oops}'::bytea, \
         error <> '' FROM weir_dead_letters",
    )
    .await;
    assert_eq!(letters, [row(&["keeping", "t", "t", "t"])]);
    // With bad_records = 'fail' the view stops with the record's place.
    let failed = wait_failure(&weir, "SELECT * FROM failed").await;
    assert!(failed.contains("a.json\" byte 26"), "{failed}");
    // match_pattern: only b*.json.
    write_whole(dir, "b1.json", b"{\"id\": 10}\n");
    wait_rows(
        &weir,
        "SELECT id FROM matched",
        &[row(&["10"])],
        Duration::from_secs(30),
    )
    .await;

    // A file logged but gone before a view read it fails that view.
    weir.batch_execute(&create_source(
        "later",
        dir,
        ", format = 'json', match_pattern = 'c*.json'",
    ))
    .await
    .unwrap();
    write_whole(dir, "c1.json", b"{\"id\": 20}\n");
    wait_rows(
        &weir,
        "SELECT files FROM weir_source_files WHERE source = 'later'",
        &[row(&["1"])],
        Duration::from_secs(30),
    )
    .await;
    std::fs::remove_file(dir.join("c1.json")).unwrap();
    weir.batch_execute("CREATE MATERIALIZED VIEW late AS SELECT id FROM later")
        .await
        .unwrap();
    let failed = wait_failure(&weir, "SELECT * FROM late").await;
    assert!(failed.contains("was listed but is gone"), "{failed}");

    // DROP SOURCE ... CASCADE drops its views and its log.
    weir.batch_execute("DROP SOURCE skipping CASCADE")
        .await
        .unwrap();
    assert!(sorted_rows(
        &weir,
        "SELECT source FROM weir_source_files WHERE source = 'skipping'"
    )
    .await
    .is_empty());
    assert_eq!(sqlstate(&weir, "SELECT * FROM skipped").await, "42P01");
}

/// Waits until `query` fails; its SQLSTATE and message.
async fn wait_failure(weir: &tokio_postgres::Client, query: &str) -> String {
    for _ in 0..600 {
        if let Err(message) = outcome(weir, query).await {
            return message;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{query} never failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_source_on_s3_reads_new_objects_once_through_sigkill() {
    let (endpoint, _moto) = crate::s3::test_endpoint();
    let prefix = format!(
        "files-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let store = AmazonS3Builder::new()
        .with_bucket_name("weir")
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("weir")
        .with_secret_access_key("weir-secret")
        .build()
        .unwrap();
    // The server's environment names no S3 server: the source's options
    // do, its secret key from a secret.
    let mut server = TestServer::start().await;
    let weir = server.client().await;
    weir.batch_execute(&format!(
        "CREATE SECRET s3_key AS 'weir-secret';
         CREATE SOURCE orders (id bigint, customer text, amount bigint) WITH (
           connector = 'filesystem', path = 's3://weir/{prefix}/in', format = 'csv',
           csv.header = 'true', source.monitor-interval = '100ms',
           s3.endpoint_url = '{endpoint}', s3.region_name = 'us-east-1',
           s3.credentials.access = 'weir', s3.credentials.secret = SECRET s3_key);
         CREATE MATERIALIZED VIEW totals AS
           SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer"
    ))
    .await
    .unwrap();
    let mut next = 0;
    for round in 0..3 {
        for file in 0..4 {
            let rows = 5_000 + file * 1_000;
            let path = ObjectPath::from(format!("{prefix}/in/{round}/{file}.csv"));
            store
                .put(&path, csv(next..next + rows).into_bytes().into())
                .await
                .unwrap();
            next += rows;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.restart_after_kill().await;
    }
    let weir = server.client().await;
    wait_rows(
        &weir,
        "SELECT customer, n, total FROM totals",
        &total_rows(next, 7),
        Duration::from_secs(60),
    )
    .await;
}
