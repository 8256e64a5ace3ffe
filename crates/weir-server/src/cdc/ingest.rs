//! One `postgres-cdc` table's ingest: its snapshot, then its changes from
//! the replication slot, applied to the working state with the LSN they
//! bring the table to; and the slot confirmed up to the LSN of the last
//! committed epoch.
//!
//! ```text
//!  snapshot: CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT ──▶ COPY the table at that snapshot
//!            ──▶ table rows, position = the slot's consistent point
//!  stream:   START_REPLICATION at the table's position ──▶ per Commit: changes, position = end LSN
//!            committed epoch ──▶ the slot confirmed up to the position it holds
//! ```
//!
//! The position and the rows it covers commit in one manifest, so after a
//! crash the table resumes streaming exactly after the last transaction
//! its committed rows hold: the slot, confirmed only that far, still has
//! every later one. A snapshot interrupted by a crash starts over (its
//! table is emptied in the epoch of the new snapshot's first rows).

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{RecordBatch, StringBuilder};
use futures::StreamExt;
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};

use super::apply::PendingChanges;
use super::pgoutput::{self, Message, Relation, Value};
use super::{CdcStatus, PostgresCdc};
use crate::catalog::TableDef;
use crate::copy::{self, CopyFormat};
use crate::database::Database;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::Session;

/// The most rows one snapshot chunk or one apply of changes holds.
const MAX_APPLY_ROWS: usize = 16_384;

/// How long committed transactions may wait to be applied together.
const APPLY_DELAY: Duration = Duration::from_millis(10);

/// Ingests table `def` until the task is aborted; returns an error when
/// an attempt fails, for the caller to retry.
pub(super) async fn ingest(
    db: &Arc<Database>,
    session: &Session,
    def: &TableDef,
    cdc: &PostgresCdc,
    status: &CdcStatus,
) -> WeirResult<()> {
    let position = db
        .working()
        .await
        .table_positions
        .get(&def.id)
        .copied()
        .unwrap_or(0);
    let position = if position == 0 {
        status.set_phase("snapshot");
        snapshot(db, session, def, cdc, status).await?
    } else {
        position
    };
    status.set_phase("streaming");
    stream(db, session, def, cdc, status, position).await
}

/// Creates the slot and copies the table at the slot's snapshot; returns
/// the slot's consistent point, where streaming starts.
async fn snapshot(
    db: &Arc<Database>,
    session: &Session,
    def: &TableDef,
    cdc: &PostgresCdc,
    status: &CdcStatus,
) -> WeirResult<u64> {
    let client = cdc.connect().await?;
    // A slot left by a snapshot that did not finish is this table's own
    // (CREATE TABLE refused a slot of its name).
    cdc.drop_slot(&client).await?;
    let mut replication = ReplicationClient::connect_gated(cdc.replication(0, 0))
        .await
        .map_err(replication_error)?;
    let created = replication
        .simple_query(&format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput EXPORT_SNAPSHOT",
            crate::sink::postgres::quote(&cdc.slot)
        ))
        .await
        .map_err(replication_error)?;
    let field = |i: usize| -> WeirResult<String> {
        created
            .first()
            .and_then(|row| row.get(i).cloned().flatten())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok_or_else(|| WeirError::internal("CREATE_REPLICATION_SLOT returned no row"))
    };
    let consistent_point = Lsn::parse(&field(1)?)
        .map_err(|e| WeirError::internal(format!("slot's consistent point: {e}")))?
        .as_u64();
    let snapshot_name = field(2)?;

    let upstream = |e: tokio_postgres::Error| super::options::upstream_error(&e);
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{snapshot_name}'"
        ))
        .await
        .map_err(upstream)?;
    let columns = def
        .columns
        .iter()
        .map(|c| crate::sink::postgres::quote(&c.name))
        .collect::<Vec<_>>()
        .join(", ");
    let copy_out = client
        .copy_out(&format!(
            "COPY (SELECT {columns} FROM {}) TO STDOUT",
            cdc.qualified_table()
        ))
        .await
        .map_err(upstream)?;
    futures::pin_mut!(copy_out);
    // The rows go straight into text columns, as COPY FROM gathers its
    // text, and are inserted a chunk at a time: the upstream's key makes
    // them distinct, so nothing needs netting.
    let format = CopyFormat::text();
    let all: Vec<usize> = (0..def.columns.len()).collect();
    let mut builders: Vec<StringBuilder> = all.iter().map(|_| StringBuilder::new()).collect();
    let mut buffered = 0;
    let mut first = true;
    let mut partial_line = Vec::new();
    let mut rows = 0u64;
    while let Some(chunk) = copy_out.next().await {
        let chunk = chunk.map_err(upstream)?;
        partial_line.extend_from_slice(&chunk);
        let Some(end) = partial_line.iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        let lines: Vec<u8> = partial_line.drain(..=end).collect();
        let text = std::str::from_utf8(&lines)
            .map_err(|e| WeirError::new(SqlState::CHARACTER_NOT_IN_REPERTOIRE, e.to_string()))?;
        copy::for_each_text_record(text, &format, |fields| {
            for (builder, field) in builders.iter_mut().zip(fields) {
                builder.append_option(field.as_deref());
            }
            buffered += 1;
            Ok(())
        })?;
        if buffered >= MAX_APPLY_ROWS {
            let text = copy::text_columns(def, &all, &mut builders)?;
            insert_snapshot_rows(session, db, def, text, first, 0).await?;
            rows += std::mem::take(&mut buffered) as u64;
            first = false;
            status.update(|s| s.snapshot_rows = rows);
        }
    }
    let text = copy::text_columns(def, &all, &mut builders)?;
    insert_snapshot_rows(session, db, def, text, first, consistent_point).await?;
    rows += buffered as u64;
    status.update(|s| s.snapshot_rows = rows);
    client.batch_execute("COMMIT").await.map_err(upstream)?;
    // The exported snapshot is no longer needed: the slot stays.
    replication.abort();
    Ok(consistent_point)
}

