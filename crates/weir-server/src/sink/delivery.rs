//! Delivery of committed epochs: one task per sink that delivers after
//! commit (see `delivers_after_commit`).
//!
//! The manifest of each committed epoch lists, per such sink, the epochs
//! whose changes it has not delivered yet, with where they are stored
//! (`Manifest::sinks`). A sink's task delivers them in order, each in one
//! transaction of the target that also records the epoch, and reports the
//! epoch delivered; the committer then drops those changes from the next
//! manifest. After a crash the newest manifest still lists what was not
//! reported, and the target's record says what it already applied: every
//! committed epoch is applied once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use weir_state::{SliceReader, TableId};
use weir_stream::runtime::from_log_batch;

use super::postgres::{Connection, Failure, PostgresSink};
use crate::catalog::MaterializedViewDef;
use crate::database::Database;

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
        let live: HashMap<TableId, &MaterializedViewDef> = catalog
            .materialized_views
            .values()
            .filter(|d| d.sink.as_ref().is_some_and(super::delivers_after_commit))
            .map(|d| (d.id, d))
            .collect();
        tasks.retain(|id, task| {
            let keep = live.contains_key(id);
            if !keep {
                task.abort();
                db.sink_deliveries.forget(*id);
            }
            keep
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

/// Delivers sink `def`'s committed epochs as they come, reconnecting with
/// backoff while its target fails.
async fn deliver_sink(db: Arc<Database>, def: MaterializedViewDef) {
    let options = def.sink.as_ref().map(|s| s.options.as_slice());
    let sink = match PostgresSink::parse(options.unwrap_or_default()) {
        Ok(sink) => sink,
        Err(e) => {
            db.sink_deliveries
                .update(def.id, |s| s.last_error = Some(e.to_string()));
            return;
        }
    };
    let columns: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
    let reader = db.slice_reader().await;
    let mut committed = db.subscribe_committed();
    let mut connection = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = deliver_pending(&db, &def, &sink, &columns, &reader, &mut connection);
        match attempt.await {
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
                connection = None;
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
    sink: &PostgresSink,
    columns: &[String],
    reader: &SliceReader,
    connection: &mut Option<Connection>,
) -> Result<(), Failure> {
    if connection.is_none() {
        let fresh = sink.connect(columns).await?;
        // What the target applied before a crash or a lost connection.
        let applied = fresh.delivered_epoch(&def.name).await?;
        db.sink_deliveries.update(def.id, |s| {
            s.delivered_epoch = s.delivered_epoch.max(applied)
        });
        info!(sink = %def.name, applied, "sink connected");
        *connection = Some(fresh);
    }
    let connection = connection.as_mut().expect("connected above");
    let pending = db
        .last_manifest()
        .and_then(|m| m.sinks.get(&def.id).cloned())
        .unwrap_or_default();
    let delivered = db.sink_deliveries.delivered(def.id);
    for part in pending.iter().filter(|p| p.epoch > delivered) {
        let failed = |e: String| Failure::Deliver(format!("epoch {}: {e}", part.epoch));
        let batch = reader
            .read(&part.slice)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let changes = from_log_batch(&batch).map_err(|e| failed(e.to_string()))?;
        // The rows and their weights, as the staging table's columns are.
        let text = crate::copy_out::text_rows(&batch).map_err(|e| failed(e.to_string()))?;
        connection
            .deliver(&def.name, part.epoch, &changes, text)
            .await?;
        db.sink_deliveries
            .update(def.id, |s| s.delivered_epoch = part.epoch);
    }
    Ok(())
}
