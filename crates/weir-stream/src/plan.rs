//! [`StreamPlan`]: a view's operators as the SQL planner describes them,
//! before they are instantiated into a [`crate::Dataflow`].

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::JoinType;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{PhysicalExprRef, PhysicalSortExpr};
use datafusion::physical_plan::WindowExpr;

/// A view's dataflow: nodes in topological order, the last one is the
/// view's output.
#[derive(Debug, Clone)]
pub struct StreamPlan {
    /// The nodes; a node's inputs come before it.
    pub nodes: Vec<NodeSpec>,
}

/// One operator of a plan.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// What the operator does.
    pub kind: NodeKind,
    /// Indices of the nodes feeding it, by port.
    pub inputs: Vec<usize>,
    /// The schema of its output.
    pub schema: SchemaRef,
    /// Whether its output only ever inserts (see
    /// [`StreamPlan::mark_append_only`]).
    pub append_only: bool,
    /// Columns of its output that no two rows share (see
    /// [`StreamPlan::derive_keys`]); `Some(vec![])` when it has at most
    /// one row, `None` when no columns are known to be unique.
    pub key: Option<Vec<usize>>,
}

/// The operator kinds.
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// The changes of a table, source or materialized view.
    Source {
        /// The relation's name.
        relation: String,
        /// The columns the plan reads (the others may arrive as NULL);
        /// `None`: all.
        read: Option<Vec<usize>>,
    },
    /// Rows whose event-time `column` is below the watermark are
    /// dropped as late (see [`crate::watermark`]).
    Watermark {
        /// The event-time column.
        column: usize,
        /// How far the watermark trails the greatest event time read, in
        /// the column's unit.
        delay: i64,
    },
    /// Each row with its processing time as a last column (`PROCTIME()`:
    /// see [`crate::proctime`]).
    ProcTime,
    /// Constant rows.
    Values {
        /// The rows.
        rows: RecordBatch,
    },
    /// Rows for which the predicate is true.
    Filter {
        /// The predicate, over the input's columns.
        predicate: PhysicalExprRef,
    },
    /// The rows whose interval, worked out by the bounds, holds the
    /// epoch's `now()` (see [`crate::temporal_filter`]).
    TemporalFilter {
        /// The bounds, all of which hold.
        bounds: Vec<TemporalBound>,
    },
    /// Computed columns.
    Project {
        /// One expression per output column.
        exprs: Vec<PhysicalExprRef>,
    },
    /// Grouped or global aggregation.
    Aggregate(AggregateSpec),
    /// A join of two inputs.
    Join(JoinSpec),
    /// `UNION ALL` of any number of inputs.
    Union,
    /// The first rows in an order.
    TopN(TopNSpec),
    /// The first rows of each partition, numbered (`ROW_NUMBER() OVER
    /// (PARTITION BY ... ORDER BY ...) <= n`): the input's columns and
    /// the row number.
    GroupTopN(GroupTopNSpec),
    /// `OVER` window functions: the input's columns and one per function.
    Window(WindowSpec),
    /// Each row once per element of its list column `column`, which the
    /// element replaces.
    Unnest {
        /// The list column.
        column: usize,
        /// Whether a NULL list gives one row with a NULL element (else none).
        keep_null: bool,
        /// Whether an empty list gives one row with a NULL element (else none).
        keep_empty: bool,
    },
}

/// The input columns `exprs` are, if each is a plain column and there is
/// at least one.
fn column_indices<'a>(exprs: impl Iterator<Item = &'a PhysicalExprRef>) -> Option<Vec<usize>> {
    let columns = exprs
        .map(|e| e.downcast_ref::<Column>().map(Column::index))
        .collect::<Option<Vec<usize>>>()?;
    (!columns.is_empty()).then_some(columns)
}

/// One bound of a temporal filter: a row is in from its time on
/// (`from`) or until its time (else). The time is `value` (a timestamp
/// or date over the input's rows), one microsecond later if `plus_one`.
#[derive(Debug, Clone)]
pub struct TemporalBound {
    /// The time, over the input's columns.
    pub value: PhysicalExprRef,
    /// Whether the row is in from the time on, rather than until it.
    pub from: bool,
    /// Whether the time is one microsecond after `value`.
    pub plus_one: bool,
}

