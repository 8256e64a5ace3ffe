//! Incremental aggregation: `GROUP BY` and global aggregates.
//!
//! [`GroupedAggregate`] keeps columnar state per aggregate function and
//! handles `count`, `sum`, `avg`, `min` and `max` (with `FILTER`); any
//! other aggregate makes the whole node a [`RecomputeAggregate`], which
//! keeps the input rows by group and recomputes touched groups with
//! DataFusion. [`aggregate`] picks one. Run as several instances, a
//! columnar aggregate whose partial states merge runs in two phases
//! ([`two_phase`]): a [`PartialAggregate`] before the exchange, a
//! [`GroupedAggregate`] merging the partials after it.

mod accumulator;
mod grouped;
mod partial;
mod recompute;
mod values;

pub use grouped::GroupedAggregate;
pub use partial::PartialAggregate;
pub use recompute::RecomputeAggregate;

use datafusion::arrow::datatypes::SchemaRef;

use crate::plan::AggregateSpec;
use crate::watermark::ColumnBound;
use crate::{Operator, Result};

/// The operator for `spec` over rows of `input_schema`; `append_only`: the
/// input never deletes (so `min`/`max` keep one value per group);
/// `window`: a group column a watermark bounds (see
/// [`GroupedAggregate::with_window`]).
pub fn aggregate(
    spec: AggregateSpec,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    append_only: bool,
    window: Option<(usize, ColumnBound)>,
) -> Result<Box<dyn Operator>> {
    match GroupedAggregate::try_new(
        spec.clone(),
        input_schema.clone(),
        output_schema.clone(),
        append_only,
    )? {
        Some(grouped) => Ok(Box::new(grouped.with_window(window))),
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

/// The two phases of `spec` for an aggregate that runs as several
/// instances: the local one, which each instance runs on the rows it
/// reads, and the final one, which owns the groups' state and merges
/// their partials. `None` when the aggregate runs in one phase: it is
/// recomputed per group, or some partial state does not merge (`min`
/// and `max` of an input that deletes keep every value).
pub fn two_phase(
    spec: AggregateSpec,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    append_only: bool,
    window: Option<(usize, ColumnBound)>,
) -> Result<Option<(PartialAggregate, GroupedAggregate)>> {
    let Some(whole) = GroupedAggregate::try_new(
        spec.clone(),
        input_schema.clone(),
        output_schema,
        append_only,
    )?
    else {
        return Ok(None);
    };
    let Some(merging) = whole.merging_partials() else {
        return Ok(None);
    };
    let local = PartialAggregate::new(spec, &input_schema, append_only, merging.table_schema())?;
    Ok(Some((local, merging.with_window(window))))
}
