//! File sources' logs (`connector = 'filesystem'`): the server lists each
//! file source's location, commits the files it has not seen as rows of
//! the source's own state table (ordinal, path, size: the log), and
//! publishes them to the source's readers once that epoch is committed
//! (`weir_connectors::files`).
//!
//! The log is ordinary state: checkpointed with the epoch that found the
//! files, compacted, copied by backups, reloaded at recovery. Since a file
//! reaches readers only after its entry is committed, every split
//! position a checkpoint holds names a file of the same checkpoint's log,
//! and after a crash the log and the positions agree.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{AsArray, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;
use weir_connectors::files::{self, FileOptions, LoggedFile};
use weir_connectors::Connector;
use weir_state::{StateTable, TableId, TableSnapshot, TableSpec};

use crate::catalog::SourceDef;
use crate::database::{Database, WorkingState};
use crate::error::{WeirError, WeirResult};

/// The shape of a file source's log: `(ordinal, path, size)` keyed by
/// ordinal.
pub fn log_spec() -> TableSpec {
    let schema = Schema::new(vec![
        Field::new("ordinal", DataType::Int64, false),
        Field::new("path", DataType::Utf8, false),
        Field::new("size", DataType::Int64, false),
    ]);
    TableSpec::with_primary_key(Arc::new(schema), vec![0])
}

/// Whether `def` reads files (and so has a log).
pub fn is_file_source(def: &SourceDef) -> bool {
    def.connector == Connector::Files.name()
}

/// Gives new file source `def` its (empty) log.
pub fn create_log(working: &mut WorkingState, def: &SourceDef) -> WeirResult<()> {
    working.tables.insert(def.id, StateTable::new(log_spec())?);
    Ok(())
}

/// How one source's listing goes, for `weir_source_files`.
#[derive(Debug, Default, Clone)]
pub struct ListingState {
    /// Listings done since the server started.
    pub listings: u64,
    /// Listings that failed since the server started.
    pub failures: u64,
    /// Why the last listing failed, until one succeeds.
    pub last_error: Option<String>,
}

/// Every file source's [`ListingState`], by source.
#[derive(Debug, Default)]
pub struct ListingStates(Mutex<HashMap<TableId, ListingState>>);

impl ListingStates {
    /// Each source's state.
    pub fn all(&self) -> HashMap<TableId, ListingState> {
        self.0.lock().expect("listing states lock").clone()
    }

    fn update(&self, id: TableId, change: impl FnOnce(&mut ListingState)) {
        change(
            self.0
                .lock()
                .expect("listing states lock")
                .entry(id)
                .or_default(),
        );
    }

    fn remove(&self, id: TableId) {
        self.0.lock().expect("listing states lock").remove(&id);
    }
}

