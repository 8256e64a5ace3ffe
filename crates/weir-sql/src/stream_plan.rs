//! From DataFusion's optimized `LogicalPlan` to a [`StreamPlan`]: the
//! operators that maintain a materialized view incrementally.
//!
//! DataFusion has already done the hard parts: name resolution, type
//! coercion, subquery decorrelation (`IN`, `EXISTS` and scalar subqueries
//! become joins), `DISTINCT` as aggregation. What is left is a tree of
//! relational operators; each maps to one streaming operator. A node the
//! streaming engine cannot maintain is refused with `NotImplemented`
//! (SQLSTATE 0A000) naming the construct.

use std::cell::Cell;
use std::sync::Arc;

use datafusion::arrow::array::{new_empty_array, ArrayRef};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, JoinType, NullEquality, NullHandling, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::{generate_sort_key, split_conjunction};
use datafusion::logical_expr::{
    Expr, ExprSchemable, FetchType, Filter, Limit, LogicalPlan, LogicalPlanBuilder, SkipType, Sort,
    SortExpr, TableProviderFilterPushDown, TableScan, Unnest, Volatility, Window,
};
use datafusion::physical_expr::{
    create_physical_expr, create_physical_sort_exprs, PhysicalExprRef,
};
#[allow(deprecated)]
use datafusion::physical_planner::create_aggregate_expr_and_maybe_filter;
use datafusion::physical_planner::create_window_expr;
use weir_stream::session::{gap_in_units, SESSION_END, SESSION_START};
use weir_stream::{
    AggregateSpec, GroupTopNSpec, JoinSpec, NodeKind, NodeSpec, SessionSpec, StreamPlan,
    TemporalBound, TopNSpec, WindowSpec,
};

use crate::proctime::ProcTimeNode;
use crate::temporal::{BoundKind, TemporalFilter};
use crate::temporal_join::{is_temporal_side, TemporalSide};

