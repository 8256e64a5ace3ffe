//! System tables, readable with `SELECT` like any table but not listed by
//! `\dt`:
//!
//! - `weir_checkpoints`: the recent commits (epoch, start time, duration,
//!   objects and bytes written, failed attempts);
//! - `weir_state_tables`: each table's, view's, operator state's and
//!   file source's log's rows
//!   (distinct rows for views and operators) and files in the newest
//!   manifest (base size, delta count and size);
//! - `weir_source_readers`: each view's reading of each source and its
//!   position (rows read, over all the source's splits) at the epoch the
//!   query reads;
//! - `weir_source_splits`: the same per split: each split's position;
//! - `weir_shared_readers`: the source readers running in this process,
//!   one per share of a source's splits (its first split and how many),
//!   each with the views it delivers to and the rows it read since it
//!   started;
//! - `weir_view_operators`: each running view's operators as of its last
//!   checkpoint: change rows in and out, state rows and bytes, busy time,
//!   the instances that run it (summed over them);
//!   the last entry of a view is its output table;
//! - `weir_view_workers`: each worker's share of each partitioned view as
//!   of its last checkpoint: its process, the source rows its readers
//!   delivered since the server started, the state rows it holds;
//! - `weir_sink_deliveries`: each sink, the rows its query put out since
//!   the server started and, for a sink that delivers committed epochs,
//!   the last epoch delivered, the epochs and rows waiting in the
//!   checkpoint for delivery, and the last delivery error;
//! - `weir_cdc_tables`: each table a `postgres-cdc` connector feeds: its
//!   ingest's phase (`snapshot`, `streaming`, `retrying`), slot, snapshot
//!   rows, changes and transactions applied since the server started,
//!   the upstream LSN its rows have reached and the one its slot is
//!   confirmed to (the last committed epoch's), failures and the last
//!   error;
//! - `weir_source_errors`: each Kafka or file source's records that did
//!   not parse since the server started (left out with `bad_records =
//!   'skip'`), and where the last one was (partition and offset, or file
//!   and byte) and its error;
//! - `weir_dead_letters`: the records of sources with `bad_records =
//!   'dead_letter'` that did not parse (source, place, error, value), read
//!   from the state store (`dead_letters.rs`);
//! - `weir_source_files`: each file source: the files in its log at the
//!   epoch the query reads, their bytes, the listings and failed
//!   listings since the server started, and the last failure's error;
//! - `weir_views`: each materialized view and sink at the epoch the query
//!   reads: whether it is a sink, whether its rows are only inserted,
//!   whether it emits on window close, once it stopped being
//!   maintained why (its SQLSTATE, message and hint), and the rows its
//!   operators dropped as late (behind a watermark) since it was created.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, StringArray, TimestampMicrosecondArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::error::Result;

use crate::database::{Database, DbSnapshot};

/// Names of the system tables.
pub const SYSTEM_TABLES: &[&str] = &[
    "weir_checkpoints",
    "weir_state_tables",
    "weir_source_readers",
    "weir_source_splits",
    "weir_shared_readers",
    "weir_view_operators",
    "weir_view_workers",
    "weir_sink_deliveries",
    "weir_cdc_tables",
    "weir_source_errors",
    "weir_source_files",
    "weir_dead_letters",
    "weir_views",
];

/// The system table called `name`, if there is one; `snapshot` is the
/// epoch the query reads.
pub fn table(
    db: &Database,
    snapshot: &DbSnapshot,
    name: &str,
) -> Option<Result<Arc<dyn TableProvider>>> {
    match name {
        "weir_checkpoints" => Some(checkpoints(db)),
        "weir_state_tables" => Some(state_tables(db)),
        "weir_source_readers" => Some(source_readers(snapshot)),
        "weir_source_splits" => Some(source_splits(snapshot)),
        "weir_shared_readers" => Some(shared_readers(db)),
        "weir_view_operators" => Some(view_operators(db)),
        "weir_view_workers" => Some(view_workers(db)),
        "weir_sink_deliveries" => Some(sink_deliveries(db)),
        "weir_cdc_tables" => Some(cdc_tables(db, snapshot)),
        "weir_source_errors" => Some(source_errors(snapshot)),
        "weir_source_files" => Some(source_files(db, snapshot)),
        "weir_dead_letters" => Some(Ok(crate::dead_letters::table(db, snapshot))),
        "weir_views" => Some(views(db, snapshot)),
        _ => None,
    }
}

