//! Opening the database from the newest committed manifest.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use futures::future::BoxFuture;
use tokio::sync::{watch, Mutex, Notify};
use tracing::info;
use weir_state::{Manifest, ReaderPosition, StateStore, StateTable, TableId, TableSpec};

use crate::catalog::Catalog;
use crate::error::{SqlState, WeirError, WeirResult};

use super::*;

impl Database {
    /// Opens the database from the newest committed manifest in `store`
    /// (or empty for a fresh store).
    ///
    /// Boxed, as the server's other entry points are: the future's code
    /// (all of recovery) is then compiled once, in this crate, rather
    /// than in every crate that awaits it.
    pub fn open(
        store: StateStore,
        config: DatabaseConfig,
    ) -> BoxFuture<'static, WeirResult<Arc<Self>>> {
        Box::pin(Self::recover(store, config))
    }

    async fn recover(mut store: StateStore, config: DatabaseConfig) -> WeirResult<Arc<Self>> {
        let started = Instant::now();
        let manifest = store.recover().await?;
        let recovered_state_format = manifest
            .as_ref()
            .map_or(Manifest::STATE_FORMAT, |m| m.state_format);
        let last_manifest = manifest.clone().map(Arc::new);
        let (catalog, epoch, tables, outputs) = match manifest {
            None => (Catalog::default(), 0, HashMap::new(), HashMap::new()),
            Some(manifest) => {
                let catalog: Catalog =
                    serde_json::from_value(manifest.catalog.clone()).map_err(|e| {
                        WeirError::new(SqlState::IO_ERROR, format!("unreadable catalog: {e}"))
                    })?;
                let mut tables = HashMap::new();
                for def in catalog.tables.values() {
                    let files = manifest.tables.get(&def.id).cloned().unwrap_or_default();
                    tables.insert(def.id, store.load_table(def.spec(), &files).await?);
                }
                // File sources' logs (`file_source.rs`).
                for def in catalog.sources.values() {
                    if crate::file_source::is_file_source(def) {
                        let files = manifest.tables.get(&def.id).cloned().unwrap_or_default();
                        let spec = crate::file_source::log_spec();
                        tables.insert(def.id, store.load_table(spec, &files).await?);
                    }
                }
                let mut outputs = HashMap::new();
                for def in catalog.materialized_views.values() {
                    let files = manifest.tables.get(&def.id).cloned().unwrap_or_default();
                    outputs.insert(def.id, store.load_table(def.spec(), &files).await?);
                }
                (catalog, manifest.epoch, tables, outputs)
            }
        };
        let table_positions = last_manifest
            .as_ref()
            .map(|m| table_positions(&catalog, &m.sources))
            .unwrap_or_default();
        let working = WorkingState {
            catalog,
            tables,
            epoch: epoch + 1,
            pending: HashMap::new(),
            table_positions,
            catalog_changed: false,
            positions_moved: false,
            forced: false,
        };
        let mut committed = working.snapshot();
        committed.epoch = epoch;
        committed.offsets = last_manifest
            .as_ref()
            .map(|m| split_positions(&committed.catalog, &m.sources))
            .unwrap_or_default();
        for (&id, &position) in &working.table_positions {
            committed
                .offsets
                .insert(table_position_key(id), vec![position]);
        }
        committed
            .tables
            .extend(outputs.iter().map(|(&id, t)| (id, t.snapshot())));
        info!(
            epoch,
            tables = working.tables.len(),
            views = outputs.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "recovered state"
        );
        let sequences = recovered_sequences(&working.catalog, last_manifest.as_deref(), epoch);
        let store_config = store.config().clone();
        let slice_reader = store.slice_reader();
        let runtime = Runtime::new(RuntimeConfig {
            watermark_idle_timeout: config.watermark_idle_timeout,
            view_memory_bytes: config.view_memory_bytes,
            workers: config.workers,
            first_epoch: working.epoch,
            cluster: config.cluster.clone(),
            epoch_read_limit: config.epoch_read_limit,
        });
        Ok(Arc::new(Database {
            store_config,
            slice_reader,
            working: Mutex::new(working),
            committed: RwLock::new(Arc::new(committed)),
            committed_epoch: watch::Sender::new(epoch),
            commit_requested: Notify::new(),
            store: Mutex::new(store),
            last_commit_error: std::sync::Mutex::new(None),
            config,
            counters: CommitCounters::default(),
            point_reads: AtomicU64::new(0),
            plans_reused: AtomicU64::new(0),
            chunks_sorted_ahead: AtomicU64::new(0),
            contexts_released: AtomicU64::new(0),
            advisory_locks: Default::default(),
            history: std::sync::Mutex::new(VecDeque::new()),
            last_manifest: RwLock::new(last_manifest),
            open_epoch: AtomicU64::new(epoch + 1),
            runtime,
            control_sent: AtomicBool::new(false),
            failures: std::sync::Mutex::new(BTreeMap::new()),
            restored_outputs: std::sync::Mutex::new(outputs),
            recovered_state_format,
            sink_deliveries: Default::default(),
            cdc: Default::default(),
            file_listings: Default::default(),
            sequences: Arc::new(sequences),
        }))
    }

    /// The rows of a state table that is not a catalog table (an
    /// operator's state) at the last committed manifest; none if it names
    /// none.
    pub async fn load_state(
        &self,
        id: TableId,
        spec: TableSpec,
    ) -> WeirResult<datafusion::arrow::record_batch::RecordBatch> {
        let files = self
            .last_manifest()
            .and_then(|m| m.tables.get(&id).cloned())
            .unwrap_or_default();
        Ok(self.store.lock().await.load_rows(spec, &files).await?)
    }

    /// The state format of the manifest recovered at startup (see
    /// [`Manifest::STATE_FORMAT`]).
    pub fn recovered_state_format(&self) -> u32 {
        self.recovered_state_format
    }

    /// A materialized view's output table as loaded at startup.
    pub fn take_restored_output(&self, id: TableId) -> Option<StateTable> {
        self.restored_outputs
            .lock()
            .expect("outputs lock")
            .remove(&id)
    }
}