/// Refuses expressions whose value can change without any input
/// changing (`now()`, `random()`): a view of them could never be kept
/// equal to its query. Run on the plan before the optimizer folds them.
pub fn check_deterministic(plan: &LogicalPlan) -> Result<()> {
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::ScalarFunction(f) = e {
                    if f.func.signature().volatility != Volatility::Immutable {
                        return Err(unsupported(format!(
                            "function {}(): its result can change while its inputs do not",
                            f.func.name()
                        )));
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(())
}

/// The streaming operators for an optimized logical plan.
pub fn stream_plan(plan: &LogicalPlan) -> Result<StreamPlan> {
    let plan = scalar_subqueries_to_joins(plan.clone(), &Cell::new(0))?;
    let mut builder = Builder {
        nodes: Vec::new(),
        props: ExecutionProps::new(),
        temporal_sides: 0,
        temporal_joins: 0,
    };
    builder.add(&plan)?;
    if builder.temporal_sides != builder.temporal_joins {
        return Err(unsupported(
            "FOR SYSTEM_TIME AS OF PROCTIME() on a table that is not read directly by a \
             join, as its right side",
        ));
    }
    Ok(StreamPlan {
        nodes: builder.nodes,
    })
}

/// DataFusion leaves an uncorrelated scalar subquery (`x > (SELECT avg(x)
/// FROM t)`) in the expression, for its executor to evaluate once. A view
/// must follow the subquery's changes too, so here it becomes a left join
/// with the subquery's single row, whose column replaces the subquery.
/// `counter` numbers the joined subqueries so their names are stable.
fn scalar_subqueries_to_joins(plan: LogicalPlan, counter: &Cell<usize>) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up(|node| {
        let found = node.expressions().iter().any(has_scalar_subquery);
        if !found {
            return Ok(Transformed::no(node));
        }
        let rewritten = match node {
            LogicalPlan::Filter(filter) => {
                let original: Vec<Expr> = filter
                    .input
                    .schema()
                    .columns()
                    .into_iter()
                    .map(Expr::Column)
                    .collect();
                let (input, exprs) = join_subqueries(
                    filter.input.as_ref().clone(),
                    vec![filter.predicate],
                    counter,
                )?;
                LogicalPlanBuilder::from(input)
                    .filter(exprs[0].clone())?
                    .project(original)?
                    .build()?
            }
            LogicalPlan::Projection(projection) => {
                let names: Vec<String> = projection
                    .expr
                    .iter()
                    .map(|e| e.schema_name().to_string())
                    .collect();
                let (input, exprs) =
                    join_subqueries(projection.input.as_ref().clone(), projection.expr, counter)?;
                let exprs: Vec<Expr> = exprs
                    .into_iter()
                    .zip(names)
                    .map(|(e, name)| e.alias_if_changed(name))
                    .collect::<Result<_>>()?;
                LogicalPlanBuilder::from(input).project(exprs)?.build()?
            }
            other => {
                return Err(unsupported(format!(
                    "a scalar subquery in {}",
                    other.display()
                )))
            }
        };
        Ok(Transformed::yes(rewritten))
    })?;
    Ok(rewritten.data)
}

fn has_scalar_subquery(expr: &Expr) -> bool {
    expr.exists(|e| Ok(matches!(e, Expr::ScalarSubquery(_))))
        .unwrap_or(false)
}

/// Joins `input` with each scalar subquery in `exprs` and returns the
/// expressions with the subqueries replaced by the joined columns.
fn join_subqueries(
    mut input: LogicalPlan,
    exprs: Vec<Expr>,
    counter: &Cell<usize>,
) -> Result<(LogicalPlan, Vec<Expr>)> {
    let mut joined = Vec::new();
    let mut rewritten = Vec::with_capacity(exprs.len());
    for expr in exprs {
        let expr = expr.transform_up(|e| match e {
            Expr::ScalarSubquery(subquery) => {
                if !subquery.outer_ref_columns.is_empty() {
                    return Err(unsupported(
                        "a correlated scalar subquery that cannot be turned into a join",
                    ));
                }
                let plan = scalar_subqueries_to_joins(subquery.subquery.as_ref().clone(), counter)?;
                if !at_most_one_row(&plan) {
                    return Err(unsupported(
                        "a scalar subquery that may return more than one row (use an aggregate without GROUP BY, or LIMIT 1)",
                    ));
                }
                let alias = format!("__weir_scalar_{}", counter.get());
                counter.set(counter.get() + 1);
                let field = plan.schema().field(0).name().clone();
                joined.push(LogicalPlanBuilder::from(plan).alias(alias.clone())?.build()?);
                Ok(Transformed::yes(Expr::Column(Column::new(Some(alias), field))))
            }
            other => Ok(Transformed::no(other)),
        })?;
        rewritten.push(expr.data);
    }
    for right in joined {
        input = LogicalPlanBuilder::from(input)
            .join_on(
                right,
                JoinType::Left,
                vec![datafusion::logical_expr::lit(true)],
            )?
            .build()?;
    }
    Ok((input, rewritten))
}

/// Whether a plan returns at most one row whatever its inputs hold.
fn at_most_one_row(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Aggregate(a) => a.group_expr.is_empty(),
        LogicalPlan::Limit(limit) => {
            matches!(limit.get_fetch_type(), Ok(FetchType::Literal(Some(n))) if n <= 1)
        }
        LogicalPlan::Sort(sort) if sort.fetch.is_some_and(|n| n <= 1) => true,
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Sort(_) => plan.inputs().iter().all(|i| at_most_one_row(i)),
        _ => false,
    }
}

/// The 0A000 error for a construct a view cannot maintain.
fn unsupported(what: impl Into<String>) -> DataFusionError {
    DataFusionError::NotImplemented(format!("materialized views do not support {}", what.into()))
}

struct Builder {
    nodes: Vec<NodeSpec>,
    props: ExecutionProps,
    /// [`TemporalSide`] nodes planned, and temporal joins over them: every
    /// temporal side must be the right input of a join.
    temporal_sides: usize,
    temporal_joins: usize,
}

