//! A file source read end to end over a local folder: every format,
//! files published while reading, and readers resumed at positions they
//! reported.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use futures::StreamExt;
use parquet::arrow::ArrowWriter;

use super::*;

/// A fresh source id per test: logs are process-wide.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1 << 40);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// The dead-letter box every test source gets.
fn letters() -> DeadLetterBox {
    static STORE: std::sync::OnceLock<Arc<dyn ObjectStore>> = std::sync::OnceLock::new();
    let store = STORE.get_or_init(|| Arc::new(object_store::memory::InMemory::new()));
    DeadLetterBox::new(
        store.clone(),
        object_store::path::Path::from("dead_letters"),
    )
}

fn source(dir: &std::path::Path, format: &str, extra: &[(&str, &str)]) -> (u64, FileSource) {
    let mut options: BTreeMap<String, String> = [
        ("path".to_owned(), dir.display().to_string()),
        ("format".to_owned(), format.to_owned()),
    ]
    .into_iter()
    .collect();
    options.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let id = next_id();
    let options = FileOptions::parse(&options).expect("options");
    let letters = letters().folder(id);
    (
        id,
        FileSource::new(id, options, schema(), Some(letters)).expect("source"),
    )
}

/// Lists the folder and publishes what the log lacks, as the server does.
async fn publish_new(id: u64, source: &FileSource) {
    let (store, root) = open_location(&source.options).expect("location");
    let log = file_log(id);
    let found = list(store.as_ref(), &root, &source.options)
        .await
        .expect("listed");
    let known: Vec<String> = (0..log.len())
        .filter_map(|i| log.get(i).map(|f| f.path))
        .collect();
    let new: Vec<LoggedFile> = found
        .into_iter()
        .filter(|f| !known.contains(&f.path))
        .collect();
    log.publish(log.len(), &new);
}

fn open(source: &FileSource, positions: Vec<u64>) -> Box<dyn SourceReader> {
    source
        .open(ReadFrom {
            positions,
            splits: (0..SPLITS).collect(),
            columns: None,
            max_batch_rows: 2,
            until: None,
        })
        .expect("opened")
}

/// Reads `batches` batches: the ids read and the positions after them.
async fn read(reader: &mut Box<dyn SourceReader>, batches: usize) -> (Vec<i64>, Vec<u64>) {
    let mut ids = Vec::new();
    for _ in 0..batches {
        let batch = reader.next().await.expect("a batch").expect("rows");
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("ids");
        ids.extend(column.iter().map(|v| v.expect("id")));
    }
    (ids, reader.positions())
}

#[tokio::test]
async fn csv_with_a_header_resumes_mid_file_and_reads_new_files() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(
        dir.path().join("a.csv"),
        "id,name\n1,\"one\ntwo\"\n2,b\n\n3,c\n4,d\n5,e",
    )
    .expect("written");
    std::fs::write(dir.path().join(".hidden.csv"), "99,x\n").expect("written");
    let (id, source) = source(dir.path(), "csv", &[("csv.header", "true")]);
    publish_new(id, &source).await;
    let mut reader = open(&source, vec![0; SPLITS as usize]);
    let (ids, positions) = read(&mut reader, 1).await;
    assert_eq!(ids, vec![1, 2]);
    drop(reader);
    // A reader opened where the first stood reads the rest, once.
    let mut resumed = open(&source, positions);
    let (ids, _) = read(&mut resumed, 2).await;
    assert_eq!(ids, vec![3, 4, 5]);
    std::fs::write(dir.path().join("b.csv"), "id,name\n6,f\n").expect("written");
    publish_new(id, &source).await;
    let (ids, positions) = read(&mut resumed, 1).await;
    assert_eq!(ids, vec![6]);
    // Split 1 is past its first file (b.csv, ordinal 1) and at its end, byte 12.
    assert_eq!(positions[1], position(0, 12));
    assert_eq!(positions[0], position(1, 0));
}

