//! Temporal joins in views: a table read `FOR SYSTEM_TIME AS OF PROCTIME()`
//! (or, in Flink's form, `AS OF` a column of the left side that holds
//! `PROCTIME()`; see [`crate::system_time`]) on the right of a join is
//! looked up as it is when each left row is processed, as Flink's and
//! RisingWave's processing-time temporal joins do. DataFusion's planner ignores the
//! clause, so before planning, [`temporal_tables`] lists the factors that
//! carry it, and [`mark_temporal_tables`] puts a [`TemporalSide`] node over
//! their scans in the logical plan. The stream planner makes the join
//! above such a node a temporal join (`weir_stream`'s `join.rs`). A plain
//! query reads the table as it is, which is what the clause means there.

use std::collections::HashSet;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{Column, DFSchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, Ident, ObjectNamePart, Query, TableFactor, TableVersion, Visit, Visitor,
};

/// A table read `FOR SYSTEM_TIME AS OF PROCTIME()`: its name and the
/// name its columns are qualified by (its alias, else its name), as the
/// planner normalizes them, and the column named as its time in Flink's
/// form (`AS OF b.p_time`), which must hold `PROCTIME()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemporalTable {
    table: String,
    qualifier: String,
    time: Option<Column>,
}

/// An identifier as DataFusion's planner normalizes it: lowercased unless
/// quoted.
fn normalized(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The tables `query` reads `FOR SYSTEM_TIME AS OF PROCTIME()`. The same
/// table under the same name read without the clause too is refused: the
/// plan could not tell the two apart.
pub fn temporal_tables(query: &Query) -> Result<Vec<TemporalTable>> {
    let mut finder = Finder::default();
    let _ = query.visit(&mut finder);
    if let Some(function) = finder.functions.first() {
        return Err(DataFusionError::NotImplemented(format!(
            "materialized views do not support FOR SYSTEM_TIME AS OF on the table function \
             {function}: it applies to a table, source or materialized view"
        )));
    }
    if let Some(time) = finder.times.first() {
        return Err(DataFusionError::NotImplemented(format!(
            "materialized views do not support FOR SYSTEM_TIME AS OF {time}: it takes \
             PROCTIME() or a column holding it"
        )));
    }
    let both = finder.lookups.iter().find(|l| {
        finder
            .others
            .contains(&(l.table.clone(), l.qualifier.clone()))
    });
    if let Some(both) = both {
        return Err(DataFusionError::NotImplemented(format!(
            "materialized views do not support reading \"{}\" as \"{}\" both with and \
             without FOR SYSTEM_TIME AS OF: give the lookup its own alias",
            both.table, both.qualifier
        )));
    }
    Ok(finder.lookups)
}

#[derive(Default)]
struct Finder {
    lookups: Vec<TemporalTable>,
    /// Tables read without the clause, by name and qualifier.
    others: HashSet<(String, String)>,
    /// Table functions read with the clause.
    functions: Vec<String>,
    /// Times after `AS OF` that are neither `PROCTIME()` nor a column.
    times: Vec<String>,
}

/// The column a time after `AS OF` names; `None` for `PROCTIME()`.
fn time_column(time: &SqlExpr) -> std::result::Result<Option<Column>, String> {
    match time {
        SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case("proctime") => Ok(None),
        SqlExpr::Identifier(name) => Ok(Some(Column::new_unqualified(normalized(name)))),
        SqlExpr::CompoundIdentifier(names) => match &names[..] {
            [relation, name] => Ok(Some(Column::new(
                Some(normalized(relation)),
                normalized(name),
            ))),
            _ => Err(time.to_string()),
        },
        _ => Err(time.to_string()),
    }
}

impl Visitor for Finder {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            alias,
            version,
            args,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let time = match version {
            Some(TableVersion::ForSystemTimeAsOf(time)) => Some(time),
            _ => None,
        };
        let temporal = time.is_some();
        if args.is_some() {
            if temporal {
                self.functions.push(name.to_string());
            }
            return ControlFlow::Continue(());
        }
        let Some(ObjectNamePart::Identifier(last)) = name.0.last() else {
            return ControlFlow::Continue(());
        };
        let table = normalized(last);
        let qualifier = alias
            .as_ref()
            .map_or_else(|| table.clone(), |a| normalized(&a.name));
        match time.map(time_column) {
            Some(Ok(time)) => self.lookups.push(TemporalTable {
                table,
                qualifier,
                time,
            }),
            Some(Err(time)) => self.times.push(time),
            None => {
                self.others.insert((table, qualifier));
            }
        }
        ControlFlow::Continue(())
    }
}

