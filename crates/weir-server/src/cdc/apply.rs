//! Upstream row changes netted by key and applied to the table in the
//! working state, with the upstream position they bring the table to.
//!
//! Changes are collected as text (as `pgoutput` and `COPY` print them),
//! keyed by the text of their key columns: the last change of a key wins.
//! Applying casts them to the table's types as `COPY` does, outside the
//! working lock, and then, under it, replaces the rows of every changed
//! key at once.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch, StringBuilder};
use datafusion::arrow::compute::{concat, interleave};
use datafusion::arrow::datatypes::{Field, Schema};

use super::pgoutput::Value;
use crate::catalog::TableDef;
use crate::database::Database;
use crate::error::{WeirError, WeirResult};
use crate::session::Session;

/// The text of a row's key columns.
type Key = Vec<Option<String>>;

/// What a key's changes come to.
#[derive(Debug)]
enum Net {
    /// The key's row is gone.
    Deleted,
    /// The key's row is `values` (in the table's column order); a value
    /// the upstream did not send (an unchanged TOASTed value) is the one
    /// of the stored row with key `fill_from`.
    Row { values: Vec<Value>, fill_from: Key },
}

/// A table's changes not yet applied.
#[derive(Debug)]
pub struct PendingChanges {
    key: Vec<usize>,
    rows: HashMap<Key, Net>,
    truncated: bool,
    /// Row changes added (inserts, updates, deletes), before netting.
    pub changes: u64,
}

impl PendingChanges {
    /// No changes yet, for a table keyed by the columns `key`.
    pub fn new(key: Vec<usize>) -> Self {
        PendingChanges {
            key,
            rows: HashMap::new(),
            truncated: false,
            changes: 0,
        }
    }

    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && !self.truncated
    }

    /// How many keys changed.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    fn key_of(&self, row: &[Value]) -> Key {
        self.key
            .iter()
            .map(|&i| match &row[i] {
                Value::Text(text) => Some(text.clone()),
                Value::Null | Value::Unchanged => None,
            })
            .collect()
    }

    /// A row inserted, or a row of the snapshot.
    pub fn insert(&mut self, row: Vec<Value>) {
        self.update(None, row);
    }

    /// A row changed to `new`; `old` holds its old key when the upstream
    /// sent it.
    pub fn update(&mut self, old: Option<Vec<Value>>, mut new: Vec<Value>) {
        self.changes += 1;
        let key = self.key_of(&new);
        let old_key = old.map_or_else(|| key.clone(), |old| self.key_of(&old));
        let mut fill_from = old_key.clone();
        if new.contains(&Value::Unchanged) {
            match self.rows.get(&old_key) {
                Some(Net::Row {
                    values,
                    fill_from: earlier,
                }) => {
                    for (value, before) in new.iter_mut().zip(values) {
                        if *value == Value::Unchanged {
                            *value = before.clone();
                        }
                    }
                    fill_from = earlier.clone();
                }
                Some(Net::Deleted) | None => {}
            }
        }
        if old_key != key {
            self.rows.insert(old_key, Net::Deleted);
        }
        self.rows.insert(
            key,
            Net::Row {
                values: new,
                fill_from,
            },
        );
    }

    /// A row deleted; `old` holds at least its key.
    pub fn delete(&mut self, old: Vec<Value>) {
        self.changes += 1;
        let key = self.key_of(&old);
        self.rows.insert(key, Net::Deleted);
    }

    /// Every row deleted (`TRUNCATE`, or a snapshot that starts over).
    pub fn truncate(&mut self) {
        self.changes += 1;
        self.rows.clear();
        self.truncated = true;
    }

    /// Applies the changes to table `def` in `db`'s working state and
    /// records that the table has reached `position` upstream; returns
    /// the number of keys changed.
    pub async fn apply(
        self,
        session: &Session,
        db: &Database,
        def: &TableDef,
        position: u64,
    ) -> WeirResult<usize> {
        if self.is_empty() {
            // Transactions that changed other tables move the position.
            db.working().await.set_table_position(def.id, position);
            return Ok(0);
        }
        let width = def.columns.len();
        let mut upserts = Vec::new();
        let mut deleted = Vec::new();
        for (key, net) in self.rows {
            match net {
                Net::Row { values, fill_from } => upserts.push((values, fill_from)),
                Net::Deleted => deleted.push(key),
            }
        }
        let count = upserts.len() + deleted.len();
        // Cast outside the lock; NULLs stand for unchanged values until
        // they are filled from the stored rows, so check NOT NULL after.
        let loose = loose_def(def);
        let text = text_batch(
            def,
            (0..width).collect(),
            upserts.iter().map(|(values, _)| text_values(values)),
        )?;
        let rows = crate::dml::text_rows(session, &loose, text).await?;
        let key_def = key_def(def);
        let deleted_keys = crate::dml::text_rows(
            session,
            &key_def,
            text_batch(def, def.primary_key.clone(), deleted.into_iter())?,
        )
        .await?;
        let unchanged: Vec<usize> = upserts
            .iter()
            .enumerate()
            .filter(|(_, (values, _))| values.contains(&Value::Unchanged))
            .map(|(row, _)| row)
            .collect();
        let fill_keys = crate::dml::text_rows(
            session,
            &key_def,
            text_batch(
                def,
                def.primary_key.clone(),
                unchanged.iter().map(|&row| upserts[row].1.clone()),
            )?,
        )
        .await?;
        let changed_keys = concat_columns(&rows.project(&def.primary_key)?, &deleted_keys)?;

        let mut working = db.working().await;
        let table = working.table_mut(def.id)?;
        if self.truncated {
            table.clear()?;
        }
        let existing: Vec<_> = table
            .lookup(&changed_keys)?
            .iter()
            .filter_map(|m| m.existing)
            .collect();
        let rows = if unchanged.is_empty() {
            rows
        } else {
            let found = table.lookup(&fill_keys)?;
            let positions = found
                .iter()
                .map(|m| {
                    m.existing.ok_or_else(|| {
                        WeirError::internal(format!(
                            "an update of table \"{}\" left a value unchanged in a row Weir does \
                             not hold",
                            def.name
                        ))
                    })
                })
                .collect::<WeirResult<Vec<_>>>()?;
            let stored = table.rows_at(&positions)?;
            fill_unchanged(&rows, &stored, &upserts, &unchanged)?
        };
        let rows = crate::dml::conform(def, &[rows])?;
        crate::dml::check_write(def, &rows, table.write(&existing, Some(&rows))?)?;
        working.set_table_position(def.id, position);
        Ok(count)
    }
}

