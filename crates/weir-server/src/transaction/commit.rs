//! Committing a block: checking its changes against the shared tables
//! and turning them into one write per table.

use datafusion::arrow::array::{BooleanArray, RecordBatch};
use datafusion::arrow::compute::kernels::boolean::and;
use datafusion::arrow::compute::kernels::cmp::not_distinct;
use weir_state::{DeltaBatches, RowPosition, StateTable};

use crate::error::{SqlState, WeirError, WeirResult};

/// What committing `delta` (a private table's change since `base`) does
/// to `current`, the shared working table: the positions of the rows it
/// deletes and the visible rows it inserts. Fails with 40001 where a row
/// the block changed is no longer as `base` had it, and with 23505 where
/// the block inserted a key someone else inserted meanwhile.
pub(super) fn plan_write(
    name: &str,
    base: &StateTable,
    current: &StateTable,
    delta: &DeltaBatches,
) -> WeirResult<(Vec<RowPosition>, Option<RecordBatch>)> {
    let spec = base.spec();
    let mut deletes = Vec::new();
    if let Some(keys) = &delta.deletes {
        deletes.extend(changed_rows(name, base, current, keys, false)?);
    }
    let inserts = match &delta.upserts {
        Some(rows) => {
            let keys = rows.project(&spec.key)?;
            deletes.extend(changed_rows(
                name,
                base,
                current,
                &keys,
                spec.hidden_row_id,
            )?);
            Some(spec.visible_columns(rows)?)
        }
        None => None,
    };
    Ok((deletes, inserts))
}

/// The positions in `current` of the rows with `keys` that the block
/// replaces or deletes, after checking each is as the block's snapshot
/// (`base`) had it. A key absent from `base` is a new row: with `fresh_ids`
/// (a hidden row id the block handed out itself) it is not looked up in
/// `current` at all; otherwise it must be absent there too.
fn changed_rows(
    name: &str,
    base: &StateTable,
    current: &StateTable,
    keys: &RecordBatch,
    fresh_ids: bool,
) -> WeirResult<Vec<RowPosition>> {
    let before = base.lookup(keys)?;
    let now = current.lookup(keys)?;
    let mut old = Vec::new();
    let mut kept_base = Vec::new();
    let mut kept_now = Vec::new();
    for (b, n) in before.iter().zip(&now) {
        match (b.existing, n.existing) {
            (None, _) if fresh_ids => {}
            (None, None) => {}
            (None, Some(_)) => {
                return Err(WeirError::new(
                    SqlState::UNIQUE_VIOLATION,
                    format!(
                        "duplicate key value violates unique constraint \"{name}_pkey\": \
                         a concurrent transaction inserted the same key"
                    ),
                ));
            }
            (Some(_), None) => return Err(concurrent_update(name)),
            (Some(b), Some(n)) => {
                kept_base.push(b);
                kept_now.push(n);
                old.push(n);
            }
        }
    }
    if !kept_now.is_empty() && !same_rows(&base.rows_at(&kept_base)?, &current.rows_at(&kept_now)?)?
    {
        return Err(concurrent_update(name));
    }
    Ok(old)
}

/// Whether two batches of the same schema hold the same rows in the same
/// order (NULL equal to NULL).
fn same_rows(a: &RecordBatch, b: &RecordBatch) -> WeirResult<bool> {
    let mut all: Option<BooleanArray> = None;
    for (x, y) in a.columns().iter().zip(b.columns()) {
        let equal = not_distinct(x, y)?;
        all = Some(match all {
            Some(so_far) => and(&so_far, &equal)?,
            None => equal,
        });
    }
    Ok(all.is_none_or(|equal| equal.true_count() == equal.len()))
}

fn concurrent_update(name: &str) -> WeirError {
    WeirError::new(
        SqlState::SERIALIZATION_FAILURE,
        format!("could not serialize access due to concurrent update of \"{name}\""),
    )
    .with_hint("The transaction might succeed if retried.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use weir_state::TableSpec;

    fn rows(ids: &[i64], names: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .unwrap()
    }

    fn keyed(ids: &[i64], names: &[&str]) -> StateTable {
        let batch = rows(ids, names);
        let spec = TableSpec::with_primary_key(batch.schema(), vec![0]);
        let mut table = StateTable::new(spec).unwrap();
        table.write(&[], Some(&batch)).unwrap().unwrap();
        table.take_delta().unwrap();
        table
    }

    #[test]
    fn a_row_changed_by_someone_else_fails_the_commit() {
        let base = keyed(&[1, 2], &["a", "b"]);
        let mut private = StateTable::from_snapshot(&base.snapshot()).unwrap();
        let at = private
            .lookup(&rows(&[1], &["a"]).project(&[0]).unwrap())
            .unwrap();
        private
            .write(&[at[0].existing.unwrap()], Some(&rows(&[1], &["mine"])))
            .unwrap()
            .unwrap();
        let delta = private.take_delta().unwrap().unwrap();

        let untouched = keyed(&[1, 2], &["a", "b"]);
        let (deletes, inserts) = plan_write("t", &base, &untouched, &delta).unwrap();
        assert_eq!(deletes.len(), 1);
        assert_eq!(inserts.unwrap().num_rows(), 1);

        let changed = keyed(&[1, 2], &["theirs", "b"]);
        let error = plan_write("t", &base, &changed, &delta).unwrap_err();
        assert_eq!(error.code, SqlState::SERIALIZATION_FAILURE);

        let deleted = keyed(&[2], &["b"]);
        let error = plan_write("t", &base, &deleted, &delta).unwrap_err();
        assert_eq!(error.code, SqlState::SERIALIZATION_FAILURE);
    }

    #[test]
    fn a_key_inserted_by_both_is_a_unique_violation() {
        let base = keyed(&[1], &["a"]);
        let mut private = StateTable::from_snapshot(&base.snapshot()).unwrap();
        private
            .write(&[], Some(&rows(&[7], &["mine"])))
            .unwrap()
            .unwrap();
        let delta = private.take_delta().unwrap().unwrap();
        let theirs = keyed(&[1, 7], &["a", "theirs"]);
        let error = plan_write("t", &base, &theirs, &delta).unwrap_err();
        assert_eq!(error.code, SqlState::UNIQUE_VIOLATION);
        let mine_only = keyed(&[1], &["a"]);
        assert!(plan_write("t", &base, &mine_only, &delta).is_ok());
    }

    #[test]
    fn hidden_row_ids_handed_out_in_the_block_are_new_rows() {
        let batch = rows(&[1, 2], &["a", "b"]);
        let spec = TableSpec::with_row_id(batch.schema());
        let mut shared = StateTable::new(spec).unwrap();
        shared.write(&[], Some(&batch)).unwrap().unwrap();
        shared.take_delta().unwrap();
        let base = shared.clone();
        let mut private = StateTable::from_snapshot(&base.snapshot()).unwrap();
        assert_eq!(private.next_row_id(), 2);
        private
            .write(&[], Some(&rows(&[3], &["mine"])))
            .unwrap()
            .unwrap();
        let delta = private.take_delta().unwrap().unwrap();
        // Someone else took row id 2 meanwhile: the block's row is still new.
        shared
            .write(&[], Some(&rows(&[4], &["theirs"])))
            .unwrap()
            .unwrap();
        let (deletes, inserts) = plan_write("t", &base, &shared, &delta).unwrap();
        assert!(deletes.is_empty());
        let inserts = inserts.unwrap();
        assert_eq!(inserts.num_columns(), 2, "visible columns only");
        shared.write(&deletes, Some(&inserts)).unwrap().unwrap();
        assert_eq!(shared.len(), 4);
    }
}
