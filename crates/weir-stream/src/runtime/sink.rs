//! Sinks: where a sink's output changes go, epoch by epoch, instead of
//! into an output table that reads see.
//!
//! A sink (`CREATE SINK name AS query WITH (connector = ...)`) runs as a
//! view does: the same operators, state, checkpoints and recovery. Its
//! output changes are written to its [`Sink`] as they come, and the sink
//! hears of each epoch's cut; its output table stays empty. Only the
//! coordinator holds sinks: a partitioned view's output comes back to it.
//!
//! A sink that delivers to another system exactly once ([`EpochLog`])
//! hands each epoch's changes back at the cut: they are checkpointed with
//! the epoch (as [`log_batch`]) and delivered by the server only after the
//! epoch commits, from the checkpoint, so that a crash neither loses nor
//! repeats an epoch.

use std::sync::Arc;

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::changes::as_weights;
use crate::{Changes, Result};

/// Takes a sink's output changes (see the module documentation).
pub trait Sink: Send + std::fmt::Debug {
    /// Takes output changes of the open epoch, in the order they came.
    fn write(&mut self, changes: &Changes) -> Result<()>;

    /// Epoch `epoch` is cut: every change of it has been written. Returns
    /// the epoch's changes when the sink delivers them after the epoch
    /// commits (they are checkpointed with it until delivered).
    fn cut(&mut self, epoch: u64) -> Result<Option<Changes>>;
}

/// Discards everything (Flink's and RisingWave's `blackhole`): a query
/// whose output is the whole stream runs without its output being kept.
/// What it took is counted in the runtime's view counters.
#[derive(Debug, Default)]
pub struct Blackhole;

impl Sink for Blackhole {
    fn write(&mut self, _changes: &Changes) -> Result<()> {
        Ok(())
    }

    fn cut(&mut self, _epoch: u64) -> Result<Option<Changes>> {
        Ok(None)
    }
}

/// Collects each epoch's output changes and hands them back at the
/// epoch's cut, consolidated if any removes a row, for delivery after the
/// commit.
#[derive(Debug, Default)]
pub struct EpochLog {
    open: Vec<Changes>,
}

impl Sink for EpochLog {
    fn write(&mut self, changes: &Changes) -> Result<()> {
        self.open.push(changes.clone());
        Ok(())
    }

    fn cut(&mut self, _epoch: u64) -> Result<Option<Changes>> {
        let parts = std::mem::take(&mut self.open);
        let Some(first) = parts.first() else {
            return Ok(None);
        };
        let all = Changes::concat(&first.schema(), &parts)?;
        // Only removals can cancel rows; an epoch of insertions is
        // delivered as it came (consolidating encodes every row).
        let inserts_only = parts
            .iter()
            .all(|p| p.weights.values().iter().all(|&w| w > 0));
        let all = if inserts_only {
            all
        } else {
            all.consolidate()?
        };
        Ok((!all.is_empty()).then_some(all))
    }
}

/// The column of a [`log_batch`] that holds each row's weight.
pub const WEIGHT_COLUMN: &str = "weir_weight";

/// The schema of a sink's checkpointed changes: its output columns and
/// [`WEIGHT_COLUMN`].
pub fn log_schema(output: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = output.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(WEIGHT_COLUMN, DataType::Int64, false));
    Arc::new(Schema::new(fields))
}

/// Changes as one batch of [`log_schema`], to be checkpointed.
pub fn log_batch(changes: &Changes) -> Result<RecordBatch> {
    let schema = log_schema(&changes.schema());
    let mut columns = changes.rows.columns().to_vec();
    columns.push(Arc::new(changes.weights.clone()));
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// The changes a [`log_batch`] holds.
pub fn from_log_batch(batch: &RecordBatch) -> Result<Changes> {
    let width = batch.num_columns().saturating_sub(1);
    let rows = batch.project(&(0..width).collect::<Vec<_>>())?;
    let weights: Int64Array = as_weights(batch.column(width))?;
    Changes::new(rows, weights)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, StringArray};

    fn rows(keys: &[i32], names: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(keys.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .unwrap()
    }

    #[test]
    fn an_epoch_log_hands_back_each_epochs_net_changes() {
        let mut log = EpochLog::default();
        assert!(log.cut(1).unwrap().is_none(), "nothing written");
        log.write(&Changes::inserts(rows(&[1, 2], &["a", "b"])))
            .unwrap();
        log.write(&Changes::deletes(rows(&[1], &["a"]))).unwrap();
        log.write(&Changes::inserts(rows(&[1], &["c"]))).unwrap();
        let cut = log.cut(2).unwrap().unwrap();
        let batch = log_batch(&cut).unwrap();
        assert_eq!(batch.schema().field(2).name(), WEIGHT_COLUMN);
        let back = from_log_batch(&batch).unwrap();
        let mut net: Vec<(i32, String, i64)> = (0..back.len())
            .map(|i| {
                let k = back
                    .rows
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int32Array>()
                    .unwrap();
                let n = back
                    .rows
                    .column(1)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap();
                (k.value(i), n.value(i).to_owned(), back.weights.value(i))
            })
            .collect();
        net.sort();
        assert_eq!(net, [(1, "c".into(), 1), (2, "b".into(), 1)]);
        assert!(log.cut(3).unwrap().is_none(), "the next epoch starts empty");
    }

    #[test]
    fn an_epoch_of_insertions_keeps_each_row_as_it_came() {
        let mut log = EpochLog::default();
        log.write(&Changes::inserts(rows(&[1, 1], &["a", "a"])))
            .unwrap();
        log.write(&Changes::inserts(rows(&[2], &["b"]))).unwrap();
        let cut = log.cut(1).unwrap().unwrap();
        assert_eq!(cut.len(), 3, "a row added twice stays two rows");
        assert!(cut.weights.values().iter().all(|&w| w == 1));
        assert_eq!(cut.expand().unwrap().num_rows(), 3);
    }
}