/// `def` with every column nullable.
fn loose_def(def: &TableDef) -> TableDef {
    let mut loose = def.clone();
    for column in &mut loose.columns {
        column.nullable = true;
    }
    loose
}

/// A table of `def`'s key columns alone, keyed by all of them.
fn key_def(def: &TableDef) -> TableDef {
    let mut keys = def.clone();
    keys.columns = def
        .primary_key
        .iter()
        .map(|&i| def.columns[i].clone())
        .collect();
    keys.primary_key = (0..keys.columns.len()).collect();
    keys
}

/// A row's values as text (unchanged ones as NULL).
fn text_values(values: &[Value]) -> Vec<Option<String>> {
    values
        .iter()
        .map(|v| match v {
            Value::Text(text) => Some(text.clone()),
            Value::Null | Value::Unchanged => None,
        })
        .collect()
}

/// A batch of text columns named as `def`'s columns `columns`, from rows
/// of their values.
fn text_batch(
    def: &TableDef,
    columns: Vec<usize>,
    rows: impl Iterator<Item = Vec<Option<String>>>,
) -> WeirResult<RecordBatch> {
    let mut builders: Vec<StringBuilder> = columns.iter().map(|_| StringBuilder::new()).collect();
    for row in rows {
        for (builder, value) in builders.iter_mut().zip(row) {
            builder.append_option(value);
        }
    }
    crate::copy::text_columns(def, &columns, &mut builders)
}

/// `a`'s rows followed by `b`'s (same columns).
fn concat_columns(a: &RecordBatch, b: &RecordBatch) -> WeirResult<RecordBatch> {
    let columns = a
        .columns()
        .iter()
        .zip(b.columns())
        .map(|(x, y)| concat(&[x.as_ref(), y.as_ref()]))
        .collect::<Result<Vec<_>, _>>()?;
    let fields: Vec<Field> = a
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// `rows` with each unchanged value of the rows `unchanged` taken from
/// `stored` (the stored rows they fill from, in the same order).
fn fill_unchanged(
    rows: &RecordBatch,
    stored: &RecordBatch,
    upserts: &[(Vec<Value>, Key)],
    unchanged: &[usize],
) -> WeirResult<RecordBatch> {
    let mut columns = rows.columns().to_vec();
    for (c, column) in columns.iter_mut().enumerate() {
        let mut picks: Vec<(usize, usize)> = (0..rows.num_rows()).map(|row| (0, row)).collect();
        let mut any = false;
        for (j, &row) in unchanged.iter().enumerate() {
            if upserts[row].0[c] == Value::Unchanged {
                picks[row] = (1, j);
                any = true;
            }
        }
        if any {
            let from: [&dyn Array; 2] = [column.as_ref(), stored.column(c).as_ref()];
            *column = interleave(&from, &picks)?;
        }
    }
    Ok(RecordBatch::try_new(rows.schema(), columns)?)
}
