//! `SUBSCRIBE [TO] relation [WITH (PROGRESS, SNAPSHOT = bool)] [AS OF
//! epoch]`: a changefeed of a table or materialized view, as Materialize
//! spells it.
//!
//! A subscription starts at a committed epoch `e` (the newest, or `AS
//! OF e`) with the relation's rows at `e` (weight +1 each, or a counted
//! view row's count; left out with `SNAPSHOT = false`), then sends each
//! later committed epoch's changes: rows with a signed weight, tagged
//! with their epoch. With `PROGRESS`, a row whose `weir_progressed` is
//! true closes each epoch: every change of that epoch and earlier has
//! been sent. A consumer that keeps the last closed epoch resumes with
//! `AS OF that epoch WITH (SNAPSHOT = false)` and sees every later change
//! once.
//!
//! The changes come from the checkpoints: each epoch's delta of the
//! relation's state table, read from the store as the epoch's manifest
//! names it (`changes.rs` turns upserts and deletes into signed rows
//! against the relation as of the last epoch sent: a table over the
//! committed snapshot it started from, sharing that snapshot's chunks,
//! which indexes only the rows later epochs replace). So `AS OF`
//! reaches back as far as the store keeps manifests
//! (`--retained-manifests`), across restarts too. A task per subscription
//! follows the commits as they happen, whether or not the client reads,
//! and buffers what the client has not read yet, up to the session's
//! query memory limit (54000 beyond it).

mod changes;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, BooleanArray, Int64Array};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::Ident;
use futures::StreamExt;
use tokio::sync::mpsc;
use weir_sql::{Subscribe, WeirStatement};
use weir_state::{Manifest, SliceReader, StateTable, TableId, TableSpec};

use crate::catalog::{relation_name, undefined_relation};
use crate::database::Database;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::rows::RowStream;
use crate::session::Session;
use changes::{Replica, SignedRows};

/// The column holding each row's epoch.
const EPOCH_COLUMN: &str = "weir_epoch";
/// The column that marks progress rows (`WITH (PROGRESS)` only).
const PROGRESSED_COLUMN: &str = "weir_progressed";
/// The column holding each row's signed weight.
const DIFF_COLUMN: &str = "weir_diff";

/// A subscription ready to start: what it reads and the rows it sends.
pub struct Plan {
    /// The rows' schema: epoch, progress mark, weight, then the relation's
    /// columns.
    pub schema: SchemaRef,
    /// The relation's columns as a `SELECT *` of it sends them.
    columns: SchemaRef,
    name: String,
    id: TableId,
    spec: TableSpec,
    counted: bool,
    subscribe: Subscribe,
    /// Bytes of unread rows the subscription may buffer.
    budget: usize,
}

/// Works out what `subscribe` reads and the schema of its rows.
pub async fn plan(session: &mut Session, subscribe: &Subscribe) -> WeirResult<Plan> {
    let name = relation_name(&subscribe.relation)?;
    let catalog = session.db.committed().catalog.clone();
    if catalog.views.contains_key(&name) || catalog.sources.contains_key(&name) {
        return Err(WeirError::new(
            SqlState::WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not a table or materialized view"),
        )
        .with_hint("SUBSCRIBE follows tables and materialized views: the relations whose changes Weir keeps."));
    }
    // The columns as a SELECT sends them (display scales, the session's
    // time zone); this also refuses sinks and failed views as reads do.
    let select = format!("SELECT * FROM {}", Ident::with_quote('"', &name));
    let Some(WeirStatement::Sql(query)) = weir_sql::parse(&select)?.pop() else {
        return Err(WeirError::internal("SUBSCRIBE's SELECT did not parse"));
    };
    let (columns, _) = session.query(&query, &None).await?;
    let (id, spec, counted) = if let Some(view) = catalog.materialized_views.get(&name) {
        let spec = view.spec();
        let counted = weir_stream::runtime::is_counted(&spec);
        (view.id, spec, counted)
    } else if let Some(table) = catalog.tables.get(&name) {
        (table.id, table.spec(), false)
    } else {
        return Err(undefined_relation(&name));
    };
    let mut fields = vec![Field::new(EPOCH_COLUMN, DataType::Int64, false)];
    if subscribe.progress {
        fields.push(Field::new(PROGRESSED_COLUMN, DataType::Boolean, false));
    }
    fields.push(Field::new(DIFF_COLUMN, DataType::Int64, true));
    fields.extend(
        columns
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true)),
    );
    let budget = session.query_memory_limit();
    Ok(Plan {
        schema: Arc::new(Schema::new(fields)),
        columns,
        name,
        id,
        spec,
        counted,
        subscribe: subscribe.clone(),
        budget,
    })
}

