//! Delivery of committed epochs: one task per sink that delivers after
//! commit (see `delivers_after_commit`).
//!
//! The manifest of each committed epoch lists, per such sink, the epochs
//! whose changes it has not delivered yet, with where they are stored
//! (`Manifest::sinks`). A sink's task delivers them in order and reports
//! the epoch delivered; the committer then drops those changes from the
//! next manifest. After a crash the newest manifest still lists what was
//! not reported; a PostgreSQL target's progress table says which of those
//! it already applied (each epoch is one transaction that also records
//! it), and a file target takes an epoch again as the same object: every
//! committed epoch is applied once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use weir_state::{SliceReader, TableId};
use weir_stream::runtime::from_log_batch;

use super::file::FileSink;
use super::kafka::{KafkaProducer, KafkaSink};
use super::postgres::{Connection, Failure, PostgresSink};
use crate::catalog::MaterializedViewDef;
use crate::database::Database;
use crate::error::WeirResult;

/// The longest wait between attempts to reach a failing target.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where each sink that delivers after commit stands.
#[derive(Debug, Default)]
pub struct SinkDeliveries {
    statuses: Mutex<HashMap<TableId, DeliveryStatus>>,
}

/// One sink's delivery, for `SHOW SINKS` and the committer.
#[derive(Debug, Default, Clone)]
pub struct DeliveryStatus {
    /// The newest epoch the target has applied.
    pub delivered_epoch: u64,
    /// Why the last attempt failed, until one succeeds.
    pub last_error: Option<String>,
}

impl SinkDeliveries {
    /// Sink `id`'s status.
    pub fn status(&self, id: TableId) -> DeliveryStatus {
        self.lock().get(&id).cloned().unwrap_or_default()
    }

    /// The newest epoch sink `id` has delivered (0 before its task has
    /// asked the target).
    pub fn delivered(&self, id: TableId) -> u64 {
        self.lock().get(&id).map_or(0, |s| s.delivered_epoch)
    }

    fn update(&self, id: TableId, change: impl FnOnce(&mut DeliveryStatus)) {
        change(self.lock().entry(id).or_default());
    }

    fn forget(&self, id: TableId) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TableId, DeliveryStatus>> {
        self.statuses.lock().expect("deliveries lock")
    }
}

/// Runs until `shutdown` turns true: a delivery task for every sink of the
/// committed catalog that delivers after commit, started and stopped as
/// sinks are created and dropped.
pub async fn run_deliveries(db: Arc<Database>, mut shutdown: watch::Receiver<bool>) {
    let mut committed = db.subscribe_committed();
    let mut tasks: HashMap<TableId, JoinHandle<()>> = HashMap::new();
    loop {
        let catalog = db.committed().catalog.clone();
        let live: HashMap<TableId, &MaterializedViewDef> = super::delivering_sinks(&catalog)
            .map(|d| (d.id, d))
            .collect();
        tasks.retain(|id, task| {
            if !live.contains_key(id) {
                task.abort();
                db.sink_deliveries.forget(*id);
                return false;
            }
            if !task.is_finished() {
                return true;
            }
            // A task that ended (it could not read its options, or a
            // bug panicked) starts again below, at each commit.
            if let Some(Err(failure)) = task.now_or_never() {
                let message = match failure.try_into_panic() {
                    Ok(panic) => crate::panics::message(panic.as_ref()),
                    Err(failure) => failure.to_string(),
                };
                db.sink_deliveries.update(*id, |s| {
                    s.last_error = Some(format!("the delivery task failed: {message}"))
                });
            }
            false
        });
        for (id, def) in live {
            tasks
                .entry(id)
                .or_insert_with(|| tokio::spawn(deliver_sink(db.clone(), def.clone())));
        }
        tokio::select! {
            changed = committed.changed() => if changed.is_err() { break },
            _ = shutdown.changed() => break,
        }
    }
    for task in tasks.values() {
        task.abort();
    }
}

