//! Temporal filters: `WHERE ts > now() - INTERVAL '1 hour'` in a view.
//!
//! A view cannot compare with the time of the query that created it:
//! such a condition is about the time the view is read. Each conjunct of a
//! `WHERE` that compares an expression of the row with `now()` (plus or
//! minus constants) is solved for `now()`: it holds from some time on
//! (`ts + INTERVAL '1 hour' <= now()`: the row enters then), or until
//! some time (`now() < ts + INTERVAL '1 hour'`: the row leaves then), or
//! both. The conjuncts leave the filter, which keeps the others, and go
//! into a [`TemporalFilter`] node above it; the stream planner makes that
//! node an operator that holds the rows and lets them in and out as the
//! epoch clock passes their times ([`weir_stream::NodeKind::TemporalFilter`]).
//!
//! This runs on the plan before DataFusion's optimizer, which would fold
//! `now()` into the creating query's time.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::DFSchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, Expr, Extension, Filter, LogicalPlan, Operator, UserDefinedLogicalNodeCore,
};

/// How a bound limits when a row is in the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
pub enum BoundKind {
    /// In from this time on (`now() >= time`).
    From,
    /// In until this time (`now() < time`).
    Until,
}

/// One time bound of a temporal filter: `value` (an expression of the
/// row giving a timestamp or date), plus one microsecond if `plus_one`
/// (a strict `>` from, an inclusive `<=` until).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct TimeBound {
    /// From or until.
    pub kind: BoundKind,
    /// Whether the time is one microsecond after `value`.
    pub plus_one: bool,
}

/// The logical node of a temporal filter: `input`'s rows while `now()`
/// is within all the bounds. `values[i]` is the time of `bounds[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TemporalFilter {
    /// The filtered rows.
    pub input: LogicalPlan,
    /// Each bound's time, over `input`'s columns.
    pub values: Vec<Expr>,
    /// What each time means.
    pub bounds: Vec<TimeBound>,
}

impl PartialOrd for TemporalFilter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        match self.input.partial_cmp(&other.input) {
            Some(std::cmp::Ordering::Equal) => self.values.partial_cmp(&other.values),
            ordering => ordering,
        }
    }
}

impl UserDefinedLogicalNodeCore for TemporalFilter {
    fn name(&self) -> &str {
        "TemporalFilter"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        self.values.clone()
    }

    // A filter commutes with other filters: any may go below it.
    fn prevent_predicate_push_down_columns(&self) -> HashSet<String> {
        HashSet::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "TemporalFilter: ")?;
        for (i, (value, bound)) in self.values.iter().zip(&self.bounds).enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            let op = match (bound.kind, bound.plus_one) {
                (BoundKind::From, false) => ">=",
                (BoundKind::From, true) => ">",
                (BoundKind::Until, false) => "<",
                (BoundKind::Until, true) => "<=",
            };
            write!(f, "now() {op} {value}")?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(&self, exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        let [input] = <[LogicalPlan; 1]>::try_from(inputs)
            .map_err(|_| DataFusionError::Internal("a temporal filter has one input".into()))?;
        Ok(TemporalFilter {
            input,
            values: exprs,
            bounds: self.bounds.clone(),
        })
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        // The output is the input; the bounds' columns are added by the
        // optimizer from `expressions`.
        Some(vec![output_columns.to_vec()])
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}

/// Moves every conjunct that compares with `now()` out of the plan's
/// filters into [`TemporalFilter`] nodes; refuses a `now()` anywhere it
/// cannot be solved for (0A000).
pub fn extract_temporal_filters(plan: LogicalPlan) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up(|node| {
        let LogicalPlan::Filter(filter) = node else {
            return Ok(Transformed::no(node));
        };
        if !has_now(&filter.predicate) {
            return Ok(Transformed::no(LogicalPlan::Filter(filter)));
        }
        let mut rest = Vec::new();
        let mut values = Vec::new();
        let mut bounds = Vec::new();
        for conjunct in split_conjunction(&filter.predicate) {
            if !has_now(conjunct) {
                rest.push(conjunct.clone());
                continue;
            }
            for (value, bound) in solve(conjunct)? {
                values.push(value);
                bounds.push(bound);
            }
        }
        let input = match conjunction(rest) {
            Some(predicate) => LogicalPlan::Filter(Filter::try_new(predicate, filter.input)?),
            None => Arc::unwrap_or_clone(filter.input),
        };
        let node = TemporalFilter {
            input,
            values,
            bounds,
        };
        Ok(Transformed::yes(LogicalPlan::Extension(Extension {
            node: Arc::new(node),
        })))
    })?;
    Ok(rewritten.data)
}

