//! The committer: each epoch's parts uploaded in order and published.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use std::collections::BTreeMap;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use weir_state::{EpochDelta, ReaderPosition, SinkChange, TableChange};

use crate::error::{WeirError, WeirResult};
use weir_stream::runtime::{log_batch, ViewPart};

use super::*;

impl Database {
    /// Commits epochs in order: each one's tables' part with the stream
    /// worker's views' part, retrying with backoff until the store takes
    /// it, then publishes it to readers.
    pub(super) async fn run_committer(
        self: Arc<Self>,
        mut tables: mpsc::UnboundedReceiver<TablePart>,
        mut views: mpsc::Receiver<ViewPart>,
    ) {
        while let Some(part) = tables.recv().await {
            if !part.through_views {
                let view_part = self.unchanged_views(&part).await;
                match self.commit(part, view_part).await {
                    Ok(()) => {
                        self.counters
                            .epochs_without_views
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => warn!(error = %e, "could not commit epoch"),
                }
                continue;
            }
            let Some(view_part) = views.recv().await else {
                warn!(
                    epoch = part.epoch,
                    "the stream worker is gone; epoch not committed"
                );
                return;
            };
            if view_part.epoch != part.epoch {
                warn!(
                    tables = part.epoch,
                    views = view_part.epoch,
                    "epoch parts out of step; stopping commits"
                );
                return;
            }
            if let Err(e) = self.commit(part, view_part).await {
                warn!(error = %e, "could not commit epoch");
            }
        }
    }

    /// The views' part of an epoch that did not go through the worker: the
    /// views as committed in the epoch before (which the committer, one
    /// epoch at a time and in order, has just published), each of their
    /// tables live with no change.
    async fn unchanged_views(&self, part: &TablePart) -> ViewPart {
        let committed = self.committed();
        let store = self.store.lock().await;
        let mut views = ViewPart {
            epoch: part.epoch,
            operator_rows: committed.operator_rows.clone(),
            positions: committed.offsets.clone(),
            ..ViewPart::default()
        };
        for def in part.catalog.materialized_views.values() {
            for &id in std::iter::once(&def.id).chain(&def.state_ids) {
                if let Some(spec) = store.spec_of(id) {
                    let unchanged = TableChange {
                        deltas: Vec::new(),
                        next_row_id: 0,
                        spec: spec.clone(),
                    };
                    views.tables.insert(id, unchanged);
                }
            }
            if let Some(snapshot) = committed.tables.get(&def.id) {
                views.snapshots.insert(def.id, snapshot.clone());
            }
        }
        views
    }

    async fn commit(&self, part: TablePart, mut views: ViewPart) -> WeirResult<()> {
        let TablePart {
            epoch,
            mut catalog,
            mut tables,
            mut snapshots,
            table_positions,
            sequences,
            through_views: _,
        } = part;
        for (id, position) in table_positions {
            views
                .positions
                .insert(table_position_key(id), vec![position]);
        }
        // Only the sequences that still exist.
        views
            .positions
            .retain(|key, _| !key.starts_with(crate::sequences::POSITION_PREFIX));
        for (id, value) in sequences {
            views
                .positions
                .insert(crate::sequences::position_key(id), value.to_position());
        }
        for failed in views.failures {
            let failure = ViewFailure::from_reason(failed.reason);
            self.view_failed(&failed.view, failure);
        }
        self.record_failures(&mut catalog);
        // A view missing from the runtime's part failed, and
        // `record_failures` has said so in this epoch's catalog.
        tables.extend(views.tables);
        snapshots.extend(views.snapshots);
        let mut sink_changes = views.sink_changes;
        let mut sinks = BTreeMap::new();
        for def in crate::sink::delivering_sinks(&catalog) {
            let changes = match sink_changes.remove(&def.id) {
                Some(changes) => Some(log_batch(&changes).map_err(WeirError::from)?),
                None => None,
            };
            let delivered = self.sink_deliveries.delivered(def.id);
            sinks.insert(def.id, SinkChange { changes, delivered });
        }
        let delta = EpochDelta {
            epoch,
            catalog: serde_json::to_value(&catalog).map_err(WeirError::internal)?,
            tables,
            sinks,
            sources: views
                .positions
                .iter()
                .map(|(key, splits)| (key.clone(), ReaderPosition::Splits(splits.clone())))
                .collect(),
        };
        let snapshot = DbSnapshot {
            epoch,
            catalog: Arc::new(catalog),
            tables: snapshots,
            operator_rows: views.operator_rows,
            offsets: views.positions,
        };
        let started_at = SystemTime::now();
        let started = Instant::now();
        let mut retries = 0;
        let mut backoff = Duration::from_millis(10);
        let stats = loop {
            let mut store = self.store.lock().await;
            match store.commit(&delta).await {
                Ok((manifest, stats)) => {
                    // Published under the store's lock, so that the
                    // compactor sees the snapshot of the store's newest
                    // manifest.
                    *self.committed.write().expect("snapshot lock") = Arc::new(snapshot);
                    *self.last_manifest.write().expect("manifest lock") = Some(Arc::new(manifest));
                    self.counters
                        .oldest_retained_epoch
                        .store(store.oldest_epoch().unwrap_or(epoch), Ordering::Relaxed);
                    break stats;
                }
                Err(e) => {
                    retries += 1;
                    warn!(epoch, error = %e, "commit failed; retrying");
                    *self.last_commit_error.lock().expect("error lock") = Some(e.to_string());
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        };
        *self.last_commit_error.lock().expect("error lock") = None;
        let mut history = self.history.lock().expect("history lock");
        if history.len() == CHECKPOINT_HISTORY {
            history.pop_front();
        }
        history.push_back(CheckpointRecord {
            epoch,
            started_at,
            duration: started.elapsed(),
            objects: stats.objects,
            bytes: stats.bytes,
            retries,
        });
        drop(history);
        self.counters.epochs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .objects
            .fetch_add(stats.objects as u64, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(stats.bytes, Ordering::Relaxed);
        self.committed_epoch.send_replace(epoch);
        debug!(
            epoch,
            objects = stats.objects,
            bytes = stats.bytes,
            "committed epoch"
        );
        Ok(())
    }
}