/// Starts `subscribe`: the schema of its rows, and the rows as epochs
/// commit.
pub async fn open(
    session: &mut Session,
    subscribe: &Subscribe,
) -> WeirResult<(SchemaRef, RowStream)> {
    let plan = plan(session, subscribe).await?;
    let schema = plan.schema.clone();
    Ok((schema, plan.start(session.db.clone()).await?))
}

impl Plan {
    /// Starts following the relation: its rows, produced as epochs commit.
    async fn start(self, db: Arc<Database>) -> WeirResult<RowStream> {
        let reader = db.slice_reader().clone();
        let committed = db.committed();
        let (start, table) = match self.subscribe.as_of {
            None => {
                let table = committed
                    .tables
                    .get(&self.id)
                    .ok_or_else(|| undefined_relation(&self.name))?;
                // Over the committed snapshot: its chunks (and their key
                // orders) are shared, not copied or indexed again.
                (committed.epoch, StateTable::over_snapshot(table)?)
            }
            Some(epoch) if epoch > committed.epoch => {
                return Err(WeirError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!(
                        "epoch {epoch} is not committed yet: the newest committed epoch is {}",
                        committed.epoch
                    ),
                ))
            }
            Some(epoch) => {
                let manifest = retained(&db, &reader, epoch).await?;
                let files = manifest.tables.get(&self.id).ok_or_else(|| {
                    WeirError::new(
                        SqlState::UNDEFINED_TABLE,
                        format!("relation \"{}\" did not exist at epoch {epoch}", self.name),
                    )
                })?;
                (epoch, reader.load_table(self.spec.clone(), files).await?)
            }
        };
        let (sender, mut receiver) = mpsc::unbounded_channel();
        let buffered = Arc::new(AtomicUsize::new(0));
        let out = Out {
            sender,
            buffered: buffered.clone(),
            budget: self.budget,
            schema: self.schema.clone(),
            columns: self.columns.clone(),
            progress: self.subscribe.progress,
            open: Vec::new(),
        };
        let mut follow = Follow {
            db,
            reader,
            name: self.name,
            id: self.id,
            replica: Replica::new(table, self.counted)?,
            out,
        };
        let snapshot = self.subscribe.snapshot;
        tokio::spawn(async move {
            if let Err(error) = follow.run(start, snapshot).await {
                follow.out.fail(error);
            }
        });
        let rows = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).map(
            move |batch: WeirResult<RecordBatch>| {
                if let Ok(batch) = &batch {
                    buffered.fetch_sub(batch.get_array_memory_size(), Ordering::Relaxed);
                }
                batch
            },
        );
        Ok(rows.boxed())
    }
}

/// The manifest of committed epoch `epoch`, while the store keeps it.
async fn retained(db: &Database, reader: &SliceReader, epoch: u64) -> WeirResult<Arc<Manifest>> {
    if let Some(manifest) = db.last_manifest().filter(|m| m.epoch == epoch) {
        return Ok(manifest);
    }
    match reader.manifest(epoch).await? {
        Some(manifest) => Ok(Arc::new(manifest)),
        None => Err(WeirError::new(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("epoch {epoch} is no longer retained"),
        )
        .with_hint(format!(
            "The store keeps the newest {} committed epochs (--retained-manifests) and those of the last {} s (--retain-history); SHOW oldest_retained_epoch names the oldest kept.",
            db.store_config().retained_manifests,
            db.store_config().retain_history.as_secs(),
        ))),
    }
}

/// The task that follows one subscription's relation.
struct Follow {
    db: Arc<Database>,
    reader: SliceReader,
    name: String,
    id: TableId,
    replica: Replica,
    out: Out,
}

impl Follow {
    /// Sends the start (snapshot, progress), then each committed epoch's
    /// changes, until the client goes away or the relation is dropped.
    async fn run(&mut self, start: u64, snapshot: bool) -> WeirResult<()> {
        if snapshot {
            let rows = self.replica.snapshot()?;
            if rows.rows.num_rows() > 0 {
                self.out.changes(start, rows)?;
            }
        }
        self.out.progress(start)?;
        let mut committed = self.db.subscribe_committed();
        let mut next = start + 1;
        loop {
            let newest = *committed.borrow_and_update();
            while next <= newest {
                self.replay(next).await?;
                self.out.progress(next)?;
                next += 1;
            }
            tokio::select! {
                changed = committed.changed() => if changed.is_err() { return Ok(()) },
                _ = self.out.sender.closed() => return Ok(()),
            }
        }
    }

