//! The state store: commits epochs to an object store and recovers them.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::{SchemaRef, UInt32Type};
use datafusion::arrow::record_batch::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tracing::{debug, warn};

use crate::codec;
use crate::compact::{self, CompactedBase};
use crate::error::{StateError, StateResult};
use crate::history::{self, History};
use crate::layout::{self, data_path, manifest_path};
use crate::manifest::{
    BaseOrders, DeltaFiles, FileSlice, Manifest, PendingDelivery, ReaderPosition, TableFiles,
    TableId,
};
use crate::table::{DeltaBatches, StateTable, TableSpec};

/// Tunables of the state store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// How many recent manifests (and the files they name) are kept.
    pub retained_manifests: usize,
    /// How long older committed epochs stay in the store after their
    /// commit, beyond the newest `retained_manifests` (zero: not at all),
    /// so that a changefeed can resume from any of them.
    pub retain_history: Duration,
    /// A table's delta chain is merged into a new base once it has this
    /// many deltas and they weigh an eighth of its base, or eight times as
    /// many deltas ...
    pub max_deltas: usize,
    /// ... or once its deltas outweigh its base and this many bytes.
    pub min_compaction_bytes: u64,
}

impl StoreConfig {
    /// Whether a table with these files is due for a merge into a new base:
    /// when its deltas outweigh its base (write amplification stays about
    /// 2x), or its chain is `max_deltas` long and its deltas are an eighth
    /// of its base, or, whatever their size, eight times `max_deltas` long
    /// (so recovery reads a bounded number of deltas). A large table with
    /// small changes is not rewritten every few epochs.
    pub(crate) fn needs_base(&self, files: &TableFiles) -> bool {
        let deltas = files.deltas.len();
        deltas > 0
            && (files.delta_bytes > files.base_bytes.max(self.min_compaction_bytes)
                || deltas >= self.max_deltas && files.delta_bytes * 8 >= files.base_bytes
                || deltas >= 8 * self.max_deltas)
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            retained_manifests: 3,
            retain_history: Duration::ZERO,
            max_deltas: 64,
            min_compaction_bytes: 1 << 20,
        }
    }
}

/// One table's part of an epoch to commit.
#[derive(Debug)]
pub struct TableChange {
    /// The rows changed in this epoch, as one or more deltas applied in
    /// order (a new view's state comes as its backfill, then its catch-up).
    pub deltas: Vec<DeltaBatches>,
    /// The table's next hidden row id after this epoch.
    pub next_row_id: u64,
    /// How the table's rows are stored and keyed (compaction merges its
    /// deltas by this key).
    pub spec: TableSpec,
}

/// Everything one epoch commits: the catalog and every live table.
#[derive(Debug)]
pub struct EpochDelta {
    /// The epoch being committed.
    pub epoch: u64,
    /// The server's catalog after the epoch.
    pub catalog: serde_json::Value,
    /// Every table that exists after the epoch. Tables of the previous
    /// manifest that are missing here were dropped.
    pub tables: BTreeMap<TableId, TableChange>,
    /// Source reader positions after the epoch (see [`Manifest::sources`]).
    pub sources: BTreeMap<String, ReaderPosition>,
    /// Every sink that delivers committed epochs (see
    /// [`Manifest::sinks`]). Sinks of the previous manifest missing here
    /// were dropped, with what they had not delivered.
    pub sinks: BTreeMap<TableId, SinkChange>,
}

/// One epoch's part of a sink's delivery.
#[derive(Debug, Default)]
pub struct SinkChange {
    /// The sink's output changes in this epoch, if any.
    pub changes: Option<RecordBatch>,
    /// The newest epoch the sink has delivered: its pending changes up to
    /// this epoch are forgotten.
    pub delivered: u64,
}

/// Reads stored batches (a sink's pending changes) without the store:
/// cheap to clone, and reading does not hold up commits.
#[derive(Debug, Clone)]
pub struct SliceReader {
    store: Arc<dyn ObjectStore>,
    root: Path,
}

impl SliceReader {
    /// The store and the folder sources keep their dead letters in
    /// (`bad_records = 'dead_letter'`): beside the state, outside what
    /// manifests name, so garbage collection leaves it alone.
    pub fn dead_letters(&self) -> (Arc<dyn ObjectStore>, Path) {
        (
            self.store.clone(),
            self.root.clone().join(layout::DEAD_LETTER_DIR),
        )
    }

    /// The batch stored at `slice`, with the schema it was written with.
    pub async fn read(&self, slice: &FileSlice) -> StateResult<RecordBatch> {
        codec::decode_stored(&read_range(self.store.as_ref(), &self.root, slice).await?)
    }

