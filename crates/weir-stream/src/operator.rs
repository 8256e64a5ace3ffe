//! The operator interface.

use datafusion::arrow::record_batch::RecordBatch;
use weir_state::{DeltaBatches, TableSpec};

use crate::{Changes, Placement, Result};

/// An incremental operator: a state machine from input changes to output
/// changes. After every [`Operator::flush`], everything it emitted sums to
/// `query(inputs)` as a Z-set. The runtime owns scheduling; operators never
/// block or spawn.
///
/// An operator may emit as it processes (a filter, a join) or hold its
/// output back until the epoch ends (an aggregate emits each touched
/// group's old and new row once per epoch, however many rows touched it).
///
/// Durability is not optional: every operator declares its state tables
/// ([`Operator::state_specs`], possibly none) and must hand over each one's
/// delta at every checkpoint, in the same order.
pub trait Operator: Send + std::fmt::Debug {
    /// Output emitted once, when the view is created, before any input:
    /// constant rows, or the one row of a global aggregate over nothing.
    fn initial(&mut self) -> Result<Vec<Changes>> {
        Ok(Vec::new())
    }

    /// Takes `input` on `port` (0 for the first input) and returns the
    /// output changes it makes now.
    fn process(&mut self, port: usize, input: Changes) -> Result<Vec<Changes>>;

    /// The epoch's input is complete: returns the output held back.
    fn flush(&mut self) -> Result<Vec<Changes>> {
        Ok(Vec::new())
    }

    /// The epoch's input is flushed and `watermarks` are in force from
    /// now on (see [`crate::watermark`]): returns the output that makes
    /// final (windows that close). Called at every cut, after
    /// [`Operator::flush`], and once when the operator starts, after its
    /// state is restored (with the watermarks its view's watermark nodes
    /// restored; output then is dropped).
    fn advance(&mut self, _watermarks: &crate::watermark::Watermarks) -> Result<Vec<Changes>> {
        Ok(Vec::new())
    }

    /// A watermark node's (node index, watermark) in force, if any.
    fn watermark(&self) -> Option<(usize, i64)> {
        None
    }

    /// A watermark node's watermark in force, in Unix microseconds (for
    /// `weir_view_operators`).
    fn watermark_micros(&self) -> Option<i64> {
        None
    }

    /// A watermark node's (node index, greatest event time read since
    /// the last call), if it read any; taken at every cut.
    fn take_event_time(&mut self) -> Option<(usize, i64)> {
        None
    }

    /// Rows the operator dropped as late since the view was created.
    fn late_rows(&self) -> u64 {
        0
    }

    /// The shapes of the operator's durable state tables, in a fixed order.
    fn state_specs(&self) -> Vec<TableSpec>;

    /// Each state table's changes since the last checkpoint (or restore),
    /// in [`Operator::state_specs`] order; called after
    /// [`Operator::flush`].
    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>>;

    /// Loads the state tables' rows (recovery), in
    /// [`Operator::state_specs`] order.
    fn restore(&mut self, tables: &[RecordBatch]) -> Result<()>;

    /// Loads instance `instance`'s share of the state tables when the
    /// operator runs as `placement.workers()` instances partitioned by
    /// its input exchange ([`crate::StreamPlan::exchange`]): the stored
    /// rows (`tables`: every instance's) whose keys `placement` gives it,
    /// placed by the same key values the exchange hashes. An operator
    /// that runs as one instance keeps its state in partition 0, which
    /// this default gives to instance 0.
    fn restore_share(
        &mut self,
        tables: &[RecordBatch],
        instance: usize,
        placement: &Placement,
    ) -> Result<()> {
        let mine = tables
            .iter()
            .map(|stored| placement.owned_rows(instance, stored, &[]))
            .collect::<Result<Vec<_>>>()?;
        self.restore(&mine)
    }

    /// Bytes the operator holds allocated: its state structures and the
    /// output it holds back.
    fn memory_size(&self) -> usize;

    /// Rows (groups, entries) each state table holds, in
    /// [`Operator::state_specs`] order.
    fn state_rows(&self) -> Vec<usize>;
}

/// The state methods of an operator that keeps none.
macro_rules! stateless {
    () => {
        fn state_specs(&self) -> Vec<weir_state::TableSpec> {
            Vec::new()
        }

        fn checkpoint(&mut self) -> crate::Result<Vec<Option<weir_state::DeltaBatches>>> {
            Ok(Vec::new())
        }

        fn restore(
            &mut self,
            _tables: &[datafusion::arrow::record_batch::RecordBatch],
        ) -> crate::Result<()> {
            Ok(())
        }

        fn memory_size(&self) -> usize {
            0
        }

        fn state_rows(&self) -> Vec<usize> {
            Vec::new()
        }
    };
}
pub(crate) use stateless;

/// The rows of `stored` that instance `instance` owns when its operator
/// runs partitioned by `keys` (evaluated on the stored rows, whose leading
/// columns are the operator's input columns).
pub(crate) fn owned_by_keys(
    stored: &RecordBatch,
    keys: &[datafusion::physical_expr::PhysicalExprRef],
    instance: usize,
    placement: &Placement,
) -> Result<RecordBatch> {
    let keys = keys
        .iter()
        .map(|e| e.evaluate(stored)?.into_array(stored.num_rows()))
        .collect::<Result<Vec<_>>>()?;
    placement.owned_rows(instance, stored, &keys)
}

/// Fails unless `tables` holds one batch per declared state table.
pub(crate) fn expect_tables(tables: &[RecordBatch], declared: usize) -> Result<()> {
    if tables.len() != declared {
        return Err(datafusion::error::DataFusionError::Internal(format!(
            "{} state tables restored into an operator that declares {declared}",
            tables.len()
        )));
    }
    Ok(())
}
