//! Dead letters on the server's side: each source's folder of them in the
//! state store (`dead_letters/<source id>`), the `weir_dead_letters` system
//! table that reads them, and the task that deletes a dropped source's and
//! those older than the source's `dead_letter.retention`.
//!
//! A reader stores a letter before the epoch that reads past its record
//! commits. The table shows only the letters of records that the read's
//! committed epoch has read past (by some view's split positions), so a
//! letter appears with the epoch whose rows it was left out of, and one
//! stored in an epoch that a crash lost is not shown (the record is read
//! again and the letter stored again). A source that no view reads any
//! more shows every letter it kept.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BinaryArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};
use weir_connectors::dead_letters::{retention, DeadLetter, DeadLetterBox};
use weir_connectors::records::BadRecords;
use weir_state::TableId;

use crate::catalog::SourceDef;
use crate::database::{Database, DbSnapshot};

/// The folder of every source's dead letters.
pub fn all(db: &Database) -> DeadLetterBox {
    let (store, folder) = db.slice_reader().dead_letters();
    DeadLetterBox::new(store, folder)
}

/// Whether `def` keeps its bad records as dead letters.
fn keeps_dead_letters(def: &SourceDef) -> bool {
    def.options
        .get("bad_records")
        .and_then(|mode| BadRecords::parse(mode).ok())
        == Some(BadRecords::DeadLetter)
}

/// The split positions of every view that reads source `id` in `snapshot`.
fn committed_positions(snapshot: &DbSnapshot, id: TableId) -> Vec<Vec<u64>> {
    snapshot
        .catalog
        .view_sources()
        .into_iter()
        .filter(|(_, source, _)| source.id == id)
        .map(|(_, _, key)| snapshot.offsets.get(&key).cloned().unwrap_or_default())
        .collect()
}

/// Whether a view of `positions` (each view's over a source) has read past
/// `letter`'s record; every letter counts as read when no view reads it.
fn committed(letter: &DeadLetter, positions: &[Vec<u64>]) -> bool {
    positions.is_empty() || positions.iter().any(|view| letter.read_by(view))
}

/// `weir_dead_letters`: the stored dead letters of the sources in the
/// catalog read whose records its epoch has read past, in each source's
/// order.
pub fn table(db: &Database, snapshot: &DbSnapshot) -> Arc<dyn TableProvider> {
    let root = all(db);
    let sources = snapshot
        .catalog
        .sources
        .values()
        .filter(|def| keeps_dead_letters(def))
        .map(|def| SourceLetters {
            name: def.name.clone(),
            letters: root.folder(def.id),
            positions: committed_positions(snapshot, def.id),
        })
        .collect();
    Arc::new(DeadLettersTable { sources })
}

/// The schema of `weir_dead_letters`.
fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("source", DataType::Utf8, false),
        Field::new("place", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, false),
        Field::new("value", DataType::Binary, false),
    ]))
}

/// One source's part of the system table.
#[derive(Debug)]
struct SourceLetters {
    name: String,
    letters: DeadLetterBox,
    /// The split positions of each view that reads it, at the read's epoch.
    positions: Vec<Vec<u64>>,
}

/// The system table: read from the store when a query scans it.
#[derive(Debug)]
struct DeadLettersTable {
    sources: Vec<SourceLetters>,
}

#[async_trait]
impl TableProvider for DeadLettersTable {
    fn schema(&self) -> SchemaRef {
        schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (mut names, mut places, mut errors, mut values) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for source in &self.sources {
            let stored = source
                .letters
                .list()
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            for letter in stored {
                if !committed(&letter, &source.positions) {
                    continue;
                }
                names.push(source.name.clone());
                places.push(letter.place);
                errors.push(letter.error);
                values.push(letter.value);
            }
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(places)),
            Arc::new(StringArray::from(errors)),
            Arc::new(BinaryArray::from_iter_values(values)),
        ];
        let batch = RecordBatch::try_new(schema(), columns)?;
        MemTable::try_new(schema(), vec![vec![batch]])?
            .scan(state, projection, filters, limit)
            .await
    }
}

/// Deletes the dead letters of sources that no longer exist: at start
/// (a source dropped just before a crash), then whenever a commit drops
/// one that kept them, until `shutdown`; and, every so often, the letters
/// older than their source's `dead_letter.retention`.
pub async fn run_sweeper(db: Arc<Database>, mut shutdown: watch::Receiver<bool>) {
    let root = all(&db);
    let mut committed = db.subscribe_committed();
    let mut known: Option<BTreeSet<TableId>> = None;
    let mut last_expiry = Instant::now();
    loop {
        let snapshot = db.committed();
        let sources: BTreeSet<TableId> = snapshot
            .catalog
            .sources
            .values()
            .filter(|def| keeps_dead_letters(def))
            .map(|def| def.id)
            .collect();
        let gone: Vec<TableId> = match &known {
            Some(known) => known.difference(&sources).copied().collect(),
            None => match root.folders().await {
                Ok(folders) => folders
                    .iter()
                    .filter_map(|name| name.parse().ok())
                    .filter(|id| !sources.contains(id))
                    .collect(),
                Err(e) => {
                    warn!(error = %e, "cannot list dead letters");
                    Vec::new()
                }
            },
        };
        for id in gone {
            if let Err(e) = root.folder(id).clear().await {
                warn!(source = id, error = %e, "cannot delete a dropped source's dead letters");
            }
        }
        known = Some(sources);
        // A source created with a short retention brings the next check
        // forward.
        let retained = retentions(&snapshot);
        let mut next_expiry = last_expiry + expiry_interval(&retained);
        if Instant::now() >= next_expiry {
            expire(&root, &snapshot, &retained).await;
            last_expiry = Instant::now();
            next_expiry = last_expiry + expiry_interval(&retained);
        }
        tokio::select! {
            changed = committed.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep_until(next_expiry) => {}
            _ = shutdown.changed() => break,
        }
    }
}

/// Every source of `snapshot` that keeps dead letters only so long, with
/// how long.
fn retentions(snapshot: &DbSnapshot) -> Vec<(TableId, Duration)> {
    snapshot
        .catalog
        .sources
        .values()
        .filter(|def| keeps_dead_letters(def))
        .filter_map(|def| Some((def.id, retention(&def.options).ok()??)))
        .collect()
}

/// How often letters are checked for their age: a quarter of the shortest
/// retention, from a second to five minutes.
fn expiry_interval(retained: &[(TableId, Duration)]) -> Duration {
    retained
        .iter()
        .map(|(_, retention)| *retention / 4)
        .min()
        .unwrap_or(MAX_EXPIRY_INTERVAL)
        .clamp(Duration::from_secs(1), MAX_EXPIRY_INTERVAL)
}

/// The longest wait between two checks of letters' age.
const MAX_EXPIRY_INTERVAL: Duration = Duration::from_secs(300);

/// Deletes the letters older than their source's retention whose records
/// `snapshot`'s epoch has read past.
async fn expire(root: &DeadLetterBox, snapshot: &DbSnapshot, retained: &[(TableId, Duration)]) {
    for &(id, retention) in retained {
        let positions = committed_positions(snapshot, id);
        let expired = root
            .folder(id)
            .expire(retention, SystemTime::now(), |letter| {
                committed(letter, &positions)
            })
            .await;
        match expired {
            Ok(0) => {}
            Ok(count) => info!(
                source = id,
                count, "dead letters past their retention deleted"
            ),
            Err(e) => warn!(source = id, error = %e, "cannot delete old dead letters"),
        }
    }
}