fn source_readers(snapshot: &DbSnapshot) -> Result<Arc<dyn TableProvider>> {
    let pairs = snapshot.catalog.view_sources();
    let position =
        |key: &String| -> u64 { snapshot.offsets.get(key).map_or(0, |s| s.iter().sum()) };
    mem_table(
        vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("source", DataType::Utf8, false),
            Field::new("position", DataType::UInt64, false),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                pairs.iter().map(|(view, _, _)| &view.name),
            )),
            Arc::new(StringArray::from_iter_values(
                pairs.iter().map(|(_, source, _)| &source.name),
            )),
            Arc::new(UInt64Array::from_iter_values(
                pairs.iter().map(|(_, _, key)| position(key)),
            )),
        ],
    )
}

fn source_splits(snapshot: &DbSnapshot) -> Result<Arc<dyn TableProvider>> {
    let mut rows: Vec<(&str, &str, u64, u64)> = Vec::new();
    for (view, source, key) in snapshot.catalog.view_sources() {
        for (split, &position) in snapshot.offsets.get(&key).into_iter().flatten().enumerate() {
            rows.push((&view.name, &source.name, split as u64, position));
        }
    }
    mem_table(
        vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("source", DataType::Utf8, false),
            Field::new("split", DataType::UInt64, false),
            Field::new("position", DataType::UInt64, false),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.3))),
        ],
    )
}

fn shared_readers(db: &Database) -> Result<Arc<dyn TableProvider>> {
    let readers = db.shared_readers();
    mem_table(
        vec![
            Field::new("source", DataType::Utf8, false),
            Field::new("first_split", DataType::UInt64, false),
            Field::new("splits", DataType::UInt64, false),
            Field::new("views", DataType::UInt64, false),
            Field::new("rows_read", DataType::UInt64, false),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                readers.iter().map(|r| r.source.as_str()),
            )),
            Arc::new(UInt64Array::from_iter_values(
                readers
                    .iter()
                    .map(|r| r.splits.first().map_or(0, |&s| u64::from(s))),
            )),
            Arc::new(UInt64Array::from_iter_values(
                readers.iter().map(|r| r.splits.len() as u64),
            )),
            Arc::new(UInt64Array::from_iter_values(
                readers.iter().map(|r| r.subscribers as u64),
            )),
            Arc::new(UInt64Array::from_iter_values(
                readers.iter().map(|r| r.rows_read),
            )),
        ],
    )
}

fn view_workers(db: &Database) -> Result<Arc<dyn TableProvider>> {
    let views = db.view_workers();
    let rows: Vec<(&String, &weir_stream::runtime::WorkerFigures)> = views
        .iter()
        .flat_map(|(view, workers)| workers.iter().map(move |w| (view, w)))
        .collect();
    let column = |value: fn(&weir_stream::runtime::WorkerFigures) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|(_, w)| value(w)),
        ))
    };
    mem_table(
        vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("worker", DataType::UInt64, false),
            Field::new("process", DataType::UInt64, false),
            Field::new("rows_read", DataType::UInt64, false),
            Field::new("state_rows", DataType::UInt64, false),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(view, _)| view.as_str()),
            )),
            column(|w| w.worker as u64),
            column(|w| w.process as u64),
            column(|w| w.rows_read),
            column(|w| w.state_rows),
        ],
    )
}