impl Builder {
    fn push(&mut self, kind: NodeKind, inputs: Vec<usize>, schema: SchemaRef) -> usize {
        self.nodes.push(NodeSpec {
            kind,
            inputs,
            schema,
            // Worked out once the whole plan is known:
            // `StreamPlan::mark_append_only` and `derive_keys`.
            append_only: false,
            key: None,
        });
        self.nodes.len() - 1
    }

    fn physical(&self, expr: &Expr, schema: &DFSchema) -> Result<PhysicalExprRef> {
        check_no_subquery(expr)?;
        create_physical_expr(
            expr,
            schema,
            &self.props,
            &PhysicalPlanningContext::default(),
        )
    }

    /// Adds the operators of `plan`; returns the index of its output node.
    fn add(&mut self, plan: &LogicalPlan) -> Result<usize> {
        let schema = || Arc::new(plan.schema().as_arrow().clone());
        match plan {
            LogicalPlan::TableScan(scan) => self.scan(scan),
            LogicalPlan::Projection(p) => {
                let input = self.add(&p.input)?;
                let exprs = p
                    .expr
                    .iter()
                    .map(|e| self.physical(e, p.input.schema()))
                    .collect::<Result<_>>()?;
                Ok(self.push(NodeKind::Project { exprs }, vec![input], schema()))
            }
            LogicalPlan::Filter(f) => {
                if let Some(index) = self.window_top_n(f)? {
                    return Ok(index);
                }
                let input = self.add(&f.input)?;
                let predicate = self.physical(&f.predicate, f.input.schema())?;
                Ok(self.push(NodeKind::Filter { predicate }, vec![input], schema()))
            }
            LogicalPlan::SubqueryAlias(a) => self.add(&a.input),
            LogicalPlan::Aggregate(a) => {
                let input = self.add(&a.input)?;
                let input_schema = a.input.schema();
                let mut group = Vec::new();
                for (expr, field) in a.group_expr.iter().zip(plan.schema().fields()) {
                    if matches!(expr, Expr::GroupingSet(_)) {
                        return Err(unsupported("GROUPING SETS, ROLLUP and CUBE"));
                    }
                    group.push((self.physical(expr, input_schema)?, field.name().clone()));
                }
                let mut aggregates = Vec::new();
                let mut filters = Vec::new();
                for expr in &a.aggr_expr {
                    check_aggregate(expr)?;
                    #[allow(deprecated)]
                    let (aggregate, filter, _) = create_aggregate_expr_and_maybe_filter(
                        expr,
                        input_schema,
                        input_schema.as_arrow(),
                        &self.props,
                    )?;
                    aggregates.push(aggregate);
                    filters.push(filter);
                }
                let spec = AggregateSpec {
                    group,
                    aggregates,
                    filters,
                    emit_on_window_close: false,
                };
                Ok(self.push(NodeKind::Aggregate(spec), vec![input], schema()))
            }
            LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(input)) => {
                let index = self.add(input)?;
                let group = input
                    .schema()
                    .columns()
                    .into_iter()
                    .map(|c| {
                        let name = c.name.clone();
                        Ok((self.physical(&Expr::Column(c), input.schema())?, name))
                    })
                    .collect::<Result<_>>()?;
                let spec = AggregateSpec {
                    group,
                    aggregates: Vec::new(),
                    filters: Vec::new(),
                    emit_on_window_close: false,
                };
                Ok(self.push(NodeKind::Aggregate(spec), vec![index], schema()))
            }
            LogicalPlan::Join(j) => {
                if is_temporal_side(&j.left) {
                    return Err(unsupported(
                        "FOR SYSTEM_TIME AS OF PROCTIME() on the left side of a join: the \
                         table looked up goes on the right",
                    ));
                }
                let temporal = is_temporal_side(&j.right);
                let left = self.add(&j.left)?;
                let right = self.add(&j.right)?;
                let mut left_keys = Vec::new();
                let mut right_keys = Vec::new();
                for (l, r) in &j.on {
                    left_keys.push(self.physical(l, j.left.schema())?);
                    right_keys.push(self.physical(r, j.right.schema())?);
                }
                let filter = match &j.filter {
                    Some(f) => {
                        let both = j.left.schema().join(j.right.schema())?;
                        Some(self.physical(f, &both)?)
                    }
                    None => None,
                };
                let spec = JoinSpec {
                    join_type: j.join_type,
                    left_keys,
                    right_keys,
                    filter,
                    nulls_equal: j.null_equality == NullEquality::NullEqualsNull,
                    null_aware: j.null_aware,
                    temporal,
                };
                if temporal {
                    if spec.null_aware {
                        return Err(unsupported(
                            "NOT IN over a table read FOR SYSTEM_TIME AS OF PROCTIME() (NOT EXISTS works)",
                        ));
                    }
                    if !spec.temporal_kind_supported() || spec.left_keys.is_empty() {
                        return Err(unsupported(format!(
                            "a {} temporal join (FOR SYSTEM_TIME AS OF PROCTIME() takes inner, \
                             left outer, semi and anti joins on equal keys)",
                            j.join_type
                        )));
                    }
                    self.temporal_joins += 1;
                }
                Ok(self.push(NodeKind::Join(spec), vec![left, right], schema()))
            }
            LogicalPlan::Union(u) => {
                let inputs = u
                    .inputs
                    .iter()
                    .map(|i| self.add(i))
                    .collect::<Result<_>>()?;
                Ok(self.push(NodeKind::Union, inputs, schema()))
            }
            LogicalPlan::Sort(sort) => match sort.fetch {
                Some(fetch) => self.top_n(sort, 0, Some(fetch)),
                // Rows of a view have no order; a plain ORDER BY only
                // orders the reads that ask for it.
                None => self.add(&sort.input),
            },
            LogicalPlan::Limit(limit) => self.limit(limit),
            LogicalPlan::Values(values) => {
                let rows = self.values(plan.schema(), &values.values)?;
                Ok(self.push(NodeKind::Values { rows }, vec![], schema()))
            }
            LogicalPlan::EmptyRelation(empty) => {
                let count = usize::from(empty.produce_one_row);
                let schema = schema();
                let columns: Vec<ArrayRef> = schema
                    .fields()
                    .iter()
                    .map(|f| datafusion::arrow::array::new_null_array(f.data_type(), count))
                    .collect();
                let rows = RecordBatch::try_new_with_options(
                    schema.clone(),
                    columns,
                    &RecordBatchOptions::new().with_row_count(Some(count)),
                )?;
                Ok(self.push(NodeKind::Values { rows }, vec![], schema))
            }
            LogicalPlan::Extension(extension) => {
                let node = extension.node.as_any();
                if let Some(filter) = node.downcast_ref::<TemporalFilter>() {
                    self.temporal_filter(filter)
                } else if let Some(side) = node.downcast_ref::<TemporalSide>() {
                    self.temporal_sides += 1;
                    self.add(&side.input)
                } else if let Some(stamped) = node.downcast_ref::<ProcTimeNode>() {
                    let input = self.add(&stamped.input)?;
                    let schema = Arc::new(extension.node.schema().as_arrow().clone());
                    Ok(self.push(NodeKind::ProcTime, vec![input], schema))
                } else {
                    Err(unsupported(extension.node.name().to_owned()))
                }
            }
            LogicalPlan::Window(window) => self.window(window),
            LogicalPlan::Distinct(_) => Err(unsupported("DISTINCT ON")),
            LogicalPlan::Unnest(unnest) => self.unnest(unnest, schema()),
            LogicalPlan::RecursiveQuery(_) => Err(unsupported("recursive queries")),
            other => {
                let node = other.display().to_string();
                Err(unsupported(node.split(':').next().unwrap_or("this query")))
            }
        }
    }

    fn scan(&mut self, scan: &TableScan) -> Result<usize> {
        if scan.fetch.is_some() {
            return Err(unsupported("LIMIT without ORDER BY"));
        }
        let relation = scan.table_name.table().to_owned();
        let full: SchemaRef = scan.source.schema();
        let full_df = DFSchema::try_from_qualified_schema(scan.table_name.clone(), &full)?;
        // Filters a provider takes as exact are gone from the plan above
        // and must run here; inexact ones (a table's key lookups,
        // `lookup.rs` in weir-server) are still in the plan above.
        let refs: Vec<&Expr> = scan.filters.iter().collect();
        let exact: Vec<Expr> = scan
            .source
            .supports_filters_pushdown(&refs)?
            .into_iter()
            .zip(&scan.filters)
            .filter(|(support, _)| *support == TableProviderFilterPushDown::Exact)
            .map(|(_, filter)| filter.clone())
            .collect();
        // The columns the projection keeps and the exact filters look at:
        // a source need not produce the others.
        let read = scan.projection.as_ref().map(|projection| {
            let mut read: Vec<usize> = projection.clone();
            for filter in &exact {
                for column in filter.column_refs() {
                    if let Ok(i) = full_df.index_of_column(column) {
                        read.push(i);
                    }
                }
            }
            read.sort_unstable();
            read.dedup();
            read
        });
        let mut index = self.push(NodeKind::Source { relation, read }, vec![], full.clone());
        if let Some(predicate) = exact.into_iter().reduce(|a, b| a.and(b)) {
            let predicate = self.physical(&predicate, &full_df)?;
            index = self.push(NodeKind::Filter { predicate }, vec![index], full.clone());
        }
        let identity = |p: &Vec<usize>| p.iter().copied().eq(0..full.fields().len());
        if let Some(projection) = scan.projection.as_ref().filter(|p| !identity(p)) {
            let exprs = projection
                .iter()
                .map(|&i| {
                    let column = Expr::Column(full_df.columns()[i].clone());
                    self.physical(&column, &full_df)
                })
                .collect::<Result<_>>()?;
            let schema = Arc::new(full.project(projection)?);
            index = self.push(NodeKind::Project { exprs }, vec![index], schema);
        }
        Ok(index)
    }

    /// A filter that keeps the first rows of each partition of a
    /// `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o)` (`rn <= n`, `rn <
    /// n`, `rn = 1`, possibly among other conditions), as a [`GroupTopN`]
    /// numbering only those rows, under the projection between them and
    /// the filter itself; `None` if the filter is not of that form.
    ///
    /// [`GroupTopN`]: weir_stream::NodeKind::GroupTopN
    fn window_top_n(&mut self, filter: &Filter) -> Result<Option<usize>> {
        let (projection, window) = match unaliased(&filter.input) {
            LogicalPlan::Window(window) => (None, window),
            LogicalPlan::Projection(p) => match unaliased(&p.input) {
                LogicalPlan::Window(window) => (Some(p), window),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let [function] = window.window_expr.as_slice() else {
            return Ok(None);
        };
        let Expr::WindowFunction(function) = unalias(function) else {
            return Ok(None);
        };
        let params = &function.params;
        if function.fun.name() != "row_number" || params.order_by.is_empty() {
            return Ok(None);
        }
        // The row number's column in the filter's input.
        let number = window.input.schema().fields().len();
        let number_in_filter = match projection {
            None => Some(number),
            Some(p) => p.expr.iter().position(|e| {
                matches!(unalias(e), Expr::Column(c)
                    if window.schema.index_of_column(c).ok() == Some(number))
            }),
        };
        let Some(number_in_filter) = number_in_filter else {
            return Ok(None);
        };
        let schema = filter.input.schema();
        let fetch = split_conjunction(&filter.predicate)
            .into_iter()
            .filter_map(|conjunct| row_number_bound(conjunct, schema, number_in_filter))
            .min();
        let Some(fetch) = fetch else {
            return Ok(None);
        };
        let input = self.add(&window.input)?;
        let partition = params
            .partition_by
            .iter()
            .map(|e| self.physical(e, window.input.schema()))
            .collect::<Result<_>>()?;
        let order = create_physical_sort_exprs(
            &params.order_by,
            window.input.schema(),
            &self.props,
            &PhysicalPlanningContext::default(),
        )?;
        let spec = GroupTopNSpec {
            partition,
            order,
            fetch,
        };
        let window_schema = Arc::new(window.schema.as_arrow().clone());
        let mut index = self.push(NodeKind::GroupTopN(spec), vec![input], window_schema);
        if let Some(p) = projection {
            let exprs = p
                .expr
                .iter()
                .map(|e| self.physical(e, &window.schema))
                .collect::<Result<_>>()?;
            let schema = Arc::new(p.schema.as_arrow().clone());
            index = self.push(NodeKind::Project { exprs }, vec![index], schema);
        }
        let predicate = self.physical(&filter.predicate, schema)?;
        let schema = Arc::new(schema.as_arrow().clone());
        Ok(Some(self.push(
            NodeKind::Filter { predicate },
            vec![index],
            schema,
        )))
    }

    /// `OVER` window functions that share a sort key (DataFusion puts
    /// functions with other keys in other `Window` nodes).
    fn window(&mut self, window: &Window) -> Result<usize> {
        let input = self.add(&window.input)?;
        let input_schema = window.input.schema();
        let context = PhysicalPlanningContext::default();
        let mut partition: Option<Vec<Expr>> = None;
        let mut functions = Vec::new();
        for expr in &window.window_expr {
            let Expr::WindowFunction(function) = unalias(expr) else {
                return Err(unsupported(format!("window expression {expr}")));
            };
            let picks_by_order = matches!(
                function.fun.name(),
                "row_number"
                    | "lag"
                    | "lead"
                    | "first_value"
                    | "last_value"
                    | "nth_value"
                    | "ntile"
            );
            if picks_by_order && function.params.order_by.is_empty() {
                return Err(unsupported(format!(
                    "{}() without ORDER BY in its window: which row comes first would be arbitrary",
                    function.fun.name()
                )));
            }
            let own = &function.params.partition_by;
            partition = Some(match partition {
                None => own.clone(),
                Some(common) => common.into_iter().filter(|e| own.contains(e)).collect(),
            });
            functions.push(create_window_expr(
                expr,
                &window.schema,
                &self.props,
                &context,
            )?);
        }
        let Some(Expr::WindowFunction(first)) = window.window_expr.first().map(unalias) else {
            return Err(unsupported("a window without functions"));
        };
        let sort_key: Vec<SortExpr> =
            generate_sort_key(&first.params.partition_by, &first.params.order_by)?
                .into_iter()
                .map(|(sort, _)| sort)
                .collect();
        let order = create_physical_sort_exprs(&sort_key, input_schema, &self.props, &context)?;
        let partition = partition
            .unwrap_or_default()
            .iter()
            .map(|e| self.physical(e, input_schema))
            .collect::<Result<_>>()?;
        let spec = WindowSpec {
            partition,
            order,
            functions,
            session: session_spec(window)?,
        };
        let schema = Arc::new(window.schema.as_arrow().clone());
        Ok(self.push(NodeKind::Window(spec), vec![input], schema))
    }

    /// A temporal filter: its bounds' times must be timestamps or dates.
    fn temporal_filter(&mut self, filter: &TemporalFilter) -> Result<usize> {
        let input = self.add(&filter.input)?;
        let schema = filter.input.schema();
        let mut bounds = Vec::new();
        for (value, bound) in filter.values.iter().zip(&filter.bounds) {
            let data_type = value.get_type(schema)?;
            if !matches!(
                data_type,
                DataType::Timestamp(..) | DataType::Date32 | DataType::Date64
            ) {
                return Err(unsupported(format!(
                    "comparing now() with {value} of type {data_type}: it needs a timestamp or a date"
                )));
            }
            bounds.push(TemporalBound {
                value: self.physical(value, schema)?,
                from: bound.kind == BoundKind::From,
                plus_one: bound.plus_one,
            });
        }
        let schema = Arc::new(schema.as_arrow().clone());
        Ok(self.push(NodeKind::TemporalFilter { bounds }, vec![input], schema))
    }

    /// `unnest` of one list column, one level deep (what a select-list
    /// `unnest(list)` and `HOP` plan to).
    fn unnest(&mut self, unnest: &Unnest, schema: SchemaRef) -> Result<usize> {
        let [(column, list)] = unnest.list_type_columns.as_slice() else {
            return Err(unsupported("UNNEST of more than one list"));
        };
        let identity = unnest
            .dependency_indices
            .iter()
            .copied()
            .eq(0..schema.fields().len());
        if !unnest.struct_type_columns.is_empty() || list.depth != 1 || !identity {
            return Err(unsupported("UNNEST of structs or nested lists"));
        }
        let input = self.add(&unnest.input)?;
        let (keep_null, keep_empty) = match unnest.options.null_handling {
            NullHandling::Drop => (false, false),
            NullHandling::Preserve => (true, false),
            NullHandling::PreserveAndExpandEmpty => (true, true),
        };
        let kind = NodeKind::Unnest {
            column: *column,
            keep_null,
            keep_empty,
        };
        Ok(self.push(kind, vec![input], schema))
    }

    fn limit(&mut self, limit: &Limit) -> Result<usize> {
        let skip = match limit.get_skip_type()? {
            SkipType::Literal(n) => n,
            SkipType::UnsupportedExpr => return Err(unsupported("OFFSET that is not a constant")),
        };
        let fetch = match limit.get_fetch_type()? {
            FetchType::Literal(n) => n,
            FetchType::UnsupportedExpr => return Err(unsupported("LIMIT that is not a constant")),
        };
        match limit.input.as_ref() {
            LogicalPlan::Sort(sort) => self.top_n(sort, skip, fetch),
            _ => Err(unsupported(
                "LIMIT or OFFSET without ORDER BY (which rows it keeps would be arbitrary)",
            )),
        }
    }

    fn top_n(&mut self, sort: &Sort, skip: usize, fetch: Option<usize>) -> Result<usize> {
        let input = self.add(&sort.input)?;
        let order = create_physical_sort_exprs(
            &sort.expr,
            sort.input.schema(),
            &self.props,
            &PhysicalPlanningContext::default(),
        )?;
        let schema = Arc::new(sort.input.schema().as_arrow().clone());
        let spec = TopNSpec { order, skip, fetch };
        Ok(self.push(NodeKind::TopN(spec), vec![input], schema))
    }

    /// Constant rows, evaluated once.
    fn values(&self, schema: &DFSchema, rows: &[Vec<Expr>]) -> Result<RecordBatch> {
        let empty = DFSchema::empty();
        let one_row = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let arrow: SchemaRef = Arc::new(schema.as_arrow().clone());
        let mut columns: Vec<ArrayRef> = Vec::new();
        for (c, field) in arrow.fields().iter().enumerate() {
            let mut cells = Vec::with_capacity(rows.len());
            for row in rows {
                let value = self.physical(&row[c], &empty)?.evaluate(&one_row)?;
                let value = match value {
                    datafusion::logical_expr::ColumnarValue::Scalar(s) => s,
                    datafusion::logical_expr::ColumnarValue::Array(a) => {
                        ScalarValue::try_from_array(&a, 0)?
                    }
                };
                cells.push(value.cast_to(field.data_type())?);
            }
            columns.push(if cells.is_empty() {
                new_empty_array(field.data_type())
            } else {
                ScalarValue::iter_to_array(cells)?
            });
        }
        Ok(RecordBatch::try_new_with_options(
            arrow,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?)
    }
}

/// Refuses a subquery DataFusion could not turn into a join.
fn check_no_subquery(expr: &Expr) -> Result<()> {
    expr.apply(|e| match e {
        Expr::ScalarSubquery(_)
        | Expr::Exists(_)
        | Expr::InSubquery(_)
        | Expr::SetComparison(_) => {
            Err(unsupported("a subquery that cannot be turned into a join"))
        }
        _ => Ok(TreeNodeRecursion::Continue),
    })?;
    Ok(())
}

/// Refuses aggregates the engine cannot recompute per group.
fn check_aggregate(expr: &Expr) -> Result<()> {
    let inner = match expr {
        Expr::Alias(alias) => alias.expr.as_ref(),
        other => other,
    };
    match inner {
        Expr::AggregateFunction(AggregateFunction { .. }) => Ok(()),
        other => Err(unsupported(format!("aggregate expression {other}"))),
    }
}

/// The plan under any subquery aliases.
fn unaliased(plan: &LogicalPlan) -> &LogicalPlan {
    match plan {
        LogicalPlan::SubqueryAlias(alias) => unaliased(&alias.input),
        other => other,
    }
}

/// The expression under any aliases.
fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => unalias(&alias.expr),
        other => other,
    }
}

