//! Temporal joins in views: a table read `FOR SYSTEM_TIME AS OF PROCTIME()`
//! (see [`crate::system_time`]) on the right of a join is looked up as it
//! is when each left row is processed, as Flink's and RisingWave's
//! processing-time temporal joins do. DataFusion's planner ignores the
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
use datafusion::common::DFSchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::sql::sqlparser::ast::{
    Ident, ObjectNamePart, Query, TableFactor, TableVersion, Visit, Visitor,
};

/// A table read `FOR SYSTEM_TIME AS OF PROCTIME()`: its name and the
/// name its columns are qualified by (its alias, else its name), as the
/// planner normalizes them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TemporalTable {
    table: String,
    qualifier: String,
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
    if let Some(both) = finder.lookups.intersection(&finder.others).next() {
        return Err(DataFusionError::NotImplemented(format!(
            "materialized views do not support reading \"{}\" as \"{}\" both with and \
             without FOR SYSTEM_TIME AS OF: give the lookup its own alias",
            both.table, both.qualifier
        )));
    }
    Ok(finder.lookups.into_iter().collect())
}

#[derive(Default)]
struct Finder {
    lookups: HashSet<TemporalTable>,
    others: HashSet<TemporalTable>,
    /// Table functions read with the clause.
    functions: Vec<String>,
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
        let temporal = matches!(version, Some(TableVersion::ForSystemTimeAsOf(_)));
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
        let read = TemporalTable { table, qualifier };
        if temporal {
            self.lookups.insert(read);
        } else {
            self.others.insert(read);
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
    let is_lookup = |table: &str, qualifier: &str| match lookups
        .iter()
        .position(|l| l.table == table && l.qualifier == qualifier)
    {
        Some(i) => {
            marked.borrow_mut()[i] = true;
            true
        }
        None => false,
    };
    let rewritten = plan.transform_down_with_subqueries(|node| {
        let read = match &node {
            LogicalPlan::SubqueryAlias(alias) => match alias.input.as_ref() {
                LogicalPlan::TableScan(scan) => {
                    Some(is_lookup(scan.table_name.table(), alias.alias.table()))
                }
                _ => None,
            },
            LogicalPlan::TableScan(scan) => {
                let table = scan.table_name.table();
                Some(is_lookup(table, table))
            }
            _ => None,
        };
        Ok(match read {
            // An aliased scan is not an unaliased reference to its table.
            Some(false) => Transformed::new(node, false, TreeNodeRecursion::Jump),
            Some(true) => Transformed::new(
                LogicalPlan::Extension(Extension {
                    node: Arc::new(TemporalSide { input: node }),
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
    Ok(rewritten.data)
}

/// The right side of a temporal join: `input`'s rows, looked up rather than
/// joined as they change.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct TemporalSide {
    /// The table's scan.
    pub input: LogicalPlan,
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
        Ok(TemporalSide { input })
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        Some(vec![output_columns.to_vec()])
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}

/// Whether `plan` (a join's input) is a [`TemporalSide`], under filters,
/// projections and aliases of its rows.
pub(crate) fn is_temporal_side(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().is::<TemporalSide>(),
        LogicalPlan::Filter(f) => is_temporal_side(&f.input),
        LogicalPlan::Projection(p) => is_temporal_side(&p.input),
        LogicalPlan::SubqueryAlias(a) => is_temporal_side(&a.input),
        _ => false,
    }
}