fn view_operators(db: &Database) -> Result<Arc<dyn TableProvider>> {
    let views = db.view_operators();
    let rows: Vec<(&String, &weir_stream::OperatorInfo)> = views
        .iter()
        .flat_map(|(view, operators)| operators.iter().map(move |o| (view, o)))
        .collect();
    let column = |value: fn(&weir_stream::OperatorInfo) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|(_, o)| value(o)),
        ))
    };
    mem_table(
        vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("operator", DataType::UInt64, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("rows_in", DataType::UInt64, false),
            Field::new("rows_out", DataType::UInt64, false),
            Field::new("state_rows", DataType::UInt64, false),
            Field::new("state_bytes", DataType::UInt64, false),
            Field::new("busy_ms", DataType::UInt64, false),
            Field::new("instances", DataType::UInt64, false),
            Field::new("late_rows", DataType::UInt64, false),
            Field::new(
                "watermark",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(view, _)| view.as_str()),
            )),
            column(|o| o.index as u64),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(_, o)| o.name.as_str()),
            )),
            column(|o| o.stats.rows_in),
            column(|o| o.stats.rows_out),
            column(|o| o.state_rows.iter().sum::<usize>() as u64),
            column(|o| o.state_bytes as u64),
            column(|o| o.stats.busy.as_millis() as u64),
            column(|o| o.instances as u64),
            column(|o| o.late_rows),
            Arc::new(TimestampMicrosecondArray::from_iter(
                rows.iter().map(|(_, o)| o.watermark_micros),
            )),
        ],
    )
}

fn sink_deliveries(db: &Database) -> Result<Arc<dyn TableProvider>> {
    let reports = crate::sink::reports(db);
    let figure = |value: fn(&crate::sink::DeliveryReport) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter(
            reports.iter().map(|r| r.delivery.as_ref().map(value)),
        ))
    };
    mem_table(
        vec![
            Field::new("sink", DataType::Utf8, false),
            Field::new("connector", DataType::Utf8, false),
            Field::new("rows_out", DataType::UInt64, false),
            Field::new("delivered_epoch", DataType::UInt64, true),
            Field::new("pending_epochs", DataType::UInt64, true),
            Field::new("pending_rows", DataType::UInt64, true),
            Field::new("last_error", DataType::Utf8, true),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                reports.iter().map(|r| r.name.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                reports.iter().map(|r| r.connector.as_str()),
            )),
            Arc::new(UInt64Array::from_iter_values(
                reports.iter().map(|r| r.rows_out),
            )),
            figure(|d| d.delivered_epoch),
            figure(|d| d.pending_epochs),
            figure(|d| d.pending_rows),
            Arc::new(StringArray::from_iter(reports.iter().map(|r| {
                r.delivery.as_ref().and_then(|d| d.last_error.as_deref())
            }))),
        ],
    )
}

/// Each Kafka or file source's bad records since the server started.
fn source_errors(snapshot: &DbSnapshot) -> Result<Arc<dyn TableProvider>> {
    let counts = weir_connectors::records::bad_record_counts();
    let sources: Vec<(&str, u64, Option<String>)> = snapshot
        .catalog
        .sources
        .values()
        .filter(|def| def.decodes_records())
        .map(|def| {
            let count = counts.get(&def.id);
            (
                def.name.as_str(),
                count.map_or(0, |c| c.count.load(std::sync::atomic::Ordering::Relaxed)),
                count.and_then(|c| c.last_error.lock().expect("bad record lock").clone()),
            )
        })
        .collect();
    mem_table(
        vec![
            Field::new("source", DataType::Utf8, false),
            Field::new("bad_records", DataType::UInt64, false),
            Field::new("last_error", DataType::Utf8, true),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(sources.iter().map(|s| s.0))),
            Arc::new(UInt64Array::from_iter_values(sources.iter().map(|s| s.1))),
            Arc::new(StringArray::from_iter(sources.iter().map(|s| s.2.clone()))),
        ],
    )
}

/// Each file source's log at `snapshot` and its listings.
fn source_files(db: &Database, snapshot: &DbSnapshot) -> Result<Arc<dyn TableProvider>> {
    let listings = db.file_listings.all();
    let mut names = Vec::new();
    let mut files = Vec::new();
    let mut bytes = Vec::new();
    let mut states = Vec::new();
    for def in snapshot.catalog.sources.values() {
        if !crate::file_source::is_file_source(def) {
            continue;
        }
        let (count, size) = match snapshot.tables.get(&def.id) {
            Some(log) => (
                log.num_rows() as u64,
                crate::file_source::log_bytes(log)
                    .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?,
            ),
            None => (0, 0),
        };
        names.push(def.name.as_str());
        files.push(count);
        bytes.push(size);
        states.push(listings.get(&def.id).cloned().unwrap_or_default());
    }
    mem_table(
        vec![
            Field::new("source", DataType::Utf8, false),
            Field::new("files", DataType::UInt64, false),
            Field::new("bytes", DataType::UInt64, false),
            Field::new("listings", DataType::UInt64, false),
            Field::new("failed_listings", DataType::UInt64, false),
            Field::new("last_error", DataType::Utf8, true),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(names)),
            Arc::new(UInt64Array::from(files)),
            Arc::new(UInt64Array::from(bytes)),
            Arc::new(UInt64Array::from_iter_values(
                states.iter().map(|s| s.listings),
            )),
            Arc::new(UInt64Array::from_iter_values(
                states.iter().map(|s| s.failures),
            )),
            Arc::new(StringArray::from_iter(
                states.iter().map(|s| s.last_error.clone()),
            )),
        ],
    )
}