#[tokio::test]
async fn json_lines_skip_bad_records_when_asked() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(
        dir.path().join("a.json"),
        "{\"id\": 1, \"name\": \"a\"}\n{\"id\": oops}\n{\"id\": \"3\"}\n",
    )
    .expect("written");
    let (id, failing) = source(dir.path(), "json", &[]);
    publish_new(id, &failing).await;
    let mut reader = open(&failing, vec![0; SPLITS as usize]);
    let error = reader.next().await.expect("an item").expect_err("fails");
    assert!(error.to_string().contains("byte 23"), "{error}");
    let (id, skipping) = source(dir.path(), "json", &[("bad_records", "skip")]);
    publish_new(id, &skipping).await;
    let mut reader = open(&skipping, vec![0; SPLITS as usize]);
    // Two records to a batch: `1` and the bad one, then `3`.
    let (ids, _) = read(&mut reader, 2).await;
    assert_eq!(ids, vec![1, 3]);
    let count = crate::records::bad_record_counts()[&id]
        .count
        .load(Ordering::Relaxed);
    assert_eq!(count, 1);
    assert!(letters()
        .folder(id)
        .list()
        .await
        .expect("listed")
        .is_empty());
    // Kept as dead letters: stored, by place, before the rows after them;
    // a second file's bad record at the same byte is a letter of its own.
    std::fs::copy(dir.path().join("a.json"), dir.path().join("b.json")).expect("copied");
    let (id, keeping) = source(dir.path(), "json", &[("bad_records", "dead_letter")]);
    publish_new(id, &keeping).await;
    let mut reader = open(&keeping, vec![0; SPLITS as usize]);
    let (ids, positions) = read(&mut reader, 4).await;
    assert_eq!(ids, vec![1, 3, 1, 3]);
    let kept = letters().folder(id).list().await.expect("listed");
    assert_eq!(kept.len(), 2);
    for (letter, file) in kept.iter().zip(["a.json", "b.json"]) {
        assert_eq!(letter.value, b"{\"id\": oops}");
        let place = format!("{file}\" byte 23");
        assert!(letter.place.ends_with(&place), "{}", letter.place);
        // The positions after the read pass the record; those before, and
        // those that stop at its first byte, do not.
        assert!(letter.read_by(&positions), "{letter:?} {positions:?}");
        assert!(!letter.read_by(&vec![0; SPLITS as usize]));
        let (split, at) = letter.passed_at.expect("a split position");
        let mut at_record = positions.clone();
        at_record[split as usize] = at - 1;
        assert!(!letter.read_by(&at_record));
    }
}

#[tokio::test]
async fn parquet_columns_are_taken_by_name_and_resume_by_row() {
    let dir = tempfile::tempdir().expect("dir");
    // The file's columns in another order, `id` as text, and one extra.
    let file_schema = Arc::new(Schema::new(vec![
        Field::new("extra", DataType::Utf8, false),
        Field::new("id", DataType::Utf8, false),
    ]));
    let rows = RecordBatch::try_new(
        file_schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["x", "y", "z"])),
            Arc::new(StringArray::from(vec!["7", "8", "9"])),
        ],
    )
    .expect("rows");
    let mut writer = ArrowWriter::try_new(
        std::fs::File::create(dir.path().join("p.parquet")).expect("created"),
        file_schema,
        None,
    )
    .expect("writer");
    writer.write(&rows).expect("written");
    writer.close().expect("closed");
    let (id, source) = source(dir.path(), "parquet", &[]);
    publish_new(id, &source).await;
    let mut reader = open(&source, vec![0; SPLITS as usize]);
    let batch = reader.next().await.expect("a batch").expect("rows");
    assert!(batch.column(1).is_null(0), "no name column in the file");
    let positions = reader.positions();
    assert_eq!(positions[0], position(0, 2));
    drop(reader);
    let mut resumed = open(&source, positions);
    let (ids, _) = read(&mut resumed, 1).await;
    assert_eq!(ids, vec![9]);
}

#[test]
fn positions_hold_a_file_index_and_an_offset() {
    let at = position(5, (1 << OFFSET_BITS) - 1);
    assert_eq!(file_index(at), 5);
    assert_eq!(offset_in_file(at), (1 << OFFSET_BITS) - 1);
}
