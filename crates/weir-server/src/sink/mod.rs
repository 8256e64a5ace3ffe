//! `CREATE SINK`, `SHOW SINKS`: views whose output goes to a connector
//! (see `weir_stream::runtime::Sink`).
//!
//! | module | holds |
//! |---|---|
//! | `postgres` | the PostgreSQL sink: its options, and one epoch delivered in one transaction |
//! | `file` | the file sink: each epoch's rows as one Parquet object |
//! | `kafka` | the Kafka sink: each epoch's records in one Kafka transaction with a progress record |
//! | `delivery` | the tasks that deliver each committed epoch of the sinks that deliver after commit |

mod delivery;
mod file;
mod kafka;
pub(crate) mod postgres;

pub use delivery::{run_deliveries, SinkDeliveries};

use crate::catalog::{Catalog, ColumnDef, ConnectorDef, MaterializedViewDef};
use crate::database::Database;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};
use weir_stream::runtime::{Blackhole, EpochLog, Sink};

/// The sink `WITH (...)` describes, checked (the secrets it names must
/// exist in `catalog`).
pub fn definition(catalog: &Catalog, options: &[(String, String)]) -> WeirResult<ConnectorDef> {
    let connector = options
        .iter()
        .find(|(key, _)| key == "connector")
        .map(|(_, value)| value.to_ascii_lowercase());
    let rest: Vec<(String, String)> = options
        .iter()
        .filter(|(key, _)| key != "connector")
        .cloned()
        .collect();
    match connector.as_deref() {
        Some("blackhole") => {
            for (key, value) in &rest {
                // RisingWave's output kinds: a blackhole takes either.
                if !(key == "type" && matches!(value.as_str(), "append-only" | "upsert")) {
                    return Err(unrecognized(key, value));
                }
            }
            Ok(ConnectorDef {
                connector: "blackhole".into(),
                options: rest,
            })
        }
        Some("postgres") => {
            postgres::PostgresSink::parse(&crate::secrets::without_values(catalog, &rest)?)?;
            Ok(ConnectorDef {
                connector: "postgres".into(),
                options: rest,
            })
        }
        Some("filesystem") => {
            file::FileSink::parse(&rest)?;
            Ok(ConnectorDef {
                connector: "filesystem".into(),
                options: rest,
            })
        }
        Some("kafka") => {
            kafka::KafkaSink::parse(&crate::secrets::without_values(catalog, &rest)?)?;
            Ok(ConnectorDef {
                connector: "kafka".into(),
                options: rest,
            })
        }
        Some(other) => Err(WeirError::unsupported(format!(
            "sink connector '{other}' (Weir has 'blackhole', 'postgres', 'kafka' and 'filesystem')"
        ))),
        None => Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "CREATE SINK needs WITH (connector = '...')",
        )),
    }
}

/// Checks a keyed sink's query (`type = 'upsert'` with `primary_key`, or
/// `'append-only'`): the key columns are the query's, and an append-only
/// sink's query only inserts.
fn check_keyed_query(
    upsert: bool,
    primary_key: &[String],
    columns: &[ColumnDef],
    append_only: bool,
) -> WeirResult<()> {
    if !upsert && !append_only {
        return Err(WeirError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            "the sink's query updates and deletes rows, which type = 'append-only' cannot deliver",
        )
        .with_hint("Use type = 'upsert' with primary_key = '...'."));
    }
    for key in primary_key {
        if !columns.iter().any(|c| &c.name == key) {
            return Err(WeirError::new(
                SqlState::UNDEFINED_COLUMN,
                format!("primary_key column \"{key}\" is not a column of the sink's query"),
            ));
        }
    }
    Ok(())
}

/// An option no connector knows.
fn unrecognized(key: &str, value: &str) -> WeirError {
    WeirError::new(
        SqlState::INVALID_PARAMETER_VALUE,
        format!("sink option \"{key}\" = '{value}' is not recognized"),
    )
}

/// Checks a new sink against the query it delivers (`columns`, and
/// whether its output only inserts) and, for an external system, that the
/// system takes it: the PostgreSQL sink connects and checks its table,
/// the Kafka sink its topic.
pub async fn check(
    db: &Database,
    catalog: &Catalog,
    def: &ConnectorDef,
    columns: &[ColumnDef],
    append_only: bool,
) -> WeirResult<()> {
    match def.connector.as_str() {
        "postgres" => {
            let options = crate::secrets::resolve(db, catalog, &def.options)?;
            let sink = postgres::PostgresSink::parse(&options)?;
            sink.check_query(columns, append_only)?;
            sink.check_target(columns).await
        }
        "filesystem" => file::FileSink::check_query(append_only),
        "kafka" => {
            let options = crate::secrets::resolve(db, catalog, &def.options)?;
            let sink = kafka::KafkaSink::parse(&options)?;
            sink.check_query(columns, append_only)?;
            sink.check_target().await
        }
        _ => Ok(()),
    }
}

