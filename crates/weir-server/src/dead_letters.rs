//! Dead letters on the server's side: each source's folder of them in the
//! state store (`dead_letters/<source id>`), the `weir_dead_letters` system
//! table that reads them, and the task that deletes a dropped source's.

use std::collections::BTreeSet;
use std::sync::Arc;

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
use tracing::warn;
use weir_connectors::dead_letters::DeadLetterBox;
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

/// `weir_dead_letters`: every stored dead letter of the sources in the
/// catalog read, in each source's order.
pub fn table(db: &Database, snapshot: &DbSnapshot) -> Arc<dyn TableProvider> {
    let root = all(db);
    let sources = snapshot
        .catalog
        .sources
        .values()
        .filter(|def| keeps_dead_letters(def))
        .map(|def| (def.name.clone(), root.folder(def.id)))
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

/// The system table: read from the store when a query scans it.
#[derive(Debug)]
struct DeadLettersTable {
    sources: Vec<(String, DeadLetterBox)>,
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
        for (name, letters) in &self.sources {
            let stored = letters
                .list()
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            for letter in stored {
                names.push(name.clone());
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
/// one that kept them, until `shutdown`.
pub async fn run_sweeper(db: Arc<Database>, mut shutdown: watch::Receiver<bool>) {
    let root = all(&db);
    let mut committed = db.subscribe_committed();
    let mut known: Option<BTreeSet<TableId>> = None;
    loop {
        let sources: BTreeSet<TableId> = db
            .committed()
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
        tokio::select! {
            changed = committed.changed() => if changed.is_err() { break },
            _ = shutdown.changed() => break,
        }
    }
}
