//! Index lookup joins: a hash join one of whose inputs is the scan of a
//! relation with an order on its join keys (a primary key, a view's key,
//! an index) reads, of that relation, only the rows whose keys the other
//! input holds. The other input (the outer one) runs first; its distinct
//! key values become the probes of a lookup (`lookup.rs`) in the ordered
//! relation (the inner one), and the join then runs on the rows found, as
//! DataFusion planned it. So `SELECT .. FROM orders o JOIN by_customer b
//! ON o.customer = b.customer WHERE o.id = 7` reads one row of each.
//!
//! Only an input whose unmatched rows the join drops can be narrowed (either
//! input of an inner join, the right of a left join, the right of a left
//! semi or anti join, and their mirror images), and only when NULL keys
//! match nothing. With more than [`MAX_PROBES`] distinct outer keys, or no
//! fewer than the inner relation's rows, the inner input is read whole.
//!
//! The physical optimizer rule [`LookupJoins`] wraps such joins in a
//! [`LookupJoinExec`], which `EXPLAIN` shows above the join.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, NullEquality, Result, Statistics};
use datafusion::config::ConfigOptions;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::{CastExpr, Column};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::OnceCell;

use crate::lookup::{stored_value_array, HeldRows, Lookup, LookupExec, Order, MAX_PROBES};
use crate::provider::SnapshotTable;

/// The whole scan of a relation that has orders, kept with the relation so
/// that a [`LookupJoinExec`] can read fewer of its rows instead.
#[derive(Debug, Clone)]
pub struct SnapshotScanExec {
    table: Arc<SnapshotTable>,
    projection: Option<Vec<usize>>,
    held: HeldRows,
}

impl SnapshotScanExec {
    /// The rows `batches` (of `schema`) of `table`'s columns `projection`.
    pub fn new(
        table: Arc<SnapshotTable>,
        projection: Option<Vec<usize>>,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Self {
        SnapshotScanExec {
            table,
            projection,
            held: HeldRows::new(schema, batches),
        }
    }

    fn rows(&self) -> usize {
        self.held.rows()
    }

    /// The relation's column behind output column `index`.
    fn relation_column(&self, index: usize) -> usize {
        match &self.projection {
            Some(p) => p[index],
            None => index,
        }
    }
}

impl DisplayAs for SnapshotScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SnapshotScanExec: {} rows={}",
            self.table.relation(),
            self.rows()
        )
    }
}

impl ExecutionPlan for SnapshotScanExec {
    fn name(&self) -> &str {
        "SnapshotScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.held.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn partition_statistics(&self, _partition: Option<usize>) -> Result<Arc<Statistics>> {
        self.held.statistics()
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.held.stream()
    }
}

/// The physical optimizer rule that turns hash joins over an ordered
/// relation's scan into [`LookupJoinExec`]s. It runs after DataFusion's
/// own rules, so the plan's partitioning is final.
#[derive(Debug, Default)]
pub struct LookupJoins;

impl PhysicalOptimizerRule for LookupJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            Ok(match LookupJoinExec::recognise(&node) {
                Some(join) => Transformed::yes(Arc::new(join) as Arc<dyn ExecutionPlan>),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lookup_joins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The way from a join's input down to the scan a lookup can narrow:
/// nodes with one child each, ending at the scan.
#[derive(Debug, Clone)]
struct InnerPath {
    /// The join's input and the nodes under it, the scan excluded.
    nodes: Vec<Arc<dyn ExecutionPlan>>,
    scan: Arc<SnapshotScanExec>,
}

impl InnerPath {
    /// The path from `plan` to a [`SnapshotScanExec`] through nodes that
    /// pass columns through, with the columns `keys` (of `plan`'s output)
    /// mapped to the relation's columns; `None` where a key is computed.
    fn find(plan: &Arc<dyn ExecutionPlan>, keys: &[usize]) -> Option<(InnerPath, Vec<usize>)> {
        let mut nodes = Vec::new();
        let mut node = plan.clone();
        let mut keys = keys.to_vec();
        loop {
            if let Some(scan) = node.downcast_ref::<SnapshotScanExec>() {
                let columns = keys.iter().map(|&k| scan.relation_column(k)).collect();
                let scan = Arc::new(scan.clone());
                return Some((InnerPath { nodes, scan }, columns));
            }
            if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
                let exprs = projection.expr();
                let input = projection.input().schema();
                keys = keys
                    .iter()
                    .map(|&k| key_column(&exprs.get(k)?.expr, &input))
                    .collect::<Option<_>>()?;
            } else if let Some(filter) = node.downcast_ref::<FilterExec>() {
                // A limit would apply to the rows found, not to all.
                if filter.fetch().is_some() {
                    return None;
                }
                if let Some(p) = filter.projection() {
                    keys = keys
                        .iter()
                        .map(|&k| p.get(k).copied())
                        .collect::<Option<_>>()?;
                }
            } else if !(node.is::<RepartitionExec>() || node.is::<CooperativeExec>()) {
                return None;
            }
            let [child] = node.children()[..] else {
                return None;
            };
            let child = child.clone();
            nodes.push(node);
            node = child;
        }
    }

    /// The path with its scan replaced by `leaf`.
    fn rebuilt(&self, leaf: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        self.nodes.iter().rev().try_fold(leaf, |child, node| {
            node.clone().replace_children(vec![child], recompute())
        })
    }
}

/// Children replaced, the node's properties derived again from them.
fn recompute() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)
}