/// The split positions of every (view, source) in a manifest. A position
/// written before sources had splits (rows read in the source's order) is
/// converted by its source.
fn split_positions(
    catalog: &Catalog,
    positions: &BTreeMap<String, ReaderPosition>,
) -> BTreeMap<String, Vec<u64>> {
    let mut splits = BTreeMap::new();
    for (_, source, key) in catalog.view_sources() {
        let converted = match positions.get(&key) {
            Some(ReaderPosition::Splits(positions)) => Some(positions.clone()),
            // A split count needs no secret's value.
            Some(ReaderPosition::Offset(offset)) => {
                let options: Vec<(String, String)> = source.options.clone().into_iter().collect();
                crate::secrets::without_values(catalog, &options)
                    .and_then(|options| source.connector_with(&options.into_iter().collect(), None))
                    .ok()
                    .map(|source| source.split_positions(*offset))
            }
            None => None,
        };
        if let Some(converted) = converted {
            splits.insert(key, converted);
        }
    }
    splits
}

/// Every sequence of `catalog` at the value `manifest` (of `epoch`)
/// recorded for it; one it has none for is new.
fn recovered_sequences(
    catalog: &Catalog,
    manifest: Option<&Manifest>,
    epoch: u64,
) -> crate::sequences::Sequences {
    use crate::sequences::{position_key, SequenceValue, Sequences};
    let sequences = Sequences::new(epoch + 1);
    for def in catalog.sequences.values() {
        let recorded = manifest.and_then(|m| match m.sources.get(&position_key(def.id)) {
            Some(ReaderPosition::Splits(position)) => SequenceValue::from_position(position),
            _ => None,
        });
        let value = recorded.unwrap_or_else(|| SequenceValue::start(&def.options));
        sequences.insert(def.id, def.options, value);
    }
    sequences
}

/// Where each table a connector feeds stood at a manifest.
fn table_positions(
    catalog: &Catalog,
    positions: &BTreeMap<String, ReaderPosition>,
) -> BTreeMap<TableId, u64> {
    catalog
        .tables
        .values()
        .filter(|def| def.connector.is_some())
        .filter_map(|def| match positions.get(&table_position_key(def.id)) {
            Some(ReaderPosition::Splits(position)) => Some((def.id, *position.first()?)),
            _ => None,
        })
        .collect()
}