/// How many rows of a partition `conjunct` keeps when it bounds the row
/// number in column `number` of `schema` (`rn <= 3`, `rn < 4`, `3 >= rn`,
/// `rn = 1`); `None` if it does not bound it.
fn row_number_bound(conjunct: &Expr, schema: &DFSchema, number: usize) -> Option<usize> {
    let Expr::BinaryExpr(binary) = conjunct else {
        return None;
    };
    let is_number = |e: &Expr| {
        let e = match e {
            Expr::Cast(cast) => cast.expr.as_ref(),
            Expr::TryCast(cast) => cast.expr.as_ref(),
            other => other,
        };
        matches!(e, Expr::Column(c) if schema.index_of_column(c).ok() == Some(number))
    };
    let literal = |e: &Expr| -> Option<i128> {
        let value = match e {
            Expr::Literal(value, _) => value,
            Expr::Cast(cast) => match cast.expr.as_ref() {
                Expr::Literal(value, _) => value,
                _ => return None,
            },
            _ => return None,
        };
        value
            .cast_to(&datafusion::arrow::datatypes::DataType::Int64)
            .ok()
            .and_then(|v| match v {
                ScalarValue::Int64(Some(n)) => Some(i128::from(n)),
                _ => None,
            })
    };
    use datafusion::logical_expr::Operator as Op;
    let (op, bound) = if is_number(&binary.left) {
        (binary.op, literal(&binary.right)?)
    } else if is_number(&binary.right) {
        (binary.op.swap()?, literal(&binary.left)?)
    } else {
        return None;
    };
    let rows = match op {
        Op::LtEq | Op::Eq if bound >= 1 => bound,
        Op::Lt if bound >= 2 => bound - 1,
        _ => return None,
    };
    // `rn = 3` keeps only the third row, but numbering the first three is
    // still exact: the filter above drops the others.
    usize::try_from(rows).ok()
}

/// The sessions `window` computes, if every one of its functions is
/// `session_start` or `session_end` over one input column and one
/// constant gap (see `weir_stream::session`).
fn session_spec(window: &Window) -> Result<Option<SessionSpec>> {
    let input_schema = window.input.schema();
    let width = input_schema.fields().len();
    let mut sessions: Option<(usize, i64)> = None;
    let mut ends = Vec::new();
    for (k, expr) in window.window_expr.iter().enumerate() {
        let Expr::WindowFunction(function) = unalias(expr) else {
            return Ok(None);
        };
        let name = function.fun.name();
        if name != SESSION_START && name != SESSION_END {
            return Ok(None);
        }
        let [Expr::Column(time), Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(gap)), _)] =
            function.params.args.as_slice()
        else {
            return Ok(None);
        };
        let time = input_schema.index_of_column(time)?;
        let gap = gap_in_units(*gap, input_schema.field(time).data_type())?;
        if sessions.is_some_and(|s| s != (time, gap)) {
            return Ok(None);
        }
        sessions = Some((time, gap));
        if name == SESSION_END {
            ends.push(width + k);
        }
    }
    Ok(sessions.map(|(time, gap)| SessionSpec { time, gap, ends }))
}