/// Inserts a chunk of the snapshot (`text`: every column as text) into
/// the working state's table, emptying the table first for the first
/// chunk (the snapshot replaces whatever an interrupted one left), and
/// records `position` (0 until the last chunk).
async fn insert_snapshot_rows(
    session: &Session,
    db: &Database,
    def: &TableDef,
    text: RecordBatch,
    first: bool,
    position: u64,
) -> WeirResult<()> {
    let rows = crate::dml::text_rows(session, def, text).await?;
    let mut working = db.working().await;
    let table = working.table_mut(def.id)?;
    if first {
        table.clear()?;
    }
    crate::dml::check_write(def, &rows, table.write(&[], Some(&rows))?)?;
    working.set_table_position(def.id, position);
    Ok(())
}

/// Streams the slot's changes from `position` on, applying each run of
/// committed transactions, and confirms the slot as epochs commit.
async fn stream(
    db: &Arc<Database>,
    session: &Session,
    def: &TableDef,
    cdc: &PostgresCdc,
    status: &CdcStatus,
    mut position: u64,
) -> WeirResult<()> {
    let confirmed = db.committed().table_position(def.id);
    let mut client = ReplicationClient::connect(cdc.replication(position, confirmed))
        .await
        .map_err(replication_error)?;
    client.wait_started().await.map_err(replication_error)?;
    status.update(|s| {
        s.applied_position = position;
        s.confirmed_position = confirmed;
        s.last_error = None;
    });
    let mut committed = db.subscribe_committed();
    let mut relation: Option<Mapping> = None;
    // Changes of the transactions committed since the last apply, and of
    // the one open (a transaction arrives whole, between its Begin and
    // Commit): applied only between transactions.
    let mut pending = PendingChanges::new(def.primary_key.clone());
    let mut in_transaction = false;
    let mut pending_position = position;
    let mut pending_transactions = 0u64;
    let mut deadline: Option<Instant> = None;
    loop {
        let due = deadline
            .filter(|_| !in_transaction)
            .map(tokio::time::Instant::from_std);
        tokio::select! {
            event = client.recv() => {
                let Some(event) = event.map_err(replication_error)? else {
                    return Err(WeirError::new(SqlState("08006"), "the replication stream ended"));
                };
                match event {
                    ReplicationEvent::Begin { .. } => in_transaction = true,
                    ReplicationEvent::XLogData { data, .. } => {
                        let message = pgoutput::decode(&data)
                            .map_err(|e| WeirError::new(SqlState::IO_ERROR, e.to_string()))?;
                        apply_message(message, def, cdc, &mut relation, &mut pending)?;
                    }
                    // Caught up: every transaction that committed before the
                    // server's WAL end was received and applied, so the
                    // table stands there (and the slot may be confirmed
                    // there once that commits: a server shutting down
                    // waits for it, as it does for a quiet table's WAL).
                    ReplicationEvent::KeepAlive { wal_end, .. }
                        if !in_transaction
                            && deadline.is_none()
                            && wal_end.as_u64() > position =>
                    {
                        position = wal_end.as_u64();
                        pending_position = position;
                        db.working().await.set_table_position(def.id, position);
                        status.update(|s| s.applied_position = position);
                    }
                    ReplicationEvent::Commit { end_lsn, .. } => {
                        in_transaction = false;
                        pending_position = end_lsn.as_u64();
                        pending_transactions += 1;
                        if pending.len() >= MAX_APPLY_ROWS {
                            deadline = Some(Instant::now());
                        } else if deadline.is_none() {
                            deadline = Some(Instant::now() + APPLY_DELAY);
                        }
                    }
                    _ => {}
                }
            }
            _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                deadline = None;
                let changes = pending.changes;
                let batch = std::mem::replace(&mut pending, PendingChanges::new(def.primary_key.clone()));
                batch.apply(session, db, def, pending_position).await?;
                position = pending_position;
                let transactions = std::mem::take(&mut pending_transactions);
                status.update(|s| {
                    s.applied_position = position;
                    s.changes += changes;
                    s.transactions += transactions;
                });
            }
            changed = committed.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let confirmed = db.committed().table_position(def.id);
                if confirmed > 0 {
                    client.update_applied_lsn(Lsn::from_u64(confirmed));
                    status.update(|s| s.confirmed_position = confirmed);
                }
            }
        }
    }
}