fn cdc_tables(db: &Database, snapshot: &DbSnapshot) -> Result<Arc<dyn TableProvider>> {
    let statuses = db.cdc.all();
    let mut tables: Vec<(&str, crate::cdc::CdcState)> = snapshot
        .catalog
        .tables
        .values()
        .filter_map(|def| Some((def.name.as_str(), statuses.get(&def.id)?.clone())))
        .collect();
    tables.sort_by(|a, b| a.0.cmp(b.0));
    let figure = |value: fn(&crate::cdc::CdcState) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(
            tables.iter().map(|(_, s)| value(s)),
        ))
    };
    let lsn = |value: fn(&crate::cdc::CdcState) -> u64| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(tables.iter().map(
            |(_, s)| {
                let lsn = value(s);
                format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
            },
        )))
    };
    mem_table(
        vec![
            Field::new("table", DataType::Utf8, false),
            Field::new("phase", DataType::Utf8, false),
            Field::new("slot", DataType::Utf8, false),
            Field::new("snapshot_rows", DataType::UInt64, false),
            Field::new("changes", DataType::UInt64, false),
            Field::new("transactions", DataType::UInt64, false),
            Field::new("applied_lsn", DataType::Utf8, false),
            Field::new("confirmed_lsn", DataType::Utf8, false),
            Field::new("failures", DataType::UInt64, false),
            Field::new("last_error", DataType::Utf8, true),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                tables.iter().map(|(n, _)| *n),
            )),
            Arc::new(StringArray::from_iter_values(
                tables.iter().map(|(_, s)| s.phase),
            )),
            Arc::new(StringArray::from_iter_values(
                tables.iter().map(|(_, s)| s.slot.as_str()),
            )),
            figure(|s| s.snapshot_rows),
            figure(|s| s.changes),
            figure(|s| s.transactions),
            lsn(|s| s.applied_position),
            lsn(|s| s.confirmed_position),
            figure(|s| s.failures),
            Arc::new(StringArray::from_iter(
                tables.iter().map(|(_, s)| s.last_error.as_deref()),
            )),
        ],
    )
}

fn views(db: &Database, snapshot: &DbSnapshot) -> Result<Arc<dyn TableProvider>> {
    let views: Vec<&crate::catalog::MaterializedViewDef> =
        snapshot.catalog.materialized_views.values().collect();
    let operators = db.view_operators();
    let late_rows = views.iter().map(|v| {
        operators
            .get(&v.name)
            .map_or(0, |ops| ops.iter().map(|o| o.late_rows).sum::<u64>())
    });
    let flag = |value: fn(&crate::catalog::MaterializedViewDef) -> bool| -> ArrayRef {
        Arc::new(BooleanArray::from_iter(
            views.iter().map(|v| Some(value(v))),
        ))
    };
    let failure = |value: fn(&crate::catalog::ViewFailure) -> Option<&str>| -> ArrayRef {
        Arc::new(StringArray::from_iter(
            views.iter().map(|v| v.failed.as_ref().and_then(value)),
        ))
    };
    mem_table(
        vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("sink", DataType::Boolean, false),
            Field::new("append_only", DataType::Boolean, false),
            Field::new("emit_on_window_close", DataType::Boolean, false),
            Field::new("failed", DataType::Boolean, false),
            Field::new("sqlstate", DataType::Utf8, true),
            Field::new("error", DataType::Utf8, true),
            Field::new("hint", DataType::Utf8, true),
            Field::new("late_rows", DataType::UInt64, false),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                views.iter().map(|v| v.name.as_str()),
            )),
            flag(|v| v.sink.is_some()),
            flag(|v| v.append_only),
            flag(|v| v.emit_on_window_close),
            flag(|v| v.failed.is_some()),
            failure(|f| Some(f.sqlstate.as_str())),
            failure(|f| Some(f.message.as_str())),
            failure(|f| f.hint.as_deref()),
            Arc::new(UInt64Array::from_iter_values(late_rows)),
        ],
    )
}