/// Where a sink delivers to.
enum Target {
    /// A PostgreSQL table, through a connection made when needed.
    Postgres {
        sink: Box<PostgresSink>,
        columns: Vec<String>,
        connection: Option<Box<Connection>>,
    },
    /// Parquet objects, one per epoch.
    Files(FileSink),
    /// A Kafka topic, through a producer made when needed.
    Kafka {
        sink: Box<KafkaSink>,
        producer: Option<Arc<KafkaProducer>>,
    },
}

impl Target {
    /// The target of sink `def`, with the secrets its options name.
    fn open(db: &Database, def: &MaterializedViewDef) -> WeirResult<Self> {
        let options = def.sink.as_ref().map(|s| s.options.as_slice());
        let options =
            crate::secrets::resolve(db, &db.committed().catalog, options.unwrap_or_default())?;
        match def.sink.as_ref().map(|s| s.connector.as_str()) {
            Some("filesystem") => Ok(Target::Files(FileSink::parse(&options)?)),
            Some("kafka") => Ok(Target::Kafka {
                sink: Box::new(KafkaSink::parse(&options)?),
                producer: None,
            }),
            _ => Ok(Target::Postgres {
                sink: Box::new(PostgresSink::parse(&options)?),
                columns: def.columns.iter().map(|c| c.name.clone()).collect(),
                connection: None,
            }),
        }
    }

    /// Makes the target ready (connects); returns the newest epoch of sink
    /// `name` it has applied, where it records one.
    async fn ready(&mut self, name: &str) -> Result<Option<u64>, Failure> {
        let (sink, columns, connection) = match self {
            Target::Postgres {
                sink,
                columns,
                connection,
            } => (sink, columns, connection),
            Target::Kafka {
                producer: Some(_), ..
            } => return Ok(None),
            Target::Kafka { sink, producer } => {
                // Fencing an older producer and reading the progress
                // topic block.
                let (sink, name) = (sink.clone(), name.to_owned());
                let (fresh, applied) = tokio::task::spawn_blocking(move || sink.connect(&name))
                    .await
                    .map_err(|e| Failure::Connect(e.to_string()))??;
                *producer = Some(Arc::new(fresh));
                return Ok(applied);
            }
            // Files record nothing: an epoch written again is the same
            // object.
            Target::Files(_) => return Ok(None),
        };
        if connection.is_some() {
            return Ok(None);
        }
        let fresh = sink.connect(columns).await?;
        // What the target applied before a crash or a lost connection.
        let applied = fresh.delivered_epoch(name).await?;
        *connection = Some(Box::new(fresh));
        Ok(Some(applied))
    }

    /// How many pending epochs, and changes, one delivery may take: a
    /// Kafka transaction takes several epochs (so that a sink that fell
    /// behind catches up in few transactions); the others one.
    fn group_limits(&self) -> (usize, u64) {
        match self {
            Target::Kafka { .. } => (64, 200_000),
            _ => (1, u64::MAX),
        }
    }

    /// Delivers `epochs` of sink `name` (each epoch with its changes as
    /// checkpointed), at most [`Self::group_limits`] of them.
    async fn deliver(
        &mut self,
        name: &str,
        epochs: Vec<(u64, RecordBatch)>,
    ) -> Result<(), Failure> {
        if let Target::Kafka { producer, .. } = self {
            let producer = producer.clone().expect("ready before delivering");
            let mut changes = Vec::with_capacity(epochs.len());
            for (epoch, batch) in &epochs {
                let decoded = from_log_batch(batch)
                    .map_err(|e| Failure::Deliver(format!("epoch {epoch}: {e}")))?;
                changes.push((*epoch, decoded));
            }
            return tokio::task::spawn_blocking(move || producer.deliver(&changes))
                .await
                .map_err(|e| Failure::Deliver(e.to_string()))?;
        }
        for (epoch, batch) in &epochs {
            self.deliver_one(name, *epoch, batch).await?;
        }
        Ok(())
    }