/// What an aggregation computes.
#[derive(Debug, Clone)]
pub struct AggregateSpec {
    /// Group key expressions and their output names; empty for a global
    /// aggregate.
    pub group: Vec<(PhysicalExprRef, String)>,
    /// The aggregate functions.
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// Each aggregate's `FILTER (WHERE ...)`.
    pub filters: Vec<Option<PhysicalExprRef>>,
    /// `EMIT ON WINDOW CLOSE`: a group's row is emitted once, when the
    /// watermark passes its window (a group column with a
    /// [`crate::watermark::ColumnBound`]), and never before.
    pub emit_on_window_close: bool,
}

/// How two inputs are joined.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    /// Inner, outer, semi, anti or mark.
    pub join_type: JoinType,
    /// Key expressions over the left input.
    pub left_keys: Vec<PhysicalExprRef>,
    /// Key expressions over the right input, pairwise equal to the left ones.
    pub right_keys: Vec<PhysicalExprRef>,
    /// A residual condition over the left columns followed by the right ones.
    pub filter: Option<PhysicalExprRef>,
    /// Whether NULL keys match each other (`INTERSECT`, `EXCEPT`).
    pub nulls_equal: bool,
    /// A left anti join with `NOT IN` semantics: a NULL on either side
    /// makes the comparison unknown, so no row passes while the right side
    /// holds a NULL key, and a NULL left key passes only an empty right.
    pub null_aware: bool,
    /// A processing-time temporal join (`JOIN t FOR SYSTEM_TIME AS OF
    /// PROCTIME()`): each left row is joined with the right side as it is
    /// when the row is processed. Right-side changes update the lookup
    /// state and emit nothing; left rows are not kept (see
    /// [`crate::join`]).
    pub temporal: bool,
}

impl JoinSpec {
    /// Whether the join can run as instances partitioned by its keys: it
    /// has equality keys, and no `NOT IN` semantics (which look at the
    /// whole right side).
    pub fn partitions(&self) -> bool {
        !self.left_keys.is_empty() && !self.null_aware
    }

    /// Whether a temporal join of this kind can be maintained: the left
    /// rows are the ones kept (inner, left outer, semi, anti), and the
    /// answer for a left row needs only the right rows of its key.
    pub fn temporal_kind_supported(&self) -> bool {
        matches!(
            self.join_type,
            JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti
        ) && !self.null_aware
    }
}

/// An ordering and a window of it.
#[derive(Debug, Clone)]
pub struct TopNSpec {
    /// The `ORDER BY`.
    pub order: Vec<PhysicalSortExpr>,
    /// Rows skipped (`OFFSET`).
    pub skip: usize,
    /// Rows kept (`LIMIT`), if bounded.
    pub fetch: Option<usize>,
}

/// The first rows of each partition of an ordering.
#[derive(Debug, Clone)]
pub struct GroupTopNSpec {
    /// The `PARTITION BY`.
    pub partition: Vec<PhysicalExprRef>,
    /// The `ORDER BY`.
    pub order: Vec<PhysicalSortExpr>,
    /// Rows kept per partition.
    pub fetch: usize,
}

/// Window functions that share their partitioning.
#[derive(Debug, Clone)]
pub struct WindowSpec {
    /// The `PARTITION BY` columns every function has: the operator's key
    /// (none: the whole input is one partition).
    pub partition: Vec<PhysicalExprRef>,
    /// The order the functions read a partition's rows in: their
    /// partition columns, then their `ORDER BY`.
    pub order: Vec<PhysicalSortExpr>,
    /// The functions, over the input's columns.
    pub functions: Vec<Arc<dyn WindowExpr>>,
    /// Set when every function is `session_start` or `session_end` over
    /// one time column and gap (see [`crate::session`]).
    pub session: Option<SessionSpec>,
}

/// The sessions an `OVER` node of session functions computes.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// The input column the sessions are over.
    pub time: usize,
    /// The gap, in the time column's unit.
    pub gap: i64,
    /// The output columns that hold `session_end`.
    pub ends: Vec<usize>,
}

/// `duration`, counted in the unit of a time column of `data_type`, in
/// seconds.
fn seconds(duration: i64, data_type: &DataType) -> f64 {
    let nanos = crate::watermark::nanos_per_unit(data_type).unwrap_or(1);
    duration as f64 * nanos as f64 / 1e9
}