fn mem_table(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<Arc<dyn TableProvider>> {
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
}

fn checkpoints(db: &Database) -> Result<Arc<dyn TableProvider>> {
    let records = db.checkpoints();
    let micros = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64)
    };
    mem_table(
        vec![
            Field::new("epoch", DataType::UInt64, false),
            Field::new(
                "started_at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                false,
            ),
            Field::new("duration_ms", DataType::UInt64, false),
            Field::new("objects", DataType::UInt64, false),
            Field::new("bytes", DataType::UInt64, false),
            Field::new("retries", DataType::UInt64, false),
        ],
        vec![
            Arc::new(UInt64Array::from_iter_values(
                records.iter().map(|r| r.epoch),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    records.iter().map(|r| micros(r.started_at)),
                )
                .with_timezone("+00:00"),
            ),
            Arc::new(UInt64Array::from_iter_values(
                records.iter().map(|r| r.duration.as_millis() as u64),
            )),
            Arc::new(UInt64Array::from_iter_values(
                records.iter().map(|r| r.objects as u64),
            )),
            Arc::new(UInt64Array::from_iter_values(
                records.iter().map(|r| r.bytes),
            )),
            Arc::new(UInt64Array::from_iter_values(
                records.iter().map(|r| r.retries as u64),
            )),
        ],
    )
}

fn state_tables(db: &Database) -> Result<Arc<dyn TableProvider>> {
    let snapshot = db.committed();
    let manifest = db.last_manifest();
    let catalog = &snapshot.catalog;
    // (name, kind, id, rows): tables, each view's output, each operator's state.
    let mut entries: Vec<(String, &str, u64, u64)> = Vec::new();
    let rows_of = |id: u64| snapshot.tables.get(&id).map_or(0, |t| t.num_rows() as u64);
    for def in catalog.tables.values() {
        entries.push((def.name.clone(), "table", def.id, rows_of(def.id)));
    }
    for def in catalog.materialized_views.values() {
        entries.push((
            def.name.clone(),
            "materialized view",
            def.id,
            rows_of(def.id),
        ));
        for (i, &id) in def.state_ids.iter().enumerate() {
            let rows = snapshot.operator_rows.get(&id).copied().unwrap_or(0) as u64;
            entries.push((format!("{}#{i}", def.name), "operator state", id, rows));
        }
    }
    for def in catalog.sources.values() {
        if crate::file_source::is_file_source(def) {
            entries.push((def.name.clone(), "file log", def.id, rows_of(def.id)));
        }
    }
    let files = |id: u64| manifest.as_ref().and_then(|m| m.tables.get(&id));
    mem_table(
        vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("table_id", DataType::UInt64, false),
            Field::new("rows", DataType::UInt64, false),
            Field::new("base_bytes", DataType::UInt64, false),
            Field::new("deltas", DataType::UInt64, false),
            Field::new("delta_bytes", DataType::UInt64, false),
            Field::new("kind", DataType::Utf8, false),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.0.clone()),
            )),
            Arc::new(UInt64Array::from_iter_values(entries.iter().map(|e| e.2))),
            Arc::new(UInt64Array::from_iter_values(entries.iter().map(|e| e.3))),
            Arc::new(UInt64Array::from_iter_values(
                entries
                    .iter()
                    .map(|e| files(e.2).map_or(0, |f| f.base_bytes)),
            )),
            Arc::new(UInt64Array::from_iter_values(
                entries
                    .iter()
                    .map(|e| files(e.2).map_or(0, |f| f.deltas.len() as u64)),
            )),
            Arc::new(UInt64Array::from_iter_values(
                entries
                    .iter()
                    .map(|e| files(e.2).map_or(0, |f| f.delta_bytes)),
            )),
            Arc::new(StringArray::from_iter_values(entries.iter().map(|e| e.1))),
        ],
    )
}