/// The index of the column `expr` reads, if it is a bare column.
fn column_index(expr: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    expr.downcast_ref::<Column>().map(Column::index)
}

/// The most rows an outer input may be estimated to have: it is read
/// whole, into memory, before the join runs.
const MAX_OUTER_ROWS: usize = 1_000_000;

/// Whether `outer` can run first: its row count is known (exactly or as an
/// estimate) and at most [`MAX_OUTER_ROWS`], so that a large or endless
/// input (`generate_series` under a `LIMIT`) still streams through the
/// join; and it has no order the join would keep (its rows are collected
/// without one).
fn small_and_unordered(outer: &Arc<dyn ExecutionPlan>) -> bool {
    let small = StatisticsContext::new()
        .compute(outer.as_ref(), &StatisticsArgs::new())
        .ok()
        .and_then(|s| s.num_rows.get_value().copied())
        .is_some_and(|rows| rows <= MAX_OUTER_ROWS);
    small && outer.output_ordering().is_none()
}

/// The column a join key reads: a bare column, or one cast to a wider
/// integer type (which keeps distinct values distinct, so the probes,
/// cast back, find the same rows).
fn key_column(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<usize> {
    if let Some(index) = column_index(expr) {
        return Some(index);
    }
    let cast = expr.downcast_ref::<CastExpr>()?;
    let index = column_index(cast.expr())?;
    widens(schema.field(index).data_type(), cast.cast_type()).then_some(index)
}

/// Whether every value of integer type `from` is one of integer type `to`.
fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    // (signed, bits) of each integer type.
    let shape = |t: &DataType| match t {
        Int8 => Some((true, 8)),
        Int16 => Some((true, 16)),
        Int32 => Some((true, 32)),
        Int64 => Some((true, 64)),
        UInt8 => Some((false, 8)),
        UInt16 => Some((false, 16)),
        UInt32 => Some((false, 32)),
        UInt64 => Some((false, 64)),
        _ => None,
    };
    match (shape(from), shape(to)) {
        (Some((false, a)), Some((true, b))) => a < b,
        (Some((x, a)), Some((y, b))) => x == y && a <= b,
        _ => false,
    }
}

/// The join over the collected outer rows and the rows found, with the
/// query memory those rows hold, or why it could not be made (shared by
/// every partition that runs).
type PreparedJoin =
    std::result::Result<(Arc<dyn ExecutionPlan>, Arc<MemoryReservation>), Arc<DataFusionError>>;

/// A hash join whose inner input is narrowed, when it runs, to the rows
/// whose keys the outer input holds (see the module documentation).
#[derive(Debug, Clone)]
pub struct LookupJoinExec {
    /// The join as DataFusion planned it.
    join: Arc<dyn ExecutionPlan>,
    /// Whether the outer input is the join's left one.
    outer_is_left: bool,
    /// The outer input's key expressions for the order's leading columns.
    outer_keys: Vec<Arc<dyn PhysicalExpr>>,
    inner: InnerPath,
    /// The order looked up in and its leading columns the keys fix.
    order: Order,
    fixed: usize,
    /// The join with its inputs replaced, made by the first partition
    /// that runs and shared with the others.
    prepared: Arc<OnceCell<PreparedJoin>>,
    /// `lookup_keys` (probes made, 0 when the inner input was read whole)
    /// and `inner_rows` (rows read of the inner relation), as `EXPLAIN
    /// ANALYZE` shows them.
    metrics: ExecutionPlanMetricsSet,
}