    /// Sends what epoch `epoch` changed, from its manifest's deltas.
    async fn replay(&mut self, epoch: u64) -> WeirResult<()> {
        let manifest = retained(&self.db, &self.reader, epoch).await?;
        let Some(files) = manifest.tables.get(&self.id) else {
            return Err(WeirError::new(
                SqlState::UNDEFINED_TABLE,
                format!("relation \"{}\" was dropped at epoch {epoch}", self.name),
            ));
        };
        let (schema, key_schema) = (
            self.replica.spec().schema.clone(),
            self.replica.spec().key_schema(),
        );
        for delta in files.deltas.iter().filter(|d| d.epoch == epoch) {
            let upserts = self
                .reader
                .decode_slice(delta.upserts.as_ref(), &schema)
                .await?;
            let deletes = self
                .reader
                .decode_slice(delta.deletes.as_ref(), &key_schema)
                .await?;
            if let Some(rows) = self.replica.apply(upserts.as_ref(), deletes.as_ref())? {
                self.out.changes(epoch, rows)?;
            }
        }
        Ok(())
    }
}

/// Where a subscription's rows go: a channel the client's stream reads,
/// with the bytes it holds counted against a budget. Each epoch's rows
/// (and its progress row) go as one batch, so a reader that takes the
/// rows that are there (a cursor's `FETCH`) never takes part of an epoch.
struct Out {
    sender: mpsc::UnboundedSender<WeirResult<RecordBatch>>,
    buffered: Arc<AtomicUsize>,
    budget: usize,
    schema: SchemaRef,
    columns: SchemaRef,
    progress: bool,
    /// The open epoch's rows, sent when it closes.
    open: Vec<RecordBatch>,
}

impl Out {
    /// Sends `rows`, changed in `epoch`.
    fn changes(&mut self, epoch: u64, rows: SignedRows) -> WeirResult<()> {
        let count = rows.rows.num_rows();
        let mut columns: Vec<ArrayRef> =
            vec![Arc::new(Int64Array::from_value(epoch as i64, count))];
        if self.progress {
            columns.push(Arc::new(BooleanArray::from(vec![false; count])));
        }
        columns.push(Arc::new(rows.weights));
        for (column, field) in rows.rows.columns().iter().zip(self.columns.fields()) {
            columns.push(if column.data_type() == field.data_type() {
                column.clone()
            } else {
                cast(column, field.data_type())?
            });
        }
        self.open
            .push(RecordBatch::try_new(self.schema.clone(), columns)?);
        Ok(())
    }

    /// Closes `epoch`: sends its rows, with the row that marks it closed
    /// if the subscription asked for progress.
    fn progress(&mut self, epoch: u64) -> WeirResult<()> {
        if self.progress {
            let closed = self.progress_row(epoch)?;
            self.open.push(closed);
        }
        if self.open.is_empty() {
            return Ok(());
        }
        let epoch_rows = concat_batches(&self.schema, &self.open)?;
        self.open.clear();
        self.send(epoch_rows)
    }

    /// The row that marks `epoch` closed.
    fn progress_row(&self, epoch: u64) -> WeirResult<RecordBatch> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![epoch as i64])),
            Arc::new(BooleanArray::from(vec![true])),
        ];
        columns.extend(
            self.schema.fields()[2..]
                .iter()
                .map(|f| new_null_array(f.data_type(), 1)),
        );
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    fn send(&self, batch: RecordBatch) -> WeirResult<()> {
        let bytes = batch.get_array_memory_size();
        let held = self.buffered.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if held > self.budget {
            return Err(WeirError::new(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "the subscription's unread changes are larger than the query memory limit ({} bytes)",
                    self.budget
                ),
            )
            .with_hint("Read the subscription faster, or subscribe again AS OF the last epoch read."));
        }
        // A closed channel: the client went away; the task ends at its
        // next wait.
        let _ = self.sender.send(Ok(batch));
        Ok(())
    }

    /// Ends the rows with `error`.
    fn fail(&self, error: WeirError) {
        let _ = self.sender.send(Err(error));
    }
}
