//! [`StreamPlan`]: a view's operators as the SQL planner describes them,
//! before they are instantiated into a [`crate::Dataflow`].

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::JoinType;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{PhysicalExprRef, PhysicalSortExpr};

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
}

/// The operator kinds.
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// The changes of a table or materialized view.
    Source {
        /// The relation's name.
        relation: String,
    },
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

impl NodeSpec {
    /// Names of the operator's state tables, in checkpoint order.
    pub fn state_tables(&self) -> &'static [&'static str] {
        match &self.kind {
            NodeKind::Aggregate(spec) if crate::running::is_running(spec) => {
                &["running totals by group key"]
            }
            NodeKind::Aggregate(_) => &["input rows by group key"],
            NodeKind::Join(_) => &["left rows by join key", "right rows by join key"],
            NodeKind::TopN(_) => &["input rows in sort order"],
            _ => &[],
        }
    }

    fn describe(&self) -> String {
        let list = |exprs: &mut dyn Iterator<Item = String>| exprs.collect::<Vec<_>>().join(", ");
        match &self.kind {
            NodeKind::Source { relation } => format!("Source: {relation}"),
            NodeKind::Values { rows } => format!("Values: {} rows", rows.num_rows()),
            NodeKind::Filter { predicate } => format!("Filter: {predicate}"),
            NodeKind::Project { exprs } => {
                format!(
                    "Project: {}",
                    list(&mut exprs.iter().map(|e| e.to_string()))
                )
            }
            NodeKind::Aggregate(spec) => format!(
                "{}: group=[{}] aggregates=[{}]",
                if crate::running::is_running(spec) {
                    "RunningAggregate"
                } else {
                    "HashAggregate"
                },
                list(&mut spec.group.iter().map(|(e, _)| e.to_string())),
                list(&mut spec.aggregates.iter().map(|a| a.name().to_owned()))
            ),
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
                format!("HashJoin: type={kind} keys=[{keys}]{filter}")
            }
            NodeKind::Union => "Union".to_owned(),
            NodeKind::TopN(spec) => format!(
                "TopN: order=[{}] offset={} limit={}",
                list(&mut spec.order.iter().map(|s| s.to_string())),
                spec.skip,
                spec.fetch.map_or("none".to_owned(), |f| f.to_string())
            ),
        }
    }
}

impl StreamPlan {
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
        let node = &self.nodes[index];
        let indent = "  ".repeat(depth);
        lines.push(format!("{indent}{}", node.describe()));
        for table in node.state_tables() {
            lines.push(format!("{indent}    state: {table}"));
        }
        for &input in &node.inputs {
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