impl LookupJoinExec {
    /// A lookup join for `plan`, if it is a hash join one of whose
    /// droppable inputs scans an ordered relation on its join keys.
    fn recognise(plan: &Arc<dyn ExecutionPlan>) -> Option<Self> {
        let join = plan.downcast_ref::<HashJoinExec>()?;
        // `NOT IN` (null-aware) yields nothing if the inner input holds a
        // NULL key, a row no lookup finds.
        if join.null_equality() != NullEquality::NullEqualsNothing || join.null_aware {
            return None;
        }
        let (left, right) = match join.join_type() {
            JoinType::Inner => (true, true),
            JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                (false, true)
            }
            JoinType::Right | JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                (true, false)
            }
            JoinType::Full => return None,
        };
        let candidates = [(left, true), (right, false)]
            .into_iter()
            .filter(|(narrowable, _)| *narrowable)
            .filter_map(|(_, inner_is_left)| Self::candidate(plan, join, inner_is_left));
        // Narrow the bigger relation when both inputs could be.
        candidates.max_by_key(|c| c.inner.scan.rows())
    }

    /// The lookup join reading `join`'s left (or right) input by order.
    fn candidate(
        plan: &Arc<dyn ExecutionPlan>,
        join: &HashJoinExec,
        inner_is_left: bool,
    ) -> Option<Self> {
        let (inner_input, inner_keys, outer_keys): (_, Vec<_>, Vec<_>) = if inner_is_left {
            (
                join.left(),
                join.on().iter().map(|(l, _)| l).collect(),
                join.on().iter().map(|(_, r)| r.clone()).collect(),
            )
        } else {
            (
                join.right(),
                join.on().iter().map(|(_, r)| r).collect(),
                join.on().iter().map(|(l, _)| l.clone()).collect(),
            )
        };
        let inner_schema = inner_input.schema();
        let outer = if inner_is_left {
            join.right()
        } else {
            join.left()
        };
        if !small_and_unordered(outer) {
            return None;
        }
        let inner_keys: Vec<usize> = inner_keys
            .into_iter()
            .map(|key| key_column(key, &inner_schema))
            .collect::<Option<_>>()?;
        let (inner, columns) = InnerPath::find(inner_input, &inner_keys)?;
        // The order with the most leading columns among the join keys.
        let (order, fixed, outer) = inner
            .scan
            .table
            .orders()
            .iter()
            .filter_map(|order| {
                let outer: Vec<_> = order
                    .columns
                    .iter()
                    .map_while(|c| columns.iter().position(|k| k == c))
                    .map(|i| outer_keys[i].clone())
                    .collect();
                (!outer.is_empty()).then(|| (order.clone(), outer.len(), outer))
            })
            .max_by_key(|(_, fixed, _)| *fixed)?;
        Some(LookupJoinExec {
            join: plan.clone(),
            outer_is_left: !inner_is_left,
            outer_keys: outer,
            inner,
            order,
            fixed,
            prepared: Arc::default(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The names of the order's columns the keys fix, comma-separated.
    fn key_names(&self) -> String {
        let schema = self.inner.scan.table.schema();
        let names: Vec<&str> = self.order.columns[..self.fixed]
            .iter()
            .map(|&c| schema.field(c).name().as_str())
            .collect();
        names.join(", ")
    }

    fn outer(&self) -> &Arc<dyn ExecutionPlan> {
        self.join.children()[usize::from(!self.outer_is_left)]
    }

    /// Runs the outer input, looks its keys up in the inner relation and
    /// returns the join over the outer rows and the rows found.
    async fn prepare(
        &self,
        context: Arc<TaskContext>,
    ) -> Result<(Arc<dyn ExecutionPlan>, Arc<MemoryReservation>)> {
        let outer = self.outer().clone();
        let partitions = outer.output_partitioning().partition_count();
        // The collected rows count against the query memory, as a hash
        // join's build side does (54000 beyond it).
        let reservation = parking_lot::Mutex::new(
            MemoryConsumer::new("LookupJoinExec").register(context.memory_pool()),
        );
        let collected = futures::future::try_join_all((0..partitions).map(|p| {
            let stream = outer.execute(p, context.clone());
            let reservation = &reservation;
            async move {
                let mut stream = stream?;
                let mut batches = Vec::new();
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    reservation.lock().try_grow(batch.get_array_memory_size())?;
                    batches.push(batch);
                }
                Ok::<_, DataFusionError>(batches)
            }
        }))
        .await?;
        let found = match self.lookup(&collected)? {
            Some(lookup) => {
                let table = &self.inner.scan.table;
                let (batches, schema, looked_up) =
                    table.read(self.inner.scan.projection.as_deref(), Some(&lookup))?;
                looked_up.then(|| LookupExec::new(table.relation(), &lookup, schema, batches))
            }
            None => None,
        };
        let counter = |name: &'static str| MetricBuilder::new(&self.metrics).global_counter(name);
        let inner_leaf: Arc<dyn ExecutionPlan> = match found {
            Some(found) => {
                counter("lookup_keys").add(found.keys());
                counter("inner_rows").add(found.rows());
                Arc::new(found)
            }
            None => {
                counter("lookup_keys").add(0);
                counter("inner_rows").add(self.inner.scan.rows());
                self.inner.scan.clone()
            }
        };
        let inner = self.inner.rebuilt(inner_leaf)?;
        let outer = MemorySourceConfig::try_new_exec(&collected, outer.schema(), None)? as _;
        let children = if self.outer_is_left {
            vec![outer, inner]
        } else {
            vec![inner, outer]
        };
        let join = self.join.clone().replace_children(children, recompute())?;
        Ok((join, Arc::new(reservation.into_inner())))
    }

    /// The lookup of the outer rows' distinct keys, unless there are too
    /// many or a key has no equal value in the stored type.
    fn lookup(&self, outer: &[Vec<RecordBatch>]) -> Result<Option<Lookup>> {
        let batches: Vec<&RecordBatch> = outer.iter().flatten().collect();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.fixed);
        for key in &self.outer_keys {
            let arrays = batches
                .iter()
                .map(|b| key.evaluate(b)?.into_array(b.num_rows()))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&dyn datafusion::arrow::array::Array> =
                arrays.iter().map(|a| a.as_ref()).collect();
            if refs.is_empty() {
                return Ok(None);
            }
            columns.push(concat(&refs)?);
        }
        let Some(probes) = distinct_keys(&columns, self.inner.scan.rows().min(MAX_PROBES + 1))?
        else {
            return Ok(None);
        };
        let stored = self.inner.scan.table.stored_schema();
        let mut arrays = Vec::with_capacity(probes.len());
        for (array, &column) in probes.iter().zip(&self.order.columns) {
            match stored_value_array(array, stored.field(column).data_type())? {
                Some(array) => arrays.push(array),
                None => return Ok(None),
            }
        }
        Ok(Some(Lookup::equal(&self.order, &self.key_names(), arrays)))
    }
}

/// The distinct rows of `columns` without NULLs, one array per column,
/// if there are fewer than `limit`.
fn distinct_keys(columns: &[ArrayRef], limit: usize) -> Result<Option<Vec<ArrayRef>>> {
    let converter = RowConverter::new(
        columns
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )?;
    let rows = converter.convert_columns(columns)?;
    let valid = |i: usize| columns.iter().all(|c| c.is_valid(i));
    let mut seen = HashSet::new();
    let mut distinct = Vec::new();
    // A loop over the outer rows: hashing each key once is the cheapest
    // way to a set of distinct keys, and it stops once there are too many.
    for i in (0..rows.num_rows()).filter(|&i| valid(i)) {
        let row = rows.row(i);
        if seen.insert(row) {
            distinct.push(row);
            if distinct.len() >= limit {
                return Ok(None);
            }
        }
    }
    Ok(Some(converter.convert_rows(distinct)?))
}

impl DisplayAs for LookupJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "LookupJoinExec: {} index={} columns=[{}] outer={}",
            self.inner.scan.table.relation(),
            self.order.name,
            self.key_names(),
            if self.outer_is_left { "left" } else { "right" }
        )
    }
}

impl ExecutionPlan for LookupJoinExec {
    fn name(&self) -> &str {
        "LookupJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.join.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.join]
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let join = children
            .pop()
            .ok_or_else(|| DataFusionError::Internal("a lookup join has one child".into()))?;
        Ok(match LookupJoinExec::recognise(&join) {
            Some(lookup) => Arc::new(lookup),
            None => join,
        })
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let this = self.clone();
        let schema = self.join.schema();
        let stream = futures::stream::once(async move {
            let prepared = this
                .prepared
                .get_or_init(|| async { this.prepare(context.clone()).await.map_err(Arc::new) })
                .await
                .clone()
                .map_err(DataFusionError::Shared)?;
            prepared.0.execute(partition, context)
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}
