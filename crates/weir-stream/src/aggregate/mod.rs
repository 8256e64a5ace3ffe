//! Incremental aggregation: `GROUP BY` and global aggregates.
//!
//! [`GroupedAggregate`] keeps columnar state per aggregate function and
//! handles `count`, `sum`, `avg`, `min` and `max` (with `FILTER`); any
//! other aggregate makes the whole node a [`RecomputeAggregate`], which
//! keeps the input rows by group and recomputes touched groups with
//! DataFusion. [`aggregate`] picks one.

mod accumulator;
mod grouped;
mod recompute;

pub use grouped::GroupedAggregate;
pub use recompute::RecomputeAggregate;

use datafusion::arrow::datatypes::SchemaRef;

use crate::plan::AggregateSpec;
use crate::{Operator, Result};

/// The operator for `spec` over rows of `input_schema`; `append_only`: the
/// input never deletes (so `min`/`max` keep one value per group).
pub fn aggregate(
    spec: AggregateSpec,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    append_only: bool,
) -> Result<Box<dyn Operator>> {
    match GroupedAggregate::try_new(
        spec.clone(),
        input_schema.clone(),
        output_schema.clone(),
        append_only,
    )? {
        Some(grouped) => Ok(Box::new(grouped)),
        None => Ok(Box::new(RecomputeAggregate::new(
            spec,
            input_schema,
            output_schema,
            append_only,
        )?)),
    }
}

/// Whether `spec` over `input_schema` gets columnar state.
pub fn is_columnar(spec: &AggregateSpec, input_schema: &SchemaRef, append_only: bool) -> bool {
    spec.aggregates.iter().all(|function| {
        accumulator::accumulator_for(function, input_schema, append_only).is_ok_and(|a| a.is_some())
    })
}