/// How the rows into an operator's input are spread over the operator's
/// parallel instances.
#[derive(Debug, Clone)]
pub enum Exchange {
    /// By a hash of these expressions over the input rows: rows with equal
    /// values meet in one instance (a group-by's groups, a join's keys).
    Hash(Vec<PhysicalExprRef>),
    /// All to one instance: a global aggregate, a top-N, a join without
    /// equality keys or with `NOT IN` semantics.
    Single,
}

impl Exchange {
    /// The key columns of `rows` that place them (none for
    /// [`Exchange::Single`]: every row in virtual partition 0).
    pub fn keys(&self, rows: &RecordBatch) -> crate::Result<Vec<ArrayRef>> {
        match self {
            Exchange::Single => Ok(Vec::new()),
            Exchange::Hash(exprs) => exprs
                .iter()
                .map(|e| e.evaluate(rows)?.into_array(rows.num_rows()))
                .collect(),
        }
    }
}

impl StreamPlan {
    /// How rows reach port `port` of node `node` when the plan runs as
    /// several instances; `None`: they stay in the instance that made
    /// them (operators without state).
    pub fn exchange(&self, node: usize, port: usize) -> Option<Exchange> {
        match &self.nodes[node].kind {
            NodeKind::Aggregate(agg) if agg.group.is_empty() => Some(Exchange::Single),
            NodeKind::Aggregate(agg) => Some(Exchange::Hash(
                agg.group.iter().map(|(expr, _)| expr.clone()).collect(),
            )),
            NodeKind::Join(join) if !join.partitions() => Some(Exchange::Single),
            NodeKind::Join(join) => Some(Exchange::Hash(if port == 0 {
                join.left_keys.clone()
            } else {
                join.right_keys.clone()
            })),
            NodeKind::TopN(_) => Some(Exchange::Single),
            NodeKind::GroupTopN(top) if top.partition.is_empty() => Some(Exchange::Single),
            NodeKind::GroupTopN(top) => Some(Exchange::Hash(top.partition.clone())),
            NodeKind::Window(window) if window.partition.is_empty() => Some(Exchange::Single),
            NodeKind::Window(window) => Some(Exchange::Hash(window.partition.clone())),
            // Its rows are stored by their bound values.
            NodeKind::TemporalFilter { bounds } => Some(Exchange::Hash(
                bounds.iter().map(|b| b.value.clone()).collect(),
            )),
            NodeKind::Source { .. }
            | NodeKind::Watermark { .. }
            | NodeKind::ProcTime
            | NodeKind::Values { .. }
            | NodeKind::Filter { .. }
            | NodeKind::Project { .. }
            | NodeKind::Unnest { .. }
            | NodeKind::Union => None,
        }
    }

    /// Works out which nodes only ever insert, given which relations do
    /// (sources, append-only views). Operators over an append-only input
    /// keep less state: `min`/`max` one value per group, a join side no
    /// row hashes.
    pub fn mark_append_only(&mut self, relation_is_append_only: impl Fn(&str) -> bool) {
        for i in 0..self.nodes.len() {
            let inputs: Vec<bool> = self.nodes[i]
                .inputs
                .iter()
                .map(|&input| self.nodes[input].append_only)
                .collect();
            let all = inputs.iter().all(|&a| a);
            let node = &mut self.nodes[i];
            node.append_only = match &node.kind {
                NodeKind::Source { relation, .. } => relation_is_append_only(relation),
                NodeKind::Values { .. } => true,
                NodeKind::Filter { .. }
                | NodeKind::Watermark { .. }
                | NodeKind::ProcTime
                | NodeKind::Project { .. }
                | NodeKind::Unnest { .. }
                | NodeKind::Union => all,
                // A semi join's row appears with its first match and stays
                // while matches only come; every other kind retracts rows
                // (padding, lost matches) or, like aggregates and top-N,
                // replaces them.
                // A temporal join emits each left row's result once, when
                // the row comes, and never revisits it.
                NodeKind::Join(join) if join.temporal => inputs[0],
                NodeKind::Join(join) => {
                    all && matches!(
                        join.join_type,
                        JoinType::Inner | JoinType::LeftSemi | JoinType::RightSemi
                    ) && !join.null_aware
                }
                // Emitted once, when final.
                NodeKind::Aggregate(spec) => spec.emit_on_window_close,
                // Rows that only come in stay.
                NodeKind::TemporalFilter { bounds } => all && bounds.iter().all(|b| b.from),
                NodeKind::TopN(_) | NodeKind::GroupTopN(_) | NodeKind::Window(_) => false,
            };
        }
    }