/// Which upstream column each of the table's columns reads.
#[derive(Debug)]
struct Mapping {
    relation: u32,
    columns: Vec<usize>,
}

impl Mapping {
    fn new(relation: &Relation, def: &TableDef) -> WeirResult<Self> {
        let columns = def
            .columns
            .iter()
            .map(|c| {
                relation
                    .columns
                    .iter()
                    .position(|u| u == &c.name)
                    .ok_or_else(|| {
                        WeirError::new(
                            SqlState::UNDEFINED_COLUMN,
                            format!(
                                "the upstream table {}.{} no longer has column \"{}\"",
                                relation.schema, relation.name, c.name
                            ),
                        )
                    })
            })
            .collect::<WeirResult<_>>()?;
        Ok(Mapping {
            relation: relation.id,
            columns,
        })
    }

    /// An upstream tuple in the table's column order.
    fn row(&self, tuple: pgoutput::Tuple) -> WeirResult<Vec<Value>> {
        self.columns
            .iter()
            .map(|&i| {
                tuple.get(i).cloned().ok_or_else(|| {
                    WeirError::new(SqlState::IO_ERROR, "a row message has too few columns")
                })
            })
            .collect()
    }
}

/// Adds a decoded message's changes of the table to `transaction`.
fn apply_message(
    message: Message,
    def: &TableDef,
    cdc: &PostgresCdc,
    relation: &mut Option<Mapping>,
    transaction: &mut PendingChanges,
) -> WeirResult<()> {
    match message {
        Message::Relation(described) => {
            if described.schema == cdc.schema && described.name == cdc.table {
                *relation = Some(Mapping::new(&described, def)?);
            }
        }
        Message::Insert { relation: id, new } => {
            if let Some(mapping) = ours(id, relation) {
                transaction.insert(mapping.row(new)?);
            }
        }
        Message::Update {
            relation: id,
            old,
            new,
        } => {
            if let Some(mapping) = ours(id, relation) {
                let old = old.map(|old| mapping.row(old)).transpose()?;
                transaction.update(old, mapping.row(new)?);
            }
        }
        Message::Delete { relation: id, old } => {
            if let Some(mapping) = ours(id, relation) {
                transaction.delete(mapping.row(old)?);
            }
        }
        Message::Truncate { relations } => {
            if relations.iter().any(|&id| ours(id, relation).is_some()) {
                transaction.truncate();
            }
        }
        Message::Other => {}
    }
    Ok(())
}

/// The mapping of relation `id`, if it is the table's.
fn ours(id: u32, relation: &Option<Mapping>) -> Option<&Mapping> {
    relation.as_ref().filter(|m| m.relation == id)
}

fn replication_error(e: pgwire_replication::PgWireError) -> WeirError {
    WeirError::new(SqlState("08006"), format!("replication: {e}"))
}
