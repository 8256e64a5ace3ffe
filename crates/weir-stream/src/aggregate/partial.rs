//! [`PartialAggregate`]: the local phase of a two-phase aggregate.
//!
//! A group-by that runs as several instances sends each row to the
//! instance that owns its group. With two phases, each instance first
//! aggregates the rows its own readers produced, per epoch, into partial
//! aggregates: one row per group, shaped as the group table (key, row
//! count, each aggregate's state; [`super::GroupedAggregate`]'s
//! checkpoint rows). Only those cross the exchange, to the final phase
//! (a [`super::GroupedAggregate`] that merges partials), placed by the
//! same key hash as the rows would have been. Over 10,000 groups an
//! epoch of millions of rows crosses as at most 10,000 rows per instance.
//! Flink calls this local-global aggregation.
//!
//! The local phase keeps nothing across epochs and has no state tables:
//! it hands its partials on when the epoch ends, and early when it holds
//! [`MAX_GROUPS`] groups, so that its memory stays bounded however many
//! groups an epoch touches (early partials merge like any others).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExprRef;
use weir_state::{DeltaBatches, KeyId, KeyIndex, TableSpec};

use super::accumulator::{accumulator_for, GroupAccumulator};
use super::grouped::{accumulate, add_rows, external, group_table_rows, intern_groups};
use crate::plan::AggregateSpec;
use crate::{Changes, Exchange, Operator, Result};

/// Groups the local phase holds before it hands its partials on within
/// an epoch.
const MAX_GROUPS: usize = 1 << 16;

/// The local phase of a two-phase aggregate (see the module
/// documentation).
#[derive(Debug)]
pub struct PartialAggregate {
    spec: AggregateSpec,
    /// The shape of the partial rows: the final phase's group table.
    schema: SchemaRef,
    /// Groups held before partials go out within an epoch.
    max_groups: usize,
    /// The epoch's groups so far.
    keys: KeyIndex,
    /// Per group: the sum of its rows' weights.
    rows: Vec<i64>,
    accumulators: Vec<Box<dyn GroupAccumulator>>,
}

impl PartialAggregate {
    /// Partial aggregates of `spec` over rows of `input_schema`, as rows of
    /// `schema` (the final phase's group table, which leads with the group
    /// columns).
    pub(super) fn new(
        spec: AggregateSpec,
        input_schema: &SchemaRef,
        append_only: bool,
        schema: SchemaRef,
    ) -> Result<Self> {
        let types: Vec<DataType> = schema.fields()[..spec.group.len()]
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let accumulators = spec
            .aggregates
            .iter()
            .map(|function| {
                accumulator_for(function, input_schema, append_only)?.ok_or_else(|| {
                    DataFusionError::Internal("a two-phase aggregate without an accumulator".into())
                })
            })
            .collect::<Result<_>>()?;
        Ok(PartialAggregate {
            keys: KeyIndex::new(&types).map_err(external)?,
            spec,
            schema,
            max_groups: MAX_GROUPS,
            rows: Vec::new(),
            accumulators,
        })
    }

    /// How the partials reach the final phase: by the hash of their group
    /// columns, which are the group values the rows would have been
    /// placed by; all to one instance for a global aggregate.
    pub fn exchange(&self) -> Exchange {
        if self.spec.group.is_empty() {
            return Exchange::Single;
        }
        Exchange::Hash(
            self.spec
                .group
                .iter()
                .enumerate()
                .map(|(i, (_, name))| Arc::new(Column::new(name, i)) as PhysicalExprRef)
                .collect(),
        )
    }

    /// The same, handing partials on whenever it holds `max_groups`
    /// groups.
    #[cfg(test)]
    pub(super) fn with_max_groups(mut self, max_groups: usize) -> Self {
        self.max_groups = max_groups;
        self
    }

    /// The partials held, as inserted group rows; the phase starts over.
    fn hand_on(&mut self) -> Result<Vec<Changes>> {
        if self.keys.is_empty() {
            return Ok(Vec::new());
        }
        // Nothing is removed within an epoch, so the ids are 0..slots.
        let groups: Vec<KeyId> = (0..self.keys.slots() as KeyId).collect();
        let batch = group_table_rows(
            &self.schema,
            &self.keys,
            self.spec.group.is_empty(),
            &groups,
            &self.rows,
            &self.accumulators,
        )?;
        self.keys.clear();
        self.rows.clear();
        for &g in &groups {
            for accumulator in &mut self.accumulators {
                accumulator.reset(g);
            }
        }
        Ok(vec![Changes::inserts(batch)])
    }
}

impl Operator for PartialAggregate {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let groups = intern_groups(&self.spec, &mut self.keys, &input)?;
        let len = self.keys.slots();
        self.rows.resize(len, 0);
        add_rows(&mut self.rows, &groups, input.weights.values());
        accumulate(&self.spec, &mut self.accumulators, &input, &groups, len)?;
        if self.keys.len() >= self.max_groups {
            return self.hand_on();
        }
        Ok(Vec::new())
    }

    fn flush(&mut self) -> Result<Vec<Changes>> {
        self.hand_on()
    }

    fn state_specs(&self) -> Vec<TableSpec> {
        Vec::new()
    }

    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        Ok(Vec::new())
    }

    fn restore(&mut self, _tables: &[RecordBatch]) -> Result<()> {
        Ok(())
    }

    fn memory_size(&self) -> usize {
        self.keys.memory_size()
            + self.rows.capacity() * 8
            + self
                .accumulators
                .iter()
                .map(|a| a.memory_size())
                .sum::<usize>()
    }

    fn state_rows(&self) -> Vec<usize> {
        Vec::new()
    }
}