    /// Refuses temporal joins whose left input can delete or update rows
    /// ([`Self::mark_append_only`] must run first): a left row's result
    /// depends on the right side when it came, which a later retraction
    /// of the row could not undo. Refuses a view that also streams a
    /// relation one of its temporal joins looks up.
    pub fn check_temporal_joins(&self) -> std::result::Result<(), String> {
        for node in &self.nodes {
            if let NodeKind::Join(join) = &node.kind {
                if join.temporal && !self.nodes[node.inputs[0]].append_only {
                    return Err(
                        "FOR SYSTEM_TIME AS OF PROCTIME() needs an append-only left \
                         side (a source, an APPEND ONLY table, or a view of inserts only): \
                         each row is looked up once, when it comes, so a row that is later \
                         updated or deleted could not be taken back"
                            .into(),
                    );
                }
            }
        }
        // A relation read on both sides would meet itself in an order
        // that depends on how its changes are cut into batches.
        let looked_up = self.temporal_relations();
        let mut streamed = BTreeSet::new();
        let mut pending: Vec<usize> = self.nodes.len().checked_sub(1).into_iter().collect();
        while let Some(index) = pending.pop() {
            let node = &self.nodes[index];
            match &node.kind {
                NodeKind::Source { relation, .. } => {
                    streamed.insert(relation.clone());
                }
                NodeKind::Join(join) if join.temporal => pending.push(node.inputs[0]),
                _ => pending.extend(&node.inputs),
            }
        }
        if let Some(both) = looked_up.intersection(&streamed).next() {
            return Err(format!(
                "\"{both}\" is both the table a FOR SYSTEM_TIME AS OF PROCTIME() join looks \
                 up and a stream the view reads"
            ));
        }
        Ok(())
    }

    /// The relations temporal joins look up (read under a temporal join's
    /// right input). A view's backfill feeds them first, so that the rows
    /// already in its other inputs find them.
    pub fn temporal_relations(&self) -> BTreeSet<String> {
        let mut relations = BTreeSet::new();
        let mut pending: Vec<usize> = self
            .nodes
            .iter()
            .filter(|n| matches!(&n.kind, NodeKind::Join(j) if j.temporal))
            .map(|n| n.inputs[1])
            .collect();
        while let Some(index) = pending.pop() {
            let node = &self.nodes[index];
            if let NodeKind::Source { relation, .. } = &node.kind {
                relations.insert(relation.clone());
            }
            pending.extend(&node.inputs);
        }
        relations
    }

