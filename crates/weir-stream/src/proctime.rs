//! [`ProcTime`]: `PROCTIME()` in a view, each row's processing time as a
//! last column: the `now()` of the epoch that reads it, which the runtime
//! picks when the epoch's barrier goes out (as for temporal filters; see
//! `runtime::event_clock`). Every row of an epoch gets the same time, all
//! instances of a view the same, and the times only grow, so the column
//! is its own watermark: the node's watermark is that `now()`
//! ([`crate::watermark::ColumnBound`]), and windows over it close as time
//! passes (Nexmark q12's processing-time windows).
//!
//! Rows read before the view's first barrier get the time the operator
//! started. After a restart rows read again get the time they are read
//! again: the state they went into went back to the checkpoint too. A
//! deleted row could not get the time it was inserted with, so the input
//! must be append-only.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::watermark::Watermarks;
use crate::{Changes, Operator, Result};

/// The processing time column's operator (see the module documentation).
#[derive(Debug)]
pub struct ProcTime {
    /// Its plan node, whose watermark is the epoch's `now()`.
    node: usize,
    /// `now()` in force, in Unix microseconds.
    now: i64,
    schema: SchemaRef,
}

impl ProcTime {
    /// The operator of plan node `node`, whose output (the input's
    /// columns and the time) is `schema`.
    pub fn new(node: usize, schema: SchemaRef) -> Self {
        ProcTime {
            node,
            now: crate::runtime::unix_micros(),
            schema,
        }
    }
}

impl Operator for ProcTime {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let times: ArrayRef =
            Arc::new(TimestampMicrosecondArray::from_value(self.now, input.len()));
        let mut columns = input.rows.columns().to_vec();
        columns.push(times);
        let rows = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(vec![Changes::new(rows, input.weights)?])
    }

    fn advance(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        if let Some(&now) = watermarks.get(&self.node) {
            self.now = self.now.max(now);
        }
        Ok(Vec::new())
    }

    crate::operator::stateless!();
}

impl crate::StreamPlan {
    /// The nodes that get each epoch's `now()` as their watermark:
    /// temporal filters and processing times.
    pub fn now_nodes(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| {
                matches!(
                    node.kind,
                    crate::NodeKind::TemporalFilter { .. } | crate::NodeKind::ProcTime
                )
            })
            .map(|(i, _)| i)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{
        DataType, Field, Schema, TimeUnit, TimestampMicrosecondType,
    };

    use super::*;
    use crate::testing::kv;

    #[test]
    fn rows_get_the_now_in_force() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("v", DataType::Int32, true),
            Field::new("p", DataType::Timestamp(TimeUnit::Microsecond, None), false),
        ]));
        let mut stamp = ProcTime::new(3, schema);
        let mut stamped = |now: i64| {
            stamp.advance(&Watermarks::from([(3, now)])).unwrap();
            let out = stamp.process(0, kv(&[(Some(1), Some(2), 1)])).unwrap();
            let times = out[0].rows.column(2).clone();
            times.as_primitive::<TimestampMicrosecondType>().value(0)
        };
        assert_eq!(stamped(i64::MAX - 1), i64::MAX - 1);
        // Never back.
        assert_eq!(stamped(5), i64::MAX - 1);
    }
}