/// Runs until `shutdown` turns true: a lister for every file source of
/// the committed catalog, started and stopped as such sources are
/// created and dropped.
pub async fn run_listers(db: Arc<Database>, mut shutdown: watch::Receiver<bool>) {
    let mut committed = db.subscribe_committed();
    let mut tasks: HashMap<TableId, JoinHandle<()>> = HashMap::new();
    loop {
        let catalog = db.committed().catalog.clone();
        let sources: HashMap<TableId, &SourceDef> = catalog
            .sources
            .values()
            .filter(|def| is_file_source(def))
            .map(|def| (def.id, def))
            .collect();
        tasks.retain(|id, task| {
            if sources.contains_key(id) {
                return true;
            }
            task.abort();
            db.file_listings.remove(*id);
            files::forget_file_log(*id);
            false
        });
        for (&id, def) in &sources {
            tasks
                .entry(id)
                .or_insert_with(|| tokio::spawn(run_lister(db.clone(), (*def).clone())));
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

/// Lists one source's location every `source.monitor-interval` and logs
/// the files it finds.
async fn run_lister(db: Arc<Database>, def: SourceDef) {
    let failed = |error: String| {
        warn!(source = %def.name, %error, "file source listing failed");
        db.file_listings.update(def.id, |s| {
            s.failures += 1;
            s.last_error = Some(error);
        });
    };
    let resolved = match def.resolved_options(&db, &db.committed().catalog) {
        Ok(resolved) => resolved,
        Err(e) => return failed(e.to_string()),
    };
    let options = match FileOptions::parse(&resolved) {
        Ok(options) => options,
        Err(e) => return failed(e),
    };
    let (store, root) = match files::open_location(&options) {
        Ok(location) => location,
        Err(e) => return failed(e),
    };
    let log = files::file_log(def.id);
    let committed = match committed_files(&db, def.id) {
        Ok(files) => files,
        Err(e) => return failed(e.to_string()),
    };
    log.publish(0, &committed);
    let mut seen: HashSet<String> = committed.into_iter().map(|f| f.path).collect();
    loop {
        match files::list(store.as_ref(), &root, &options).await {
            Ok(found) => {
                db.file_listings.update(def.id, |s| {
                    s.listings += 1;
                    s.last_error = None;
                });
                let new: Vec<LoggedFile> = found
                    .into_iter()
                    .filter(|file| !seen.contains(&file.path))
                    .collect();
                if !new.is_empty() {
                    match append(&db, def.id, &new).await {
                        Ok(Some((first, epoch))) => {
                            seen.extend(new.iter().map(|f| f.path.clone()));
                            wait_committed(&db, epoch).await;
                            log.publish(first, &new);
                        }
                        // The source was dropped.
                        Ok(None) => return,
                        Err(e) => failed(e.to_string()),
                    }
                }
            }
            Err(e) => failed(format!("listing {}: {e}", options.location)),
        }
        tokio::time::sleep(options.monitor_interval).await;
    }
}

/// Waits until `epoch` is committed, however long the store takes.
async fn wait_committed(db: &Database, epoch: u64) {
    while let Err(e) = db.wait_committed(epoch).await {
        warn!(epoch, error = %e, "waiting for a file source's files to commit");
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Appends `new` to source `id`'s log in the working state: the first
/// new ordinal and the epoch the entries commit with (`None` once the
/// source is gone).
async fn append(db: &Database, id: TableId, new: &[LoggedFile]) -> WeirResult<Option<(u64, u64)>> {
    let mut working = db.working().await;
    let epoch = working.epoch;
    let Some(table) = working.tables.get_mut(&id) else {
        return Ok(None);
    };
    let first = table.len() as u64;
    let ordinals = (first..first + new.len() as u64).map(|o| o as i64);
    let size = |file: &LoggedFile| i64::try_from(file.size).unwrap_or(i64::MAX);
    let rows = RecordBatch::try_new(
        log_spec().schema,
        vec![
            Arc::new(Int64Array::from_iter_values(ordinals)),
            Arc::new(StringArray::from_iter_values(new.iter().map(|f| &f.path))),
            Arc::new(Int64Array::from_iter_values(new.iter().map(size))),
        ],
    )?;
    table
        .write(&[], Some(&rows))?
        .map_err(|_| WeirError::internal("a file source's log ordinal taken twice"))?;
    Ok(Some((first, epoch)))
}

/// The bytes of the files in `log`.
pub fn log_bytes(log: &TableSnapshot) -> weir_state::StateResult<u64> {
    let mut bytes = 0;
    for batch in log.scan(Some(&[2]), false)? {
        let sizes = batch.column(0).as_primitive::<Int64Type>();
        bytes += sizes.values().iter().map(|&size| size as u64).sum::<u64>();
    }
    Ok(bytes)
}

/// Source `id`'s committed log, by ordinal.
fn committed_files(db: &Database, id: TableId) -> WeirResult<Vec<LoggedFile>> {
    let snapshot = db.committed();
    let Some(table) = snapshot.tables.get(&id) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<(i64, LoggedFile)> = Vec::with_capacity(table.num_rows());
    for batch in table.scan(None, false)? {
        let ordinals = batch.column(0).as_primitive::<Int64Type>();
        let paths = batch.column(1).as_string::<i32>();
        let sizes = batch.column(2).as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            files.push((
                ordinals.value(row),
                LoggedFile {
                    path: paths.value(row).to_owned(),
                    size: sizes.value(row) as u64,
                },
            ));
        }
    }
    files.sort_by_key(|(ordinal, _)| *ordinal);
    if files.iter().enumerate().any(|(i, (o, _))| *o != i as i64) {
        return Err(WeirError::internal("a file source's log has a gap"));
    }
    Ok(files.into_iter().map(|(_, file)| file).collect())
}