    /// Works out a unique key for each node's output, given the keys of
    /// the relations it reads (a table's primary key, a view's key; in
    /// the relation's column order):
    ///
    /// - an aggregate's group columns are its key (none for a global one:
    ///   it has one row);
    /// - filters and top-N keep their input's key, a projection keeps it
    ///   when it passes every key column through unchanged;
    /// - a join's output is keyed by both sides' keys together (a semi or
    ///   anti join by its side's key);
    /// - `UNION ALL`, constant rows and unnested rows have none.
    pub fn derive_keys(&mut self, relation_key: impl Fn(&str) -> Option<Vec<usize>>) {
        for i in 0..self.nodes.len() {
            let input_key = |port: usize| -> Option<Vec<usize>> {
                self.nodes[self.nodes[i].inputs[port]].key.clone()
            };
            let node = &self.nodes[i];
            let key = match &node.kind {
                NodeKind::Source { relation, .. } => relation_key(relation),
                // A window function adds columns to each input row.
                NodeKind::Filter { .. }
                | NodeKind::TemporalFilter { .. }
                | NodeKind::Watermark { .. }
                | NodeKind::ProcTime
                | NodeKind::TopN(_)
                | NodeKind::Window(_) => input_key(0),
                NodeKind::Project { exprs } => input_key(0).and_then(|key| {
                    key.iter()
                        .map(|&column| {
                            exprs.iter().position(|e| {
                                e.downcast_ref::<Column>()
                                    .is_some_and(|c| c.index() == column)
                            })
                        })
                        .collect::<Option<Vec<usize>>>()
                }),
                NodeKind::Aggregate(spec) => Some((0..spec.group.len()).collect()),
                // A partition's rows have distinct numbers: the partition
                // columns (when they are input columns) and the number.
                NodeKind::GroupTopN(top) => top
                    .partition
                    .iter()
                    .map(|e| e.downcast_ref::<Column>().map(Column::index))
                    .chain(std::iter::once(Some(node.schema.fields().len() - 1)))
                    .collect::<Option<Vec<usize>>>(),
                NodeKind::Join(join) => {
                    let left_width = self.nodes[node.inputs[0]].schema.fields().len();
                    match join.join_type {
                        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                            input_key(0)
                        }
                        JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                            input_key(1)
                        }
                        JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
                            match (input_key(0), input_key(1)) {
                                (Some(left), Some(right)) => Some(
                                    left.into_iter()
                                        .chain(right.into_iter().map(|c| c + left_width))
                                        .collect(),
                                ),
                                _ => None,
                            }
                        }
                    }
                }
                // An unnested row repeats its input row's key.
                NodeKind::Union | NodeKind::Values { .. } | NodeKind::Unnest { .. } => None,
            };
            self.nodes[i].key = key;
        }
    }

    /// Orders worth looking the output's rows up by besides its key (see
    /// [`Self::derive_keys`], which must run first): lists of columns
    /// that many rows may share, so that an equality on their leading
    /// columns reads few rows. Orders the key starts with, or another
    /// order does, are left out.
    ///
    /// - a join's output is ordered by each side's equality-key columns,
    ///   and by its inputs' orders (a semi or anti join by its side's);
    /// - a top-N's by its `ORDER BY` columns and its input's orders;
    /// - filters, watermarks, window functions and per-partition top-N
    ///   keep their input's, a projection the leading columns of each
    ///   that it passes through unchanged;
    /// - aggregates (whose group columns are the key), unions, constant
    ///   and unnested rows have none.
    pub fn output_lookup_orders(&self) -> Vec<Vec<usize>> {
        let mut orders: Vec<Vec<Vec<usize>>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let input = |port: usize| orders[node.inputs[port]].clone();
            let own: Vec<Vec<usize>> = match &node.kind {
                NodeKind::Filter { .. }
                | NodeKind::TemporalFilter { .. }
                | NodeKind::Watermark { .. }
                | NodeKind::ProcTime
                | NodeKind::GroupTopN(_)
                | NodeKind::Window(_) => input(0),
                NodeKind::TopN(top) => {
                    let by = column_indices(top.order.iter().map(|s| &s.expr));
                    input(0).into_iter().chain(by).collect()
                }
                NodeKind::Project { exprs } => input(0)
                    .into_iter()
                    .filter_map(|order| {
                        let passed: Vec<usize> = order
                            .iter()
                            .map_while(|&column| {
                                exprs.iter().position(|e| {
                                    e.downcast_ref::<Column>()
                                        .is_some_and(|c| c.index() == column)
                                })
                            })
                            .collect();
                        (!passed.is_empty()).then_some(passed)
                    })
                    .collect(),
                NodeKind::Join(join) => {
                    let left_width = self.nodes[node.inputs[0]].schema.fields().len();
                    let left = input(0)
                        .into_iter()
                        .chain(column_indices(join.left_keys.iter()));
                    let right = input(1)
                        .into_iter()
                        .chain(column_indices(join.right_keys.iter()));
                    match join.join_type {
                        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                            left.collect()
                        }
                        JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                            right.collect()
                        }
                        JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => left
                            .chain(right.map(|o| o.into_iter().map(|c| c + left_width).collect()))
                            .collect(),
                    }
                }
                NodeKind::Source { .. }
                | NodeKind::Aggregate(_)
                | NodeKind::Union
                | NodeKind::Values { .. }
                | NodeKind::Unnest { .. } => Vec::new(),
            };
            orders.push(own);
        }
        let key = self
            .nodes
            .last()
            .and_then(|n| n.key.clone())
            .unwrap_or_default();
        let mut kept: Vec<Vec<usize>> = Vec::new();
        for order in orders.pop().unwrap_or_default() {
            let covered = |by: &Vec<usize>| by.starts_with(&order);
            if !key.starts_with(&order) && !kept.iter().any(covered) {
                kept.retain(|k| !order.starts_with(k));
                kept.push(order);
            }
        }
        kept
    }

    /// The columns of `relation` the plan reads, as a mask over its
    /// columns (`width` of them); `None` when it reads them all.
    pub fn columns_read(&self, relation: &str, width: usize) -> Option<Vec<bool>> {
        let mut mask = vec![false; width];
        for node in &self.nodes {
            if let NodeKind::Source { relation: r, read } = &node.kind {
                if r != relation {
                    continue;
                }
                match read {
                    None => return None,
                    Some(columns) => {
                        for &c in columns {
                            if let Some(m) = mask.get_mut(c) {
                                *m = true;
                            }
                        }
                    }
                }
            }
        }
        Some(mask)
    }

    /// Whether input `port` of node `index` only ever inserts.
    pub fn input_append_only(&self, index: usize, port: usize) -> bool {
        self.nodes[self.nodes[index].inputs[port]].append_only
    }

    /// The names of node `index`'s state tables, in checkpoint order.
    pub fn state_tables(&self, index: usize) -> Vec<String> {
        let node = &self.nodes[index];
        match &node.kind {
            NodeKind::Aggregate(spec) => {
                let input = &self.nodes[node.inputs[0]];
                if crate::aggregate::is_columnar(spec, &input.schema, input.append_only) {
                    let mut tables = vec!["groups: row count and aggregate states".to_owned()];
                    // `min`/`max` of an input that deletes and
                    // `count(DISTINCT)` keep every value (`ValueCounts`,
                    // `DistinctValues`).
                    for function in &spec.aggregates {
                        let extreme = matches!(function.fun().name(), "min" | "max");
                        if function.is_distinct() || extreme && !input.append_only {
                            tables.push(format!("values of {} by group", function.name()));
                        }
                    }
                    tables
                } else {
                    vec!["input rows by group key".to_owned()]
                }
            }
            NodeKind::Join(join) if join.temporal => vec!["right rows by join key".to_owned()],
            NodeKind::Join(_) => vec![
                "left rows by join key".to_owned(),
                "right rows by join key".to_owned(),
            ],
            NodeKind::TopN(_) => vec!["input rows in sort order".to_owned()],
            NodeKind::Watermark { .. } => {
                vec!["watermark and late rows, per instance".to_owned()]
            }
            NodeKind::GroupTopN(spec) if self.nodes[node.inputs[0]].append_only => {
                let columns = self.nodes[node.inputs[0]].schema.fields().len();
                if crate::append_top_n::applies(spec, true, columns) {
                    vec![
                        "each partition's first rows, in slots (the input only inserts)".to_owned(),
                    ]
                } else {
                    vec!["each partition's first rows (the input only inserts)".to_owned()]
                }
            }
            NodeKind::GroupTopN(_) => vec!["input rows by partition in sort order".to_owned()],
            NodeKind::Window(_) => vec!["input rows by partition".to_owned()],
            NodeKind::TemporalFilter { .. } => vec![
                "rows in or still to come, by their times".to_owned(),
                "now() in force, per instance".to_owned(),
            ],
            _ => Vec::new(),
        }
    }

    /// Node `index` in one line, as `EXPLAIN` shows it.
    pub fn describe(&self, index: usize) -> String {
        let node = &self.nodes[index];
        let list = |exprs: &mut dyn Iterator<Item = String>| exprs.collect::<Vec<_>>().join(", ");
        match &node.kind {
            NodeKind::Source { relation, .. } => format!("Source: {relation}"),
            NodeKind::Values { rows } => format!("Values: {} rows", rows.num_rows()),
            NodeKind::ProcTime => {
                let fields = node.schema.fields();
                format!("ProcTime: {}", fields[fields.len() - 1].name())
            }
            NodeKind::Filter { predicate } => format!("Filter: {predicate}"),
            NodeKind::Window(WindowSpec {
                session: Some(session),
                partition,
                ..
            }) => {
                let time = self.nodes[node.inputs[0]].schema.field(session.time);
                format!(
                    "Window: sessions of {} with gap {}s partition=[{}]",
                    time.name(),
                    seconds(session.gap, time.data_type()),
                    list(&mut partition.iter().map(|e| e.to_string()))
                )
            }
            NodeKind::Window(window) => format!(
                "Window: {} partition=[{}]",
                list(&mut window.functions.iter().map(|f| f.name().to_owned())),
                list(&mut window.partition.iter().map(|e| e.to_string()))
            ),
            NodeKind::TemporalFilter { bounds } => {
                let bounds = bounds.iter().map(|b| {
                    let op = match (b.from, b.plus_one) {
                        (true, false) => ">=",
                        (true, true) => ">",
                        (false, false) => "<",
                        (false, true) => "<=",
                    };
                    format!("now() {op} {}", b.value)
                });
                format!("TemporalFilter: {}", list(&mut bounds.into_iter()))
            }
            NodeKind::Watermark { column, delay } => {
                let field = node.schema.field(*column);
                format!(
                    "Watermark: {} - {}s",
                    field.name(),
                    seconds(*delay, field.data_type())
                )
            }
            NodeKind::Unnest { column, .. } => {
                format!("Unnest: {}", node.schema.field(*column).name())
            }
            NodeKind::Project { exprs } => {
                format!(
                    "Project: {}",
                    list(&mut exprs.iter().map(|e| e.to_string()))
                )
            }
            NodeKind::Aggregate(spec) => {
                let input = &self.nodes[node.inputs[0]];
                format!(
                    "{}: group=[{}] aggregates=[{}]{}",
                    if crate::aggregate::is_columnar(spec, &input.schema, input.append_only) {
                        "HashAggregate"
                    } else {
                        "RecomputeAggregate"
                    },
                    list(&mut spec.group.iter().map(|(e, _)| e.to_string())),
                    list(&mut spec.aggregates.iter().map(|a| a.name().to_owned())),
                    if spec.emit_on_window_close {
                        " emit=on window close"
                    } else {
                        ""
                    }
                )
            }
            NodeKind::Join(spec) => {
                let keys = list(
                    &mut spec
                        .left_keys
                        .iter()
                        .zip(&spec.right_keys)
                        .map(|(l, r)| format!("{l} = {r}")),
                );
                let filter = spec
                    .filter
                    .as_ref()
                    .map(|f| format!(" filter={f}"))
                    .unwrap_or_default();
                let kind = if spec.null_aware {
                    format!("{} (null-aware)", spec.join_type)
                } else {
                    spec.join_type.to_string()
                };
                let name = if spec.temporal {
                    "TemporalJoin"
                } else {
                    "HashJoin"
                };
                format!("{name}: type={kind} keys=[{keys}]{filter}")
            }
            NodeKind::Union => "Union".to_owned(),
            NodeKind::TopN(spec) => format!(
                "TopN: order=[{}] offset={} limit={}",
                list(&mut spec.order.iter().map(|s| s.to_string())),
                spec.skip,
                spec.fetch.map_or("none".to_owned(), |f| f.to_string())
            ),
            NodeKind::GroupTopN(spec) => format!(
                "GroupTopN: partition=[{}] order=[{}] limit={}",
                list(&mut spec.partition.iter().map(|e| e.to_string())),
                list(&mut spec.order.iter().map(|s| s.to_string())),
                spec.fetch
            ),
        }
    }

    /// The plan as indented lines, output first, for `EXPLAIN`. State
    /// tables are listed under their operator.
    pub fn explain(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(last) = self.nodes.len().checked_sub(1) {
            self.explain_node(last, 0, &mut lines);
        }
        lines
    }

    fn explain_node(&self, index: usize, depth: usize, lines: &mut Vec<String>) {
        let indent = "  ".repeat(depth);
        lines.push(format!("{indent}{}", self.describe(index)));
        for table in self.state_tables(index) {
            lines.push(format!("{indent}    state: {table}"));
        }
        for &input in &self.nodes[index].inputs {
            self.explain_node(input, depth + 1, lines);
        }
    }
}

impl fmt::Display for StreamPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in self.explain() {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}