/// Whether a sink delivers each committed epoch to another system (its
/// epochs' changes are checkpointed until it has).
pub fn delivers_after_commit(def: &ConnectorDef) -> bool {
    matches!(def.connector.as_str(), "postgres" | "filesystem" | "kafka")
}

/// The sinks of `catalog` that deliver each committed epoch.
pub fn delivering_sinks(catalog: &Catalog) -> impl Iterator<Item = &MaterializedViewDef> {
    catalog
        .materialized_views
        .values()
        .filter(|d| d.sink.as_ref().is_some_and(delivers_after_commit))
}

/// What a sink's output goes to in the stream runtime (the only
/// connectors [`definition`] lets into the catalog).
pub fn open(def: &ConnectorDef) -> Box<dyn Sink> {
    if delivers_after_commit(def) {
        Box::new(EpochLog::default())
    } else {
        Box::new(Blackhole)
    }
}

/// One sink as `SHOW SINKS` and `weir_sink_deliveries` show it.
pub struct SinkReport {
    /// The sink.
    pub name: String,
    /// Its connector.
    pub connector: String,
    /// Rows its query put out since the server started.
    pub rows_out: u64,
    /// Where its delivery stands, for a sink that delivers after commit.
    pub delivery: Option<DeliveryReport>,
}

/// Where a sink's delivery of committed epochs stands.
pub struct DeliveryReport {
    /// The newest epoch the target has applied.
    pub delivered_epoch: u64,
    /// Committed epochs whose changes wait in the checkpoint.
    pub pending_epochs: u64,
    /// Their rows (changes with a weight).
    pub pending_rows: u64,
    /// Why the last attempt failed, until one succeeds.
    pub last_error: Option<String>,
}

/// Every sink of the committed catalog, by name.
pub fn reports(db: &Database) -> Vec<SinkReport> {
    let catalog = db.committed().catalog.clone();
    let counters = db.view_counters();
    let manifest = db.last_manifest();
    let mut reports = Vec::new();
    for def in catalog.materialized_views.values() {
        let Some(sink) = &def.sink else { continue };
        let delivery = delivers_after_commit(sink).then(|| {
            let status = db.sink_deliveries.status(def.id);
            let waiting: Vec<_> = manifest
                .iter()
                .flat_map(|m| m.sinks.get(&def.id))
                .flatten()
                .filter(|p| p.epoch > status.delivered_epoch)
                .collect();
            DeliveryReport {
                delivered_epoch: status.delivered_epoch,
                pending_epochs: waiting.len() as u64,
                pending_rows: waiting.iter().map(|p| p.rows).sum(),
                last_error: status.last_error,
            }
        });
        reports.push(SinkReport {
            name: def.name.clone(),
            connector: sink.connector.clone(),
            rows_out: counters.get(&def.name).map_or(0, |c| c.rows_out),
            delivery,
        });
    }
    reports
}

/// `SHOW SINKS`: each sink, its connector, the rows its query put out
/// since the server started and, for a sink that delivers committed
/// epochs, the last epoch delivered, what waits in the checkpoint for
/// delivery and the last delivery error.
pub fn show(session: &Session) -> WeirResult<Output> {
    let mut columns: [Vec<String>; 7] = Default::default();
    for report in reports(&session.db) {
        let delivery = report.delivery.as_ref();
        let figure = |value: fn(&DeliveryReport) -> u64| {
            delivery.map_or(String::new(), |d| value(d).to_string())
        };
        let row = [
            report.name.clone(),
            report.connector.clone(),
            report.rows_out.to_string(),
            figure(|d| d.delivered_epoch),
            figure(|d| d.pending_epochs),
            figure(|d| d.pending_rows),
            delivery
                .and_then(|d| d.last_error.clone())
                .unwrap_or_default(),
        ];
        for (column, value) in columns.iter_mut().zip(row) {
            column.push(value);
        }
    }
    Output::text_columns(
        &[
            "name",
            "connector",
            "rows_delivered",
            "delivered_epoch",
            "pending_epochs",
            "pending_rows",
            "last_error",
        ],
        columns.into(),
    )
}