    /// The manifest of committed epoch `epoch`, or `None` once garbage
    /// collection removed it (or it was never committed).
    pub async fn manifest(&self, epoch: u64) -> StateResult<Option<Manifest>> {
        match read_manifest(self.store.as_ref(), &manifest_path(&self.root, epoch)).await {
            Ok(manifest) => Ok(Some(manifest)),
            Err(StateError::ObjectStore(object_store::Error::NotFound { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The batch at `slice`, if any, read as `schema`.
    pub async fn decode_slice(
        &self,
        slice: Option<&FileSlice>,
        schema: &SchemaRef,
    ) -> StateResult<Option<RecordBatch>> {
        match slice {
            Some(slice) => Ok(Some(codec::decode(
                &read_range(self.store.as_ref(), &self.root, slice).await?,
                schema,
            )?)),
            None => Ok(None),
        }
    }

    /// Rebuilds one table from the files a manifest names.
    pub async fn load_table(&self, spec: TableSpec, files: &TableFiles) -> StateResult<StateTable> {
        let mut table = StateTable::new(spec.clone())?;
        if let Some(rows) = self.decode_slice(files.base.as_ref(), &spec.schema).await? {
            table.apply_delta(Some(&rows), None)?;
            if let Some(orders) = &files.base_orders {
                self.seed_orders(&table, orders).await;
            }
        }
        let key_schema = spec.key_schema();
        for delta in &files.deltas {
            let upserts = self
                .decode_slice(delta.upserts.as_ref(), &spec.schema)
                .await?;
            let deletes = self
                .decode_slice(delta.deletes.as_ref(), &key_schema)
                .await?;
            table.apply_delta(upserts.as_ref(), deletes.as_ref())?;
        }
        table.set_next_row_id(files.next_row_id);
        Ok(table)
    }
}

impl SliceReader {
    /// Gives `table`, just loaded from its base, the orders stored with
    /// that base. Orders only spare lookups a sort, so one that cannot be
    /// read or does not match the base is left out with a warning, never
    /// failing recovery.
    async fn seed_orders(&self, table: &StateTable, orders: &BaseOrders) {
        let seeded = async {
            let batch = codec::decode_stored(
                &read_range(self.store.as_ref(), &self.root, &orders.slice).await?,
            )?;
            let mut found = Vec::with_capacity(orders.columns.len());
            for (columns, order) in orders.columns.iter().zip(batch.columns()) {
                let Some(order) = order.as_primitive_opt::<UInt32Type>() else {
                    return Ok(0);
                };
                found.push((columns.clone(), order.clone()));
            }
            table.seed_orders(found)
        };
        match seeded.await {
            Ok(kept) if kept == orders.columns.len() => {}
            Ok(kept) => warn!(
                path = %orders.slice.path,
                kept,
                stored = orders.columns.len(),
                "stored orders do not match their base; lookups sort the rest again"
            ),
            Err(e) => warn!(
                path = %orders.slice.path,
                error = %e,
                "stored orders cannot be read; lookups sort them again"
            ),
        }
    }
}

/// What one commit wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Objects written, the manifest included.
    pub objects: usize,
    /// Bytes written, the manifest included.
    pub bytes: u64,
}

/// An object store holding Weir's state under a root path.
#[derive(Debug)]
pub struct StateStore {
    store: Arc<dyn ObjectStore>,
    root: Path,
    config: StoreConfig,
    /// Manifests still kept, oldest first; the last one is the newest commit.
    retained: VecDeque<Retained>,
    /// Older epochs kept for `retain_history`.
    history: History,
    /// Each live table's spec, as last committed.
    specs: HashMap<TableId, TableSpec>,
    /// Merged bases waiting for the next commit to name them.
    pub(crate) installed: HashMap<TableId, CompactedBase>,
    /// Files that merges in progress read: kept even when no retained
    /// manifest names them any more.
    pub(crate) pinned: HashMap<TableId, TableFiles>,
}

impl StateStore {
    /// Opens a state store at `location`: a local directory (created if
    /// missing), or an object store URL such as `s3://bucket/prefix` (S3
    /// settings come from the usual `AWS_*` environment variables) or
    /// `file:///path`.
    pub fn open(location: &str, config: StoreConfig) -> StateResult<Self> {
        let (store, root) = open_location(location)?;
        Ok(Self::with_store(store, root, config))
    }

    /// A state store over an existing object store (tests wrap stores to
    /// inject faults).
    pub fn with_store(store: Arc<dyn ObjectStore>, root: Path, config: StoreConfig) -> Self {
        StateStore {
            store,
            root,
            config,
            retained: VecDeque::new(),
            history: History::default(),
            specs: HashMap::new(),
            installed: HashMap::new(),
            pinned: HashMap::new(),
        }
    }

    /// The newest committed manifest.
    pub(crate) fn newest(&self) -> Option<&Manifest> {
        self.retained.back().map(|r| &r.manifest)
    }

    /// The oldest committed epoch the store still keeps (in the history
    /// or among the retained manifests): how far back a changefeed can
    /// resume.
    pub fn oldest_epoch(&self) -> Option<u64> {
        self.history
            .oldest()
            .map(|(epoch, _)| epoch)
            .or_else(|| self.retained.front().map(|r| r.manifest.epoch))
    }

    /// A live table's spec, once a commit (since this store was opened)
    /// named it.
    pub fn spec_of(&self, id: TableId) -> Option<&TableSpec> {
        self.specs.get(&id)
    }

    pub(crate) fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Hands a merged base to the store: the next commit names it in place
    /// of what it merged (see `compact.rs`).
    pub async fn install(&mut self, compacted: CompactedBase) {
        let table = compacted.table;
        self.installed.insert(table, compacted);
        self.release(table).await;
    }

    /// Ends a merge of `table` (done or failed): its files are no longer
    /// pinned, and those no retained manifest names are deleted.
    pub async fn release(&mut self, table: TableId) {
        let Some(files) = self.pinned.remove(&table) else {
            return;
        };
        let referenced = self.referenced();
        let unreferenced: HashSet<&str> =
            files.paths().filter(|p| !referenced.contains(*p)).collect();
        for path in unreferenced {
            self.delete(&self.absolute(path)).await;
        }
    }

    /// A reader of the store's batches (see [`SliceReader`]).
    pub fn slice_reader(&self) -> SliceReader {
        SliceReader {
            store: self.store.clone(),
            root: self.root.clone(),
        }
    }

    /// The store's settings.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The newest committed manifest, or `None` for a fresh store. Also
    /// deletes what an interrupted commit or garbage collection left behind.
    pub async fn recover(&mut self) -> StateResult<Option<Manifest>> {
        let manifests = self.manifests_newest_first().await?;
        let mut retained = VecDeque::new();
        let mut older = Vec::new();
        let mut garbage = Vec::new();
        let now = SystemTime::now();
        for (path, committed_at) in manifests {
            if retained.len() >= self.config.retained_manifests {
                if history::within(self.config.retain_history, committed_at, now) {
                    older.push((path, committed_at));
                } else {
                    garbage.push(path);
                }
                continue;
            }
            match self.read_manifest(&path).await {
                Ok(manifest) => retained.push_front(Retained {
                    manifest,
                    committed_at,
                }),
                // A manifest that cannot be parsed was never committed by
                // this format; keep it for inspection and use an older one.
                // Any other failure (the store is unreachable) stops
                // recovery rather than risk going back in time.
                Err(e @ StateError::Corrupt { .. }) => {
                    warn!(%path, error = %e, "skipping unreadable manifest")
                }
                Err(e) => return Err(e),
            }
        }
        self.retained = retained;
        self.history = self.recover_history(older).await?;
        for path in garbage {
            self.delete(&path).await;
        }
        self.sweep_unreferenced().await?;
        Ok(self.newest().cloned())
    }

    /// The history from the manifests older than the retained ones but
    /// within `retain_history` (newest first, with their commit times):
    /// each is read for the objects it names that no newer manifest does.
    /// One that cannot be parsed is left out (and its objects with it,
    /// unless a newer one names them).
    async fn recover_history(&self, older: Vec<(Path, SystemTime)>) -> StateResult<History> {
        let mut history = History::default();
        let mut named: HashSet<String> = self.named_by_retained();
        let mut manifests = futures::stream::iter(older)
            .map(|(path, at)| async move {
                let manifest = self.read_manifest(&path).await;
                (path, at, manifest)
            })
            .buffered(16);
        while let Some((path, at, manifest)) = manifests.next().await {
            match manifest {
                Ok(manifest) => {
                    let objects = history::not_named(manifest.paths(), &named);
                    named.extend(objects.iter().cloned());
                    history.keep_older(manifest.epoch, at, objects);
                }
                Err(e @ StateError::Corrupt { .. }) => {
                    warn!(%path, error = %e, "skipping unreadable manifest")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(history)
    }

    /// Every manifest object and its commit time (when the store last
    /// wrote it), newest epoch first.
    async fn manifests_newest_first(&self) -> StateResult<Vec<(Path, SystemTime)>> {
        let mut manifests: Vec<(Path, SystemTime)> = self
            .store
            .list(Some(&self.root.clone().join(layout::MANIFEST_DIR)))
            .map_ok(|meta| (meta.location, meta.last_modified.into()))
            .try_collect()
            .await?;
        manifests.sort_by_key(|(p, _)| std::cmp::Reverse(layout::epoch_of(p)));
        Ok(manifests)
    }

    /// The newest readable manifest, without changing anything in the store
    /// (unlike [`StateStore::recover`], which also deletes garbage).
    pub async fn newest_manifest(&self) -> StateResult<Option<Manifest>> {
        let manifests = self.manifests_newest_first().await?;
        for (path, _) in manifests {
            match self.read_manifest(&path).await {
                Ok(manifest) => return Ok(Some(manifest)),
                Err(StateError::Corrupt { .. }) => continue,
                // Pruned by the live server between listing and reading.
                Err(StateError::ObjectStore(object_store::Error::NotFound { .. })) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Copies the newest committed epoch of `self` into `target`: every
    /// object its manifest names, then the sources' dead letters, then the
    /// manifest itself, so `target` holds a complete epoch once the copy
    /// returns (and none before). Safe while a server writes to `self`: if
    /// the server's garbage collection removes an object mid-copy, the
    /// copy starts over from the then-newest manifest. Returns the epoch
    /// copied.
    pub async fn backup_to(&self, target: &StateStore) -> StateResult<u64> {
        const ATTEMPTS: usize = 10;
        let mut last_error = None;
        for _ in 0..ATTEMPTS {
            let Some(manifest) = self.newest_manifest().await? else {
                return Err(StateError::InvalidLocation(
                    "no committed state to back up".into(),
                ));
            };
            let paths: std::collections::BTreeSet<&str> = manifest.paths().collect();
            let mut copied = Ok(());
            for path in paths {
                let result = async {
                    let bytes = self.store.get(&self.absolute(path)).await?.bytes().await?;
                    target
                        .store
                        .put(&target.absolute(path), PutPayload::from(bytes))
                        .await
                }
                .await;
                if let Err(e) = result {
                    copied = Err(e);
                    break;
                }
            }
            match copied {
                Ok(()) => {
                    self.copy_dead_letters(target).await?;
                    let json = serde_json::to_vec(&manifest).expect("manifest serializes");
                    target
                        .put(&manifest_path(&target.root, manifest.epoch), json)
                        .await?;
                    return Ok(manifest.epoch);
                }
                Err(object_store::Error::NotFound { .. }) => {
                    last_error = Some("objects were pruned during the copy".to_owned());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(StateError::InvalidLocation(format!(
            "could not copy a consistent epoch in {ATTEMPTS} attempts: {}",
            last_error.unwrap_or_default()
        )))
    }

    /// Copies every dead letter into `target`. They are not part of an
    /// epoch: a letter of a record after the copied epoch is one the
    /// restored server reads again and stores under the same name. A
    /// letter deleted meanwhile (its source dropped) is left out.
    async fn copy_dead_letters(&self, target: &StateStore) -> StateResult<()> {
        let letters: Vec<Path> = self
            .store
            .list(Some(&self.root.clone().join(layout::DEAD_LETTER_DIR)))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await?;
        for path in letters {
            let bytes = match self.store.get(&path).await {
                Ok(object) => object.bytes().await?,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let copy = target.absolute(&self.relative(&path));
            target.store.put(&copy, PutPayload::from(bytes)).await?;
        }
        Ok(())
    }

    async fn read_manifest(&self, path: &Path) -> StateResult<Manifest> {
        read_manifest(self.store.as_ref(), path).await
    }

    /// Deletes data and base objects that no retained manifest names.
    async fn sweep_unreferenced(&self) -> StateResult<()> {
        let referenced = self.referenced();
        for dir in [layout::DATA_DIR, layout::BASE_DIR] {
            let objects: Vec<Path> = self
                .store
                .list(Some(&self.root.clone().join(dir)))
                .map_ok(|meta| meta.location)
                .try_collect()
                .await?;
            for path in objects {
                if !referenced.contains(self.relative(&path).as_str()) {
                    debug!(%path, "deleting unreferenced state object");
                    self.delete(&path).await;
                }
            }
        }
        Ok(())
    }

    /// Every object a retained manifest, the history or a merge in
    /// progress still needs.
    fn referenced(&self) -> HashSet<String> {
        let mut referenced = self.named_by_retained();
        referenced.extend(
            self.history
                .objects()
                .chain(self.pinned.values().flat_map(|t| t.paths()))
                .map(str::to_owned),
        );
        referenced
    }

    /// Every object a retained manifest names.
    fn named_by_retained(&self) -> HashSet<String> {
        self.retained
            .iter()
            .flat_map(|r| r.manifest.paths())
            .map(str::to_owned)
            .collect()
    }

    pub(crate) fn relative(&self, path: &Path) -> String {
        match path.prefix_match(&self.root) {
            Some(parts) => Path::from_iter(parts).to_string(),
            None => path.to_string(),
        }
    }

    fn absolute(&self, relative: &str) -> Path {
        absolute(&self.root, relative)
    }

    async fn delete(&self, path: &Path) {
        if let Err(e) = self.store.delete(path).await {
            warn!(%path, error = %e, "could not delete state object");
        }
    }

    pub(crate) async fn put(&self, path: &Path, bytes: Vec<u8>) -> StateResult<()> {
        self.store
            .put(path, PutPayload::from(Bytes::from(bytes)))
            .await?;
        Ok(())
    }

    /// The batch stored at `slice`, if there is one.
    async fn decode_slice(
        &self,
        slice: Option<&FileSlice>,
        schema: &SchemaRef,
    ) -> StateResult<Option<RecordBatch>> {
        self.slice_reader().decode_slice(slice, schema).await
    }

    /// Every row of one table as the files a manifest names leave it: a
    /// log's deltas are concatenated; any other table is rebuilt by key.
    pub async fn load_rows(&self, spec: TableSpec, files: &TableFiles) -> StateResult<RecordBatch> {
        if !spec.log {
            return self.load_table(spec, files).await?.snapshot().stored_rows();
        }
        let mut parts = Vec::with_capacity(files.deltas.len() + 1);
        parts.extend(self.decode_slice(files.base.as_ref(), &spec.schema).await?);
        for delta in &files.deltas {
            if delta.deletes.is_some() {
                return Err(StateError::Corrupt {
                    path: format!("{delta:?}"),
                    reason: "a log table's delta deletes rows".into(),
                });
            }
            parts.extend(
                self.decode_slice(delta.upserts.as_ref(), &spec.schema)
                    .await?,
            );
        }
        Ok(datafusion::arrow::compute::concat_batches(
            &spec.schema,
            &parts,
        )?)
    }

    /// Rebuilds one table from the files a manifest names.
    pub async fn load_table(&self, spec: TableSpec, files: &TableFiles) -> StateResult<StateTable> {
        self.slice_reader().load_table(spec, files).await
    }

    /// Commits one epoch: writes the data object with every table's delta,
    /// new bases where delta chains grew long, and then the manifest (the
    /// commit point). Afterwards deletes what fell out of the retained
    /// manifests. On error nothing is committed and the previous epoch stays
    /// the newest; the same epoch may be committed again.
    pub async fn commit(&mut self, delta: &EpochDelta) -> StateResult<(Manifest, CommitStats)> {
        let epoch = delta.epoch;
        let previous = self.retained.back().map(|r| &r.manifest);
        let data = data_path(&self.root, epoch, 0);
        let data_name = self.relative(&data);
        let mut buffer = Vec::new();
        let mut stats = CommitStats::default();
        let mut tables = BTreeMap::new();
        let mut stale = Vec::new();
        for (&id, change) in &delta.tables {
            let mut files = previous
                .and_then(|m| m.tables.get(&id))
                .cloned()
                .unwrap_or_default();
            files.next_row_id = change.next_row_id;
            for batches in &change.deltas {
                let mut slice = |batch: &Option<RecordBatch>| -> StateResult<Option<FileSlice>> {
                    let Some(batch) = batch else { return Ok(None) };
                    let offset = buffer.len();
                    codec::encode_into(batch, &mut buffer)?;
                    Ok(Some(FileSlice {
                        path: data_name.clone(),
                        offset: offset as u64,
                        len: (buffer.len() - offset) as u64,
                    }))
                };
                let upserts = slice(&batches.upserts)?;
                let deletes = slice(&batches.deletes)?;
                files.delta_bytes += upserts.iter().chain(&deletes).map(|s| s.len).sum::<u64>();
                files.deltas.push(DeltaFiles {
                    epoch,
                    upserts,
                    deletes,
                });
            }
            if let Some(compacted) = self.installed.remove(&id) {
                if !compact::apply(&mut files, &compacted) {
                    // The chain changed under the merge: the base is stale.
                    stale.push(compacted.base.path);
                }
            }
            self.specs.insert(id, change.spec.clone());
            tables.insert(id, files);
        }
        let mut sinks = BTreeMap::new();
        for (&id, change) in &delta.sinks {
            let mut pending = previous
                .and_then(|m| m.sinks.get(&id))
                .cloned()
                .unwrap_or_default();
            pending.retain(|p| p.epoch > change.delivered);
            if let Some(batch) = change.changes.as_ref().filter(|b| b.num_rows() > 0) {
                let offset = buffer.len();
                codec::encode_into(batch, &mut buffer)?;
                pending.push(PendingDelivery {
                    epoch,
                    rows: batch.num_rows() as u64,
                    slice: FileSlice {
                        path: data_name.clone(),
                        offset: offset as u64,
                        len: (buffer.len() - offset) as u64,
                    },
                });
            }
            sinks.insert(id, pending);
        }
        if !buffer.is_empty() {
            stats.objects += 1;
            stats.bytes += buffer.len() as u64;
            self.put(&data, buffer).await?;
        }
        let manifest = Manifest {
            version: Manifest::VERSION,
            epoch,
            catalog: delta.catalog.clone(),
            tables,
            sources: delta.sources.clone(),
            state_format: Manifest::STATE_FORMAT,
            sinks,
        };
        let json = serde_json::to_vec(&manifest).expect("manifest serializes");
        stats.objects += 1;
        stats.bytes += json.len() as u64;
        self.put(&manifest_path(&self.root, epoch), json).await?;
        self.retained.push_back(Retained {
            manifest: manifest.clone(),
            committed_at: SystemTime::now(),
        });
        self.specs.retain(|id, _| delta.tables.contains_key(id));
        // A stale base is deleted unless something still names its path
        // (the store never writes one path twice, but deleting a named
        // object would lose a table).
        let referenced = self.referenced();
        for path in stale.iter().filter(|p| !referenced.contains(*p)) {
            self.delete(&self.absolute(path)).await;
        }
        self.prune().await;
        Ok((manifest, stats))
    }

    /// Moves the manifests beyond the retained count into the history,
    /// then lets go of the history's epochs older than the window (at once
    /// without one), deleting their manifests and the objects only they
    /// named.
    async fn prune(&mut self) {
        let mut expired = Vec::new();
        while self.retained.len() > self.config.retained_manifests {
            expired.extend(self.retained.pop_front());
        }
        // Pinned objects are filed too: the history may outlive the merge
        // that reads them. Each object goes under the newest epoch naming
        // it, so newer manifests are filed first.
        let mut named = self.named_by_retained();
        let mut filed = Vec::with_capacity(expired.len());
        for old in expired.iter().rev() {
            let objects = history::not_named(old.manifest.paths(), &named);
            named.extend(objects.iter().cloned());
            filed.push(objects);
        }
        for (old, objects) in expired.into_iter().zip(filed.into_iter().rev()) {
            self.history
                .keep(old.manifest.epoch, old.committed_at, objects);
        }
        self.expire_history(SystemTime::now()).await;
    }

    /// Deletes the manifests of the history's epochs committed more than
    /// `retain_history` before `now`, and the objects only they named
    /// (those a merge in progress reads go when it ends).
    pub(crate) async fn expire_history(&mut self, now: SystemTime) {
        let expired = self.history.expire(now, self.config.retain_history);
        if expired.epochs.is_empty() {
            return;
        }
        let pinned: HashSet<&str> = self.pinned.values().flat_map(|t| t.paths()).collect();
        for epoch in expired.epochs {
            self.delete(&manifest_path(&self.root, epoch)).await;
        }
        for path in expired
            .objects
            .iter()
            .filter(|p| !pinned.contains(p.as_str()))
        {
            self.delete(&self.absolute(path)).await;
        }
    }
}

/// A retained manifest and when it was committed.
#[derive(Debug)]
struct Retained {
    manifest: Manifest,
    committed_at: SystemTime,
}

/// The object store and root path a location names: a local folder
/// (created if missing), `file://`, `s3://bucket/prefix` (credentials and
/// endpoint from the environment, as `AmazonS3Builder::from_env` reads
/// them), or another URL `object_store` knows.
pub fn open_location(location: &str) -> StateResult<(Arc<dyn ObjectStore>, Path)> {
    let (store, root): (Arc<dyn ObjectStore>, Path) = if location.contains("://") {
        let url = url::Url::parse(location)
            .map_err(|e| StateError::InvalidLocation(format!("{location}: {e}")))?;
        match url.scheme() {
            "s3" | "s3a" => {
                let store = AmazonS3Builder::from_env().with_url(url.as_str()).build()?;
                let root = Path::from_url_path(url.path())
                    .map_err(|e| StateError::InvalidLocation(format!("{location}: {e}")))?;
                (Arc::new(store), root)
            }
            "file" => {
                let dir = url.to_file_path().map_err(|_| {
                    StateError::InvalidLocation(format!("{location}: not a local path"))
                })?;
                (local_dir(&dir)?, Path::default())
            }
            _ => {
                let (store, root) = object_store::parse_url(&url)?;
                (Arc::from(store), root)
            }
        }
    } else {
        (local_dir(std::path::Path::new(location))?, Path::default())
    };
    Ok((store, root))
}

/// `relative` (an object as manifests name it, relative to the state
/// root) under `root`.
fn absolute(root: &Path, relative: &str) -> Path {
    let mut path = root.clone();
    for part in Path::from(relative).parts() {
        path = path.join(part);
    }
    path
}

/// The bytes of `slice`, an object range under `root`.
/// The manifest at `path`, checked to be one this server reads.
async fn read_manifest(store: &dyn ObjectStore, path: &Path) -> StateResult<Manifest> {
    let bytes = store.get(path).await?.bytes().await?;

    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    if manifest.version != Manifest::VERSION || manifest.state_format > Manifest::STATE_FORMAT {
        // Not corrupt: written by a newer Weir. Falling back to an
        // older manifest would go back in time, so recovery stops.
        return Err(StateError::Incompatible(format!(
            "{path} is manifest version {} with state format {}; this server reads version {} and state formats up to {}",
            manifest.version,
            manifest.state_format,
            Manifest::VERSION,
            Manifest::STATE_FORMAT
        )));
    }
    Ok(manifest)
}

async fn read_range(store: &dyn ObjectStore, root: &Path, slice: &FileSlice) -> StateResult<Bytes> {
    let path = absolute(root, &slice.path);
    Ok(store
        .get_range(&path, slice.offset..slice.offset + slice.len)
        .await?)
}

fn local_dir(dir: &std::path::Path) -> StateResult<Arc<dyn ObjectStore>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| StateError::InvalidLocation(format!("{}: {e}", dir.display())))?;
    Ok(Arc::new(LocalFileSystem::new_with_prefix(dir)?))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int32Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn spec() -> TableSpec {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        TableSpec::with_primary_key(schema, vec![0])
    }

    fn rows(keys: &[i32], value: &str) -> RecordBatch {
        RecordBatch::try_new(
            spec().schema,
            vec![
                Arc::new(Int32Array::from(keys.to_vec())),
                Arc::new(StringArray::from(vec![value; keys.len()])),
            ],
        )
        .unwrap()
    }

    fn change(table: &mut StateTable) -> TableChange {
        TableChange {
            deltas: table.take_delta().unwrap().into_iter().collect(),
            next_row_id: table.next_row_id(),
            spec: table.spec().clone(),
        }
    }

    fn contents(table: &StateTable) -> Vec<(i32, String)> {
        let mut out = Vec::new();
        for batch in table.snapshot().scan(None, false).unwrap() {
            let k = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap();
            let v = batch
                .column(1)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            for i in 0..batch.num_rows() {
                out.push((k.value(i), v.value(i).to_owned()));
            }
        }
        out.sort();
        out
    }

    fn objects(dir: &std::path::Path, sub: &str) -> usize {
        walk(&dir.join(sub))
    }

    fn walk(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .map(|e| {
                        let p = e.unwrap().path();
                        if p.is_dir() {
                            walk(&p)
                        } else {
                            1
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn commits_recover_compact_and_collect_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            retained_manifests: 2,
            max_deltas: 4,
            min_compaction_bytes: 1 << 30,
            ..StoreConfig::default()
        };
        let location = dir.path().to_str().unwrap();
        let mut store = StateStore::open(location, config.clone()).unwrap();
        assert!(store.recover().await.unwrap().is_none());
        let mut table = StateTable::new(spec()).unwrap();
        for epoch in 1..=10u64 {
            let key = epoch as i32;
            table.write(&[], Some(&rows(&[key], "v"))).unwrap().unwrap();
            if epoch % 3 == 0 {
                // Replace key 1 and delete the previous epoch's key.
                let found = table
                    .lookup(&rows(&[1, key - 1], "").project(&[0]).unwrap())
                    .unwrap();
                let positions: Vec<_> = found.iter().filter_map(|m| m.existing).collect();
                table
                    .write(&positions, Some(&rows(&[1], &format!("e{epoch}"))))
                    .unwrap()
                    .unwrap();
            }
            let delta = EpochDelta {
                epoch,
                sources: BTreeMap::new(),
                sinks: BTreeMap::new(),
                catalog: serde_json::json!({"epoch": epoch}),
                tables: BTreeMap::from([(7, change(&mut table))]),
            };
            let (manifest, stats) = store.commit(&delta).await.unwrap();
            assert!(stats.objects >= 2);
            assert!(manifest.tables[&7].deltas.len() <= config.max_deltas);
            // Half of the merges from the table's snapshot, half from
            // the store: both give the same rows.
            let snapshot = table.snapshot();
            for job in store.compaction_jobs(|_| (epoch % 2 == 0).then(|| snapshot.clone())) {
                let base = store.compactor().compact(&job).await.unwrap();
                store.install(base).await;
            }
        }
        // Compaction wrote bases; garbage collection kept only what the two
        // retained manifests name.
        assert_eq!(objects(dir.path(), "manifest"), 2);
        assert!(objects(dir.path(), "base") >= 1);
        assert!(objects(dir.path(), "data") <= 2 * config.max_deltas);

        let mut reopened = StateStore::open(location, config).unwrap();
        let manifest = reopened.recover().await.unwrap().expect("a manifest");
        assert_eq!(manifest.epoch, 10);
        assert_eq!(manifest.catalog, serde_json::json!({"epoch": 10}));
        let recovered = reopened
            .load_table(spec(), &manifest.tables[&7])
            .await
            .unwrap();
        assert_eq!(contents(&recovered), contents(&table));
        assert!(!recovered.is_dirty());
    }

    #[tokio::test]
    async fn history_keeps_older_epochs_readable_until_its_window_passes() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            retained_manifests: 2,
            retain_history: Duration::from_secs(3600),
            max_deltas: 2,
            min_compaction_bytes: 1 << 30,
        };
        let location = dir.path().to_str().unwrap();
        let mut store = StateStore::open(location, config.clone()).unwrap();
        store.recover().await.unwrap();
        let mut table = StateTable::new(spec()).unwrap();
        // The table's rows after each epoch.
        let mut after = BTreeMap::new();
        for epoch in 1..=12u64 {
            table
                .write(&[], Some(&rows(&[epoch as i32], "v")))
                .unwrap()
                .unwrap();
            let delta = EpochDelta {
                epoch,
                sources: BTreeMap::new(),
                sinks: BTreeMap::new(),
                catalog: serde_json::json!({}),
                tables: BTreeMap::from([(7, change(&mut table))]),
            };
            store.commit(&delta).await.unwrap();
            after.insert(epoch, contents(&table));
            // Merges replace bases and deltas that older epochs named.
            let snapshot = table.snapshot();
            for job in store.compaction_jobs(|_| Some(snapshot.clone())) {
                let base = store.compactor().compact(&job).await.unwrap();
                store.install(base).await;
            }
        }
        assert_eq!(objects(dir.path(), "manifest"), 12);
        assert_eq!(store.history.len(), 10);
        // Every epoch reads back as it was, also after a restart.
        let mut reopened = StateStore::open(location, config.clone()).unwrap();
        reopened.recover().await.unwrap();
        let (kept, oldest) = (reopened.history.len(), reopened.oldest_epoch());
        assert_eq!((kept, oldest), (10, Some(1)));
        for epoch in 1..=12u64 {
            let manifest = reopened
                .slice_reader()
                .manifest(epoch)
                .await
                .unwrap()
                .expect("a kept manifest");
            let loaded = reopened
                .load_table(spec(), &manifest.tables[&7])
                .await
                .unwrap();
            assert_eq!(contents(&loaded), after[&epoch], "epoch {epoch}");
        }
        // Once the window has passed, only the retained manifests and what
        // they name are left.
        reopened
            .expire_history(SystemTime::now() + Duration::from_secs(7200))
            .await;
        assert_eq!(reopened.history.len(), 0);
        assert_eq!(objects(dir.path(), "manifest"), 2);
        let mut named = HashSet::new();
        for epoch in [11, 12] {
            let manifest = reopened.slice_reader().manifest(epoch).await.unwrap();
            named.extend(manifest.unwrap().paths().map(str::to_owned));
        }
        assert_eq!(
            objects(dir.path(), "data") + objects(dir.path(), "base"),
            named.len(),
            "exactly the objects the retained manifests name are left"
        );
        let mut without = StateStore::open(location, StoreConfig::default()).unwrap();
        let newest = without.recover().await.unwrap().unwrap();
        let loaded = without
            .load_table(spec(), &newest.tables[&7])
            .await
            .unwrap();
        assert_eq!(contents(&loaded), after[&12]);
    }

    #[tokio::test]
    async fn a_merge_lands_after_later_commits_and_an_unnamed_base_is_swept() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_str().unwrap();
        let config = StoreConfig {
            retained_manifests: 2,
            max_deltas: 2,
            min_compaction_bytes: 1 << 30,
            ..StoreConfig::default()
        };
        let mut store = StateStore::open(location, config.clone()).unwrap();
        store.recover().await.unwrap();
        let mut table = StateTable::new(spec()).unwrap();
        let commit = |epoch: u64, table: &mut StateTable| {
            table
                .write(&[], Some(&rows(&[epoch as i32], "x")))
                .unwrap()
                .unwrap();
            EpochDelta {
                epoch,
                sources: BTreeMap::new(),
                sinks: BTreeMap::new(),
                catalog: serde_json::json!({}),
                tables: BTreeMap::from([(3, change(table))]),
            }
        };
        for epoch in 1..=2 {
            let delta = commit(epoch, &mut table);
            store.commit(&delta).await.unwrap();
        }
        let jobs = store.compaction_jobs(|_| Some(table.snapshot()));
        assert_eq!(jobs.len(), 1);
        assert!(
            store.compaction_jobs(|_| None).is_empty(),
            "one merge per table"
        );
        // Epochs 3 to 5 commit before the merge is done; it still applies,
        // and keeps their deltas.
        for epoch in 3..=5 {
            let delta = commit(epoch, &mut table);
            store.commit(&delta).await.unwrap();
        }
        let base = store.compactor().compact(&jobs[0]).await.unwrap();
        store.install(base).await;
        assert!(
            store.compaction_jobs(|_| None).is_empty(),
            "no second merge before the first one is named"
        );
        let delta = commit(6, &mut table);
        let (manifest, _) = store.commit(&delta).await.unwrap();
        let files = &manifest.tables[&3];
        assert!(files.base.is_some());
        assert_eq!(
            files.deltas.iter().map(|d| d.epoch).collect::<Vec<_>>(),
            vec![3, 4, 5, 6]
        );
        // A merge that no manifest names (the process died before the
        // next commit) is swept at recovery.
        let job = store.compaction_jobs(|_| None).remove(0);
        let orphan = store.compactor().compact(&job).await.unwrap();
        let before = objects(dir.path(), "base");
        let mut reopened = StateStore::open(location, config).unwrap();
        let manifest = reopened.recover().await.unwrap().unwrap();
        assert_eq!(objects(dir.path(), "base"), before - 1);
        assert!(manifest.tables[&3].paths().all(|p| p != orphan.base.path));
        let recovered = reopened
            .load_table(spec(), &manifest.tables[&3])
            .await
            .unwrap();
        assert_eq!(contents(&recovered), contents(&table));
    }

    #[tokio::test]
    async fn bases_store_the_orders_reads_use_and_recovery_loads_them() {
        use datafusion::arrow::array::ArrayRef;

        use crate::order::KeySelection;
        use crate::table::TableSnapshot;

        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_str().unwrap();
        let mut store = StateStore::open(location, StoreConfig::default()).unwrap();
        store.recover().await.unwrap();
        let mut table = StateTable::new(spec()).unwrap();
        // Keys and values sort differently.
        let keys: Vec<i32> = (0..20).rev().collect();
        let values: Vec<String> = keys.iter().map(|k| format!("{:02}", k * 7 % 20)).collect();
        let batch = RecordBatch::try_new(
            spec().schema,
            vec![
                Arc::new(Int32Array::from(keys)),
                Arc::new(StringArray::from(values)),
            ],
        )
        .unwrap();
        table.write(&[], Some(&batch)).unwrap().unwrap();
        let commit = |epoch: u64, table: &mut StateTable| EpochDelta {
            epoch,
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            catalog: serde_json::json!({}),
            tables: BTreeMap::from([(5, change(table))]),
        };
        store.commit(&commit(1, &mut table)).await.unwrap();
        // Small and fresh: not due for a merge until a read uses an order.
        let snapshot = table.snapshot();
        assert!(store.compaction_jobs(|_| Some(snapshot.clone())).is_empty());
        let by_value = |snapshot: &TableSnapshot, value: &str| {
            let probe: ArrayRef = Arc::new(StringArray::from(vec![value]));
            let found = snapshot
                .select(&[1], &KeySelection::Equal(vec![probe]), None, false)
                .unwrap()
                .unwrap();
            found
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
                        .values()
                        .to_vec()
                })
                .collect::<Vec<i32>>()
        };
        assert_eq!(by_value(&snapshot, "07"), vec![1]);
        let jobs = store.compaction_jobs(|_| Some(snapshot.clone()));
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].orders, vec![vec![1]]);
        let base = store.compactor().compact(&jobs[0]).await.unwrap();
        assert!(base.orders.is_some(), "orders are stored with the base");
        store.install(base).await;
        let (manifest, _) = store.commit(&commit(2, &mut table)).await.unwrap();
        let files = manifest.tables[&5].clone();
        let orders = files
            .base_orders
            .clone()
            .expect("the manifest names the orders");
        assert_eq!(orders.columns, vec![vec![1]]);
        assert_eq!(
            Some(&orders.slice.path),
            files.base.as_ref().map(|b| &b.path)
        );
        // Stored: no further merge is due for them.
        assert!(store.compaction_jobs(|_| Some(snapshot.clone())).is_empty());

        let mut reopened = StateStore::open(location, StoreConfig::default()).unwrap();
        let manifest = reopened.recover().await.unwrap().unwrap();
        let recovered = reopened
            .load_table(spec(), &manifest.tables[&5])
            .await
            .unwrap();
        let recovered = recovered.snapshot();
        assert!(recovered.has_orders(&[1]), "loaded, not sorted by a read");
        assert!(!recovered.has_orders(&[0]));
        assert_eq!(by_value(&recovered, "07"), vec![1]);
        assert_eq!(by_value(&recovered, "14"), vec![2]);

        // An order that does not match its base is left out, not used.
        let mut wrong = files.clone();
        wrong.base_orders.as_mut().unwrap().columns = vec![vec![0]];
        let loaded = reopened.load_table(spec(), &wrong).await.unwrap();
        assert!(!loaded.snapshot().has_orders(&[0]));
        assert_eq!(contents(&loaded), contents(&table));
    }

    #[tokio::test]
    async fn a_lone_delta_of_upserts_becomes_the_base_without_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_str().unwrap();
        let config = StoreConfig {
            min_compaction_bytes: 0,
            ..StoreConfig::default()
        };
        let mut store = StateStore::open(location, config.clone()).unwrap();
        store.recover().await.unwrap();
        let mut table = StateTable::new(spec()).unwrap();
        table
            .write(&[], Some(&rows(&[1, 2, 3], "a")))
            .unwrap()
            .unwrap();
        let delta = EpochDelta {
            epoch: 1,
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            catalog: serde_json::json!({}),
            tables: BTreeMap::from([(5, change(&mut table))]),
        };
        let (manifest, _) = store.commit(&delta).await.unwrap();
        let slice = manifest.tables[&5].deltas[0].upserts.clone().unwrap();
        let job = store.compaction_jobs(|_| None).remove(0);
        let base = store.compactor().compact(&job).await.unwrap();
        assert_eq!(base.base, slice, "the delta's slice is named, not copied");
        assert_eq!(objects(dir.path(), "base"), 0);
        store.install(base).await;
        let delta = EpochDelta {
            epoch: 2,
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            catalog: serde_json::json!({}),
            tables: BTreeMap::from([(5, change(&mut table))]),
        };
        let (manifest, _) = store.commit(&delta).await.unwrap();
        assert_eq!(manifest.tables[&5].base, Some(slice));
        assert!(manifest.tables[&5].deltas.is_empty());
        let mut reopened = StateStore::open(location, config).unwrap();
        let manifest = reopened.recover().await.unwrap().unwrap();
        let recovered = reopened
            .load_table(spec(), &manifest.tables[&5])
            .await
            .unwrap();
        assert_eq!(contents(&recovered), contents(&table));
    }

    #[tokio::test]
    async fn a_sinks_changes_stay_until_delivered_and_their_files_with_them() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_str().unwrap();
        let config = StoreConfig {
            retained_manifests: 1,
            ..StoreConfig::default()
        };
        let mut store = StateStore::open(location, config.clone()).unwrap();
        store.recover().await.unwrap();
        let sink = |changes: Option<RecordBatch>, delivered| {
            BTreeMap::from([(9, SinkChange { changes, delivered })])
        };
        for (epoch, changes, delivered) in [
            (1, Some(rows(&[1, 2], "a")), 0),
            (2, None, 0),
            (3, Some(rows(&[3], "b")), 0),
            (4, Some(rows(&[4], "c")), 1),
        ] {
            let delta = EpochDelta {
                epoch,
                sources: BTreeMap::new(),
                sinks: sink(changes, delivered),
                catalog: serde_json::json!({}),
                tables: BTreeMap::new(),
            };
            store.commit(&delta).await.unwrap();
        }
        // Epoch 1 was delivered; 3 and 4 wait, and with one manifest
        // retained the data object of epoch 3 is still there.
        let mut reopened = StateStore::open(location, config).unwrap();
        let manifest = reopened.recover().await.unwrap().unwrap();
        let pending = &manifest.sinks[&9];
        assert_eq!(
            pending
                .iter()
                .map(|p| (p.epoch, p.rows))
                .collect::<Vec<_>>(),
            [(3, 1), (4, 1)]
        );
        assert_eq!(objects(dir.path(), "data"), 2);
        let read = reopened
            .slice_reader()
            .read(&pending[0].slice)
            .await
            .unwrap();
        assert_eq!(read, rows(&[3], "b"));
        // Once delivered through 4, nothing waits and the objects go.
        let delta = EpochDelta {
            epoch: 5,
            sources: BTreeMap::new(),
            sinks: sink(None, 4),
            catalog: serde_json::json!({}),
            tables: BTreeMap::new(),
        };
        let (manifest, _) = reopened.commit(&delta).await.unwrap();
        assert!(manifest.sinks[&9].is_empty());
        assert_eq!(objects(dir.path(), "data"), 0);
    }

    #[tokio::test]
    async fn a_corrupt_newest_manifest_falls_back_and_orphans_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_str().unwrap();
        let mut store = StateStore::open(location, StoreConfig::default()).unwrap();
        store.recover().await.unwrap();
        let mut table = StateTable::new(spec()).unwrap();
        table
            .write(&[], Some(&rows(&[1, 2], "a")))
            .unwrap()
            .unwrap();
        let delta = EpochDelta {
            epoch: 1,
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            catalog: serde_json::Value::Null,
            tables: BTreeMap::from([(1, change(&mut table))]),
        };
        store.commit(&delta).await.unwrap();
        // A later epoch whose data was written but whose manifest is garbage
        // (as if a different program wrote it), plus an orphan data object.
        std::fs::write(
            dir.path().join("manifest").join(format!("{:020}", 2)),
            b"{not json",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("data").join(format!("{:020}-0", 3)),
            b"orphan",
        )
        .unwrap();
        let mut reopened = StateStore::open(location, StoreConfig::default()).unwrap();
        let manifest = reopened.recover().await.unwrap().unwrap();
        assert_eq!(manifest.epoch, 1);
        assert_eq!(objects(dir.path(), "data"), 1, "the orphan is swept");
        let recovered = reopened
            .load_table(spec(), &manifest.tables[&1])
            .await
            .unwrap();
        assert_eq!(recovered.len(), 2);
    }

    /// A store on a fault-injecting wrapper over a fresh local folder.
    fn faulty() -> (
        tempfile::TempDir,
        Arc<dyn ObjectStore>,
        Arc<std::sync::Mutex<crate::faulty::Faults>>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let local: Arc<dyn ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let (store, faults) = crate::faulty::FaultyStore::new(local);
        (dir, store, faults)
    }

    async fn commit_keys(
        store: &mut StateStore,
        table: &mut StateTable,
        epoch: u64,
        keys: &[i32],
    ) -> StateResult<()> {
        table.write(&[], Some(&rows(keys, "v"))).unwrap().unwrap();
        let delta = EpochDelta {
            epoch,
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            catalog: serde_json::Value::Null,
            tables: BTreeMap::from([(1, change(table))]),
        };
        store.commit(&delta).await.map(|_| ())
    }

    async fn recovered_keys(store: Arc<dyn ObjectStore>) -> (u64, Vec<(i32, String)>) {
        let mut reopened = StateStore::with_store(store, Path::default(), StoreConfig::default());
        let manifest = reopened.recover().await.unwrap().unwrap();
        let table = reopened
            .load_table(spec(), &manifest.tables[&1])
            .await
            .unwrap();
        (manifest.epoch, contents(&table))
    }

    #[tokio::test]
    async fn a_backup_holds_the_epoch_and_the_dead_letters() {
        let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let open = |dir: &tempfile::TempDir| {
            StateStore::open(dir.path().to_str().unwrap(), StoreConfig::default()).unwrap()
        };
        let mut store = open(&from);
        let mut table = StateTable::new(spec()).unwrap();
        commit_keys(&mut store, &mut table, 1, &[1, 2])
            .await
            .unwrap();
        let (objects, letters) = store.slice_reader().dead_letters();
        let letter = letters.join("9").join("p00000-o00000000000000000007");
        objects.put(&letter, b"bad".to_vec().into()).await.unwrap();

        let target = open(&to);
        assert_eq!(store.backup_to(&target).await.unwrap(), 1);
        let mut restored = open(&to);
        let manifest = restored.recover().await.unwrap().expect("a manifest");
        let table = restored
            .load_table(spec(), &manifest.tables[&1])
            .await
            .unwrap();
        assert_eq!(contents(&table).len(), 2);
        let (objects, letters) = restored.slice_reader().dead_letters();
        let copied = letters.join("9").join("p00000-o00000000000000000007");
        let bytes = objects.get(&copied).await.unwrap().bytes().await.unwrap();
        assert_eq!(bytes.as_ref(), b"bad");
    }

    #[tokio::test]
    async fn failed_uploads_and_manifest_writes_leave_the_previous_epoch() {
        for failing in ["data/", "manifest/"] {
            let (dir, inner, faults) = faulty();
            let mut store =
                StateStore::with_store(inner.clone(), Path::default(), StoreConfig::default());
            store.recover().await.unwrap();
            let mut table = StateTable::new(spec()).unwrap();
            commit_keys(&mut store, &mut table, 1, &[1]).await.unwrap();
            faults.lock().unwrap().put = Some(failing.into());
            let failed = {
                table.write(&[], Some(&rows(&[2], "v"))).unwrap().unwrap();
                let delta = EpochDelta {
                    epoch: 2,
                    sources: BTreeMap::new(),
                    sinks: BTreeMap::new(),
                    catalog: serde_json::Value::Null,
                    tables: BTreeMap::from([(1, change(&mut table))]),
                };
                let result = store.commit(&delta).await;
                assert!(result.is_err(), "{failing}: the commit must fail");
                delta
            };
            // A process that dies now (between upload and manifest, or with
            // nothing uploaded) recovers epoch 1 and sweeps the orphans.
            let (epoch, keys) = recovered_keys(inner.clone()).await;
            assert_eq!(epoch, 1, "{failing}");
            assert_eq!(keys, vec![(1, "v".to_owned())]);
            assert_eq!(objects(dir.path(), "data"), 1, "{failing}: orphan swept");
            // The same epoch is committed again once the store is back.
            faults.lock().unwrap().put = None;
            store.commit(&failed).await.unwrap();
            let (epoch, keys) = recovered_keys(inner).await;
            assert_eq!(epoch, 2);
            assert_eq!(keys, vec![(1, "v".to_owned()), (2, "v".to_owned())]);
        }
    }

    #[tokio::test]
    async fn recovery_fails_rather_than_go_back_when_reads_fail() {
        let (_dir, inner, faults) = faulty();
        let mut store =
            StateStore::with_store(inner.clone(), Path::default(), StoreConfig::default());
        store.recover().await.unwrap();
        let mut table = StateTable::new(spec()).unwrap();
        commit_keys(&mut store, &mut table, 1, &[1]).await.unwrap();
        commit_keys(&mut store, &mut table, 2, &[2]).await.unwrap();
        faults.lock().unwrap().get = Some(format!("{:020}", 2));
        let mut reopened =
            StateStore::with_store(inner.clone(), Path::default(), StoreConfig::default());
        assert!(reopened.recover().await.is_err());
        faults.lock().unwrap().get = None;
        let (epoch, _) = recovered_keys(inner).await;
        assert_eq!(epoch, 2, "nothing was deleted while the store was failing");
    }
}