/// Whether `expr` calls `now()` (or `current_timestamp`, its alias).
fn has_now(expr: &Expr) -> bool {
    expr.exists(|e| Ok(is_now(e))).unwrap_or(false)
}

fn is_now(expr: &Expr) -> bool {
    matches!(expr, Expr::ScalarFunction(f) if f.func.name() == "now")
}

fn refuse(conjunct: &Expr) -> DataFusionError {
    DataFusionError::NotImplemented(format!(
        "materialized views do not support now() in {conjunct}: a view may compare an expression of its rows with now() plus or minus constants (ts > now() - INTERVAL '1 hour'), as a condition of its WHERE joined by AND"
    ))
}

/// The bounds `conjunct` (`row op now() ± constants`, either way round)
/// puts on `now()`.
fn solve(conjunct: &Expr) -> Result<Vec<(Expr, TimeBound)>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else {
        return Err(refuse(conjunct));
    };
    // `now() - row op k`  ⇔  `now() op row + k` (`now() - ts < INTERVAL
    // '1 hour'`), either way round.
    let difference = |e: &Expr| match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Minus,
            right,
        }) if has_now(left) && !has_now(right) => Some((left.clone(), right.clone())),
        _ => None,
    };
    let plus = |a: &Expr, b: Box<Expr>| {
        Box::new(Expr::BinaryExpr(BinaryExpr::new(
            b,
            Operator::Plus,
            Box::new(a.clone()),
        )))
    };
    if let (Some((now_side, row)), false) = (difference(left), has_now(right)) {
        let moved = BinaryExpr::new(now_side, *op, plus(right, row));
        return solve(&Expr::BinaryExpr(moved));
    }
    if let (Some((now_side, row)), false) = (difference(right), has_now(left)) {
        let moved = BinaryExpr::new(plus(left, row), *op, now_side);
        return solve(&Expr::BinaryExpr(moved));
    }
    // `row op now + offsets`.
    let (row, op, now_side) = match (has_now(left), has_now(right)) {
        (false, true) => (left.as_ref(), *op, right.as_ref()),
        (true, false) => (
            right.as_ref(),
            op.swap().ok_or_else(|| refuse(conjunct))?,
            left.as_ref(),
        ),
        _ => return Err(refuse(conjunct)),
    };
    let mut offsets = Vec::new();
    if !now_plus(now_side, &mut offsets) {
        return Err(refuse(conjunct));
    }
    // now + Σ offsets op' row  ⇔  now op'' row - Σ offsets.
    let value = offsets
        .into_iter()
        .fold(row.clone(), |value, (add, offset)| {
            let op = if add { Operator::Minus } else { Operator::Plus };
            Expr::BinaryExpr(BinaryExpr::new(Box::new(value), op, Box::new(offset)))
        });
    let bound = |kind, plus_one| (value.clone(), TimeBound { kind, plus_one });
    Ok(match op {
        // row > now + k  ⇔  now < row - k
        Operator::Gt => vec![bound(BoundKind::Until, false)],
        // row >= now + k  ⇔  now <= row - k
        Operator::GtEq => vec![bound(BoundKind::Until, true)],
        // row < now + k  ⇔  now > row - k
        Operator::Lt => vec![bound(BoundKind::From, true)],
        // row <= now + k  ⇔  now >= row - k
        Operator::LtEq => vec![bound(BoundKind::From, false)],
        Operator::Eq => vec![bound(BoundKind::From, false), bound(BoundKind::Until, true)],
        _ => return Err(refuse(conjunct)),
    })
}

fn is_timestamp(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Timestamp(..))
}

/// Whether `expr` is `now()` (under casts to timestamps) plus or minus expressions
/// without `now()`; collects those as (added, expression).
fn now_plus(expr: &Expr, offsets: &mut Vec<(bool, Expr)>) -> bool {
    match expr {
        e if is_now(e) => true,
        // To another timestamp type (in UTC, as views compute): the same
        // instant.
        Expr::Cast(cast) if is_timestamp(cast.field.data_type()) => now_plus(&cast.expr, offsets),
        Expr::TryCast(cast) if is_timestamp(cast.field.data_type()) => {
            now_plus(&cast.expr, offsets)
        }
        Expr::Alias(alias) => now_plus(&alias.expr, offsets),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let constant = |e: &Expr| !has_now(e) && e.column_refs().is_empty();
            match op {
                Operator::Plus if constant(right) => {
                    offsets.push((true, right.as_ref().clone()));
                    now_plus(left, offsets)
                }
                Operator::Plus if constant(left) => {
                    offsets.push((true, left.as_ref().clone()));
                    now_plus(right, offsets)
                }
                Operator::Minus if constant(right) => {
                    offsets.push((false, right.as_ref().clone()));
                    now_plus(left, offsets)
                }
                _ => false,
            }
        }
        _ => false,
    }
}