/// Puts a [`TemporalSide`] over each scan of `plan` that reads one of
/// `lookups` (the scan, or its alias over it). A name read with the
/// clause that is no scan (a `WITH` query's) is refused.
pub fn mark_temporal_tables(plan: LogicalPlan, lookups: &[TemporalTable]) -> Result<LogicalPlan> {
    if lookups.is_empty() {
        return Ok(plan);
    }
    let marked = std::cell::RefCell::new(vec![false; lookups.len()]);
    // The read of `table` as `qualifier` among `lookups`, if it is one.
    let lookup_of = |table: &str, qualifier: &str| {
        let i = lookups
            .iter()
            .position(|l| l.table == table && l.qualifier == qualifier)?;
        marked.borrow_mut()[i] = true;
        Some(&lookups[i])
    };
    let rewritten = plan.transform_down_with_subqueries(|node| {
        let read = match &node {
            LogicalPlan::SubqueryAlias(alias) => match alias.input.as_ref() {
                LogicalPlan::TableScan(scan) => {
                    Some(lookup_of(scan.table_name.table(), alias.alias.table()))
                }
                _ => None,
            },
            LogicalPlan::TableScan(scan) => {
                let table = scan.table_name.table();
                Some(lookup_of(table, table))
            }
            _ => None,
        };
        Ok(match read {
            // An aliased scan is not an unaliased reference to its table.
            Some(None) => Transformed::new(node, false, TreeNodeRecursion::Jump),
            Some(Some(lookup)) => Transformed::new(
                LogicalPlan::Extension(Extension {
                    node: Arc::new(TemporalSide {
                        input: node,
                        time: lookup.time.clone(),
                    }),
                }),
                true,
                TreeNodeRecursion::Jump,
            ),
            None => Transformed::no(node),
        })
    })?;
    if let Some(i) = marked.borrow().iter().position(|&m| !m) {
        return Err(DataFusionError::NotImplemented(format!(
            "materialized views do not support FOR SYSTEM_TIME AS OF on \"{}\": it applies to \
             a table, source or materialized view",
            lookups[i].qualifier
        )));
    }
    check_times(&rewritten.data)?;
    Ok(rewritten.data)
}

/// Checks that the column each temporal join names as its time (Flink's
/// `AS OF b.p_time`) holds `PROCTIME()` of the join's left side: a time
/// of the events would ask for a versioned table, which Weir does not
/// keep.
fn check_times(plan: &LogicalPlan) -> Result<()> {
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Join(join) = node {
            if let Some(time) = temporal_side(&join.right).and_then(|s| s.time.as_ref()) {
                if !holds_proctime(&join.left, time) {
                    return Err(DataFusionError::NotImplemented(format!(
                        "materialized views do not support FOR SYSTEM_TIME AS OF {time}: the \
                         column must hold PROCTIME() of the join's left side (a temporal join \
                         by event time is not supported)"
                    )));
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(())
}

/// Whether `column` of `plan`'s output is `PROCTIME()`, passed through
/// projections, aliases, filters and joins.
fn holds_proctime(plan: &LogicalPlan, column: &Column) -> bool {
    let Ok(index) = plan.schema().index_of_column(column) else {
        return false;
    };
    let input_column =
        |input: &LogicalPlan, index: usize| Column::from(input.schema().qualified_field(index));
    match plan {
        LogicalPlan::Projection(projection) => {
            let mut expr = &projection.expr[index];
            while let Expr::Alias(alias) = expr {
                expr = &alias.expr;
            }
            match expr {
                Expr::ScalarFunction(f) => f.func.name() == crate::proctime::PROCTIME,
                Expr::Column(c) => holds_proctime(&projection.input, c),
                _ => false,
            }
        }
        LogicalPlan::SubqueryAlias(alias) => {
            holds_proctime(&alias.input, &input_column(&alias.input, index))
        }
        LogicalPlan::Filter(filter) => holds_proctime(&filter.input, column),
        LogicalPlan::Join(join) => {
            let left = join.left.schema().fields().len();
            match index.checked_sub(left) {
                None => holds_proctime(&join.left, &input_column(&join.left, index)),
                Some(right) => holds_proctime(&join.right, &input_column(&join.right, right)),
            }
        }
        _ => false,
    }
}

/// The right side of a temporal join: `input`'s rows, looked up rather than
/// joined as they change.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct TemporalSide {
    /// The table's scan.
    pub input: LogicalPlan,
    /// The left side's column named as the time (Flink's form), which
    /// must hold `PROCTIME()`; `None` for `AS OF PROCTIME()`.
    pub time: Option<Column>,
}

impl UserDefinedLogicalNodeCore for TemporalSide {
    fn name(&self) -> &str {
        "TemporalSide"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    // Filters on the table's columns go below it, to its scan.
    fn prevent_predicate_push_down_columns(&self) -> HashSet<String> {
        HashSet::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "TemporalSide")
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        let [input] = <[LogicalPlan; 1]>::try_from(inputs)
            .map_err(|_| DataFusionError::Internal("a temporal side has one input".into()))?;
        Ok(TemporalSide {
            input,
            time: self.time.clone(),
        })
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        Some(vec![output_columns.to_vec()])
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}

/// The [`TemporalSide`] `plan` (a join's input) is, under filters,
/// projections and aliases of its rows.
fn temporal_side(plan: &LogicalPlan) -> Option<&TemporalSide> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<TemporalSide>(),
        LogicalPlan::Filter(f) => temporal_side(&f.input),
        LogicalPlan::Projection(p) => temporal_side(&p.input),
        LogicalPlan::SubqueryAlias(a) => temporal_side(&a.input),
        _ => None,
    }
}

/// Whether `plan` (a join's input) is a [`TemporalSide`] (see
/// [`temporal_side`]).
pub(crate) fn is_temporal_side(plan: &LogicalPlan) -> bool {
    temporal_side(plan).is_some()
}