    /// Delivers epoch `epoch` of sink `name` to PostgreSQL or files:
    /// `batch` holds its changes as checkpointed.
    async fn deliver_one(
        &mut self,
        name: &str,
        epoch: u64,
        batch: &RecordBatch,
    ) -> Result<(), Failure> {
        let failed = |e: String| Failure::Deliver(format!("epoch {epoch}: {e}"));
        let changes = from_log_batch(batch).map_err(|e| failed(e.to_string()))?;
        match self {
            Target::Postgres { connection, .. } => {
                let connection = connection.as_mut().expect("ready before delivering");
                // The rows and their weights, as the staging table's columns are.
                let text = crate::copy_out::text_rows(batch).map_err(|e| failed(e.to_string()))?;
                connection.deliver(name, epoch, &changes, text).await
            }
            Target::Files(files) => files.deliver(epoch, &changes).await,
            Target::Kafka { .. } => unreachable!("Kafka deliveries take groups of epochs"),
        }
    }

    /// Forgets a connection that failed.
    fn reset(&mut self) {
        match self {
            Target::Postgres { connection, .. } => *connection = None,
            Target::Kafka { producer, .. } => *producer = None,
            Target::Files(_) => {}
        }
    }
}

/// Delivers sink `def`'s committed epochs as they come, retrying with
/// backoff while its target fails.
async fn deliver_sink(db: Arc<Database>, def: MaterializedViewDef) {
    let mut target = match Target::open(&db, &def) {
        Ok(target) => target,
        Err(e) => {
            db.sink_deliveries
                .update(def.id, |s| s.last_error = Some(e.to_string()));
            return;
        }
    };
    let reader = db.slice_reader().clone();
    let mut committed = db.subscribe_committed();
    let mut backoff = Duration::from_millis(100);
    loop {
        match deliver_pending(&db, &def, &mut target, &reader).await {
            Ok(()) => {
                backoff = Duration::from_millis(100);
                db.sink_deliveries.update(def.id, |s| s.last_error = None);
                if committed.changed().await.is_err() {
                    return;
                }
            }
            Err(e) => {
                warn!(sink = %def.name, error = %e, "sink delivery failed; retrying");
                db.sink_deliveries
                    .update(def.id, |s| s.last_error = Some(e.to_string()));
                target.reset();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Delivers every epoch the newest manifest lists for the sink and the
/// target has not applied.
async fn deliver_pending(
    db: &Database,
    def: &MaterializedViewDef,
    target: &mut Target,
    reader: &SliceReader,
) -> Result<(), Failure> {
    if let Some(applied) = target.ready(&def.name).await? {
        db.sink_deliveries.update(def.id, |s| {
            s.delivered_epoch = s.delivered_epoch.max(applied)
        });
        info!(sink = %def.name, applied, "sink connected");
    }
    let pending = db
        .last_manifest()
        .and_then(|m| m.sinks.get(&def.id).cloned())
        .unwrap_or_default();
    let delivered = db.sink_deliveries.delivered(def.id);
    let (max_epochs, max_rows) = target.group_limits();
    let parts: Vec<_> = pending.iter().filter(|p| p.epoch > delivered).collect();
    let mut first = 0;
    while first < parts.len() {
        // The next group: at least one epoch, then as many as fit.
        let (mut end, mut rows) = (first + 1, parts[first].rows);
        while end < parts.len() && end - first < max_epochs && rows + parts[end].rows <= max_rows {
            rows += parts[end].rows;
            end += 1;
        }
        let mut group = Vec::with_capacity(end - first);
        for part in &parts[first..end] {
            let batch = reader
                .read(&part.slice)
                .await
                .map_err(|e| Failure::Deliver(format!("epoch {}: {e}", part.epoch)))?;
            group.push((part.epoch, batch));
        }
        let last = parts[end - 1].epoch;
        target.deliver(&def.name, group).await?;
        db.sink_deliveries
            .update(def.id, |s| s.delivered_epoch = last);
        first = end;
    }
    Ok(())
}
