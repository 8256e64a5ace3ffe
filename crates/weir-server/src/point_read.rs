//! Point reads without planning. Planning a statement in DataFusion costs
//! far more than looking up one key, and DataFusion cannot bind new
//! parameters into a physical plan, so a prepared statement of the shape
//!
//! ```sql
//! SELECT columns FROM relation WHERE col = $1 [AND col2 = $2 ...]
//! SELECT columns FROM relation WHERE col BETWEEN $1 AND $2  -- or >, >=, <, <=
//! ```
//!
//! whose equalities fix the leading columns of one of the relation's
//! orders (its primary key, a view's key, an index: `lookup.rs`), or
//! whose bounds limit the first column of one, is recognised once, at
//! Parse, as a [`PointRead`]. Its first execution goes
//! through the planner like any statement and teaches it the result's
//! schema (names, types and how values are written); later executions
//! look the key up in the session's read snapshot directly and send the
//! rows under that schema. Anything the shortcut does not cover exactly
//! (another relation now bears the name, a parameter that does not fit
//! the column, a `timestamptz` column, whose rows depend on the session's
//! time zone) goes through the planner instead.

use std::ops::Bound;
use std::sync::OnceLock;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr as SqlExpr, GroupByExpr, Query, Select, SelectItem, SetExpr, Statement,
    TableFactor, Value,
};
use weir_state::{KeySelection, TableId};

use crate::catalog::{normalize_ident, relation_name, Catalog};
use crate::error::WeirResult;
use crate::lookup::stored_value;
use crate::session::{Output, Params, Session};

/// A prepared point read (see the module documentation).
#[derive(Debug)]
pub struct PointRead {
    relation: String,
    /// The relation's id when the statement was prepared.
    id: TableId,
    /// The columns of the order it reads.
    order: Vec<usize>,
    /// The parameters (0-based) that pick its rows.
    keys: Keys,
    /// The columns it returns.
    projection: Vec<usize>,
    /// The result's schema, from the first execution.
    schema: OnceLock<SchemaRef>,
}

impl PointRead {
    /// The point read `statement` is, if it is one.
    pub fn recognise(catalog: &Catalog, statement: &Statement) -> Option<PointRead> {
        let Statement::Query(query) = statement else {
            return None;
        };
        let select = plain_select(query)?;
        let [from] = select.from.as_slice() else {
            return None;
        };
        let TableFactor::Table {
            name,
            args: None,
            alias,
            ..
        } = &from.relation
        else {
            return None;
        };
        // `FROM t AS u (a, b)` renames the columns.
        if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
            return None;
        }
        if !from.joins.is_empty() {
            return None;
        }
        let relation = relation_name(name).ok()?;
        let (id, columns) = match (
            catalog.tables.get(&relation),
            catalog.materialized_views.get(&relation),
        ) {
            (Some(table), _) => (table.id, &table.columns),
            (None, Some(view)) if view.key.is_some() && view.sink.is_none() => {
                (view.id, &view.columns)
            }
            _ => return None,
        };
        let column_of = |e: &SqlExpr| -> Option<usize> {
            let ident = match e {
                SqlExpr::Identifier(ident) => ident,
                SqlExpr::CompoundIdentifier(parts) if parts.len() == 2 => &parts[1],
                _ => return None,
            };
            let name = normalize_ident(ident);
            columns.iter().position(|c| c.name == name)
        };
        let mut projection = Vec::new();
        for item in &select.projection {
            match item {
                SelectItem::Wildcard(_) => projection.extend(0..columns.len()),
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    projection.push(column_of(e)?)
                }
                _ => return None,
            }
        }
        if projection
            .iter()
            .any(|&c| matches!(columns[c].data_type, DataType::Timestamp(_, Some(_))))
        {
            return None;
        }
        // Every conjunct a column against a parameter.
        let mut conditions = Vec::new();
        for conjunct in conjuncts(select.selection.as_ref()?) {
            conditions.extend(condition(conjunct, &column_of)?);
        }
        let equal: Vec<(usize, usize)> = conditions
            .iter()
            .filter_map(|c| match c {
                Condition::Equal(column, p) => Some((*column, *p)),
                _ => None,
            })
            .collect();
        // Two equalities on one column: left to the planner.
        let columns_fixed: std::collections::BTreeSet<usize> =
            equal.iter().map(|(c, _)| *c).collect();
        if columns_fixed.len() != equal.len() {
            return None;
        }
        let orders = catalog.orders(&relation);
        let (order, keys) = if equal.len() == conditions.len() {
            // The order whose leading columns they fix, all of them used.
            let order = orders.into_iter().find(|order| {
                equal.len() <= order.columns.len()
                    && order.columns[..equal.len()]
                        .iter()
                        .all(|c| equal.iter().any(|(e, _)| e == c))
            })?;
            let parameters = order.columns[..equal.len()]
                .iter()
                .map(|c| equal.iter().find(|(e, _)| e == c).map(|(_, p)| *p))
                .collect::<Option<Vec<_>>>()?;
            (order, Keys::Equal(parameters))
        } else {
            // Else bounds on one column, the first of an order.
            let (mut lower, mut upper, mut column) = (None, None, None);
            for c in &conditions {
                let (at, bound, slot) = match c {
                    Condition::Lower(at, p, included) => (*at, (*p, *included), &mut lower),
                    Condition::Upper(at, p, included) => (*at, (*p, *included), &mut upper),
                    Condition::Equal(..) => return None,
                };
                if slot.replace(bound).is_some() || *column.get_or_insert(at) != at {
                    return None;
                }
            }
            let column = column?;
            let order = orders.into_iter().find(|o| o.columns[0] == column)?;
            (order, Keys::Range { lower, upper })
        };
        Some(PointRead {
            relation,
            id,
            order: order.columns,
            keys,
            projection,
            schema: OnceLock::new(),
        })
    }

    /// Learns the result's schema from an execution through the planner.
    /// Only a schema read from the relation this point read was made
    /// for is learned: the planner read `catalog`.
    pub fn learn(&self, schema: &SchemaRef, catalog: &Catalog) {
        if self.is_current(catalog) {
            let _ = self.schema.set(schema.clone());
        }
    }

    /// Whether `catalog`'s relation of this name is the one it was made
    /// for.
    fn is_current(&self, catalog: &Catalog) -> bool {
        relation_id(catalog, &self.relation) == Some(self.id)
    }

    /// Reads the rows for `params` at the session's read snapshot; `None`
    /// if the planner must run the statement instead.
    pub fn read(&self, session: &Session, params: &Params) -> Option<WeirResult<Output>> {
        let schema = self.schema.get()?;
        let Some(ParamValues::List(values)) = params else {
            return None;
        };
        session.pin_for_read();
        let snapshot = session.pinned.get();
        let catalog = &snapshot.catalog;
        let id = relation_id(catalog, &self.relation)?;
        if id != self.id
            || !catalog
                .orders(&self.relation)
                .iter()
                .any(|o| o.columns == self.order)
        {
            return None;
        }
        let table = snapshot.tables.get(&id)?;
        let stored = &table.spec().schema;
        let value = |p: usize, column: usize| -> Option<ScalarValue> {
            let value = &values.get(p)?.value;
            let t = stored.field(column).data_type();
            // The planner would compare in another type (a number against
            // a text column, a float against an integer, a `timestamp`
            // against a `timestamptz` read in the session's zone), which
            // may match other rows.
            same_kind(&value.data_type(), t).then(|| stored_value(value, t))?
        };
        let selection = match &self.keys {
            Keys::Equal(parameters) => KeySelection::Equal(
                parameters
                    .iter()
                    .zip(&self.order)
                    .map(|(&p, &column)| value(p, column)?.to_array_of_size(1).ok())
                    .collect::<Option<Vec<_>>>()?,
            ),
            Keys::Range { lower, upper } => {
                let bound = |b: &Option<(usize, bool)>| -> Option<Option<Bound<ArrayRef>>> {
                    let Some((p, included)) = *b else {
                        return Some(Some(Bound::Unbounded));
                    };
                    let v = value(p, self.order[0])?;
                    if v.is_null() {
                        // A comparison with NULL is never true.
                        return Some(None);
                    }
                    let array = v.to_array_of_size(1).ok()?;
                    Some(Some(if included {
                        Bound::Included(array)
                    } else {
                        Bound::Excluded(array)
                    }))
                };
                match (bound(lower)?, bound(upper)?) {
                    (Some(lower), Some(upper)) => KeySelection::Range { lower, upper },
                    _ => {
                        session
                            .db
                            .point_reads
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return Some(Ok(Output::Rows {
                            schema: schema.clone(),
                            rows: crate::rows::from_batches(Vec::new()),
                        }));
                    }
                }
            }
        };
        let found = match table.select(&self.order, &selection, Some(&self.projection), false) {
            Ok(found) => found?,
            Err(e) => return Some(Err(e.into())),
        };
        let batches = found
            .into_iter()
            .map(|batch| {
                let same = batch
                    .columns()
                    .iter()
                    .zip(schema.fields())
                    .all(|(c, f)| c.data_type() == f.data_type());
                same.then(|| RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).ok())
                    .flatten()
            })
            .collect::<Option<Vec<_>>>()?;
        session
            .db
            .point_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(Ok(Output::Rows {
            schema: schema.clone(),
            rows: crate::rows::from_batches(batches),
        }))
    }
}

/// The point reads a session's simple queries took, by the statement's
/// shape (its SQL with the constants of its `WHERE` replaced by `$n`).
/// Cleared when it grows past [`SHAPES`].
#[derive(Debug, Default)]
pub struct ShapeCache {
    reads: std::collections::HashMap<String, std::sync::Arc<PointRead>>,
}

/// The most statement shapes a session remembers.
const SHAPES: usize = 256;

impl ShapeCache {
    /// The point read a simple-query `statement` is, with the constants
    /// of its `WHERE` as its parameters; `None` if it is not one.
    pub fn find(
        &mut self,
        catalog: &Catalog,
        statement: &Statement,
    ) -> Option<(std::sync::Arc<PointRead>, Params)> {
        let (shape, values) = parameterized(statement)?;
        let key = shape.to_string();
        let read = match self.reads.get(&key) {
            Some(read) if read.is_current(catalog) => read.clone(),
            _ => {
                let read = std::sync::Arc::new(PointRead::recognise(catalog, &shape)?);
                if self.reads.len() >= SHAPES {
                    self.reads.clear();
                }
                self.reads.insert(key, read.clone());
                read
            }
        };
        let values = values.into_iter().map(|v| v.into()).collect();
        Some((read, Some(ParamValues::List(values))))
    }
}

/// `statement` with the constants its `WHERE` compares columns with
/// replaced by `$1`, `$2`, ..., and those constants: integers that fit a
/// `bigint` and strings (anything else is left as written, and the
/// statement is then no point read).
fn parameterized(statement: &Statement) -> Option<(Statement, Vec<ScalarValue>)> {
    let Statement::Query(query) = statement else {
        return None;
    };
    let select = plain_select(query)?;
    select.selection.as_ref()?;
    let mut shape = statement.clone();
    let Statement::Query(query) = &mut shape else {
        unreachable!("cloned from a query")
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    let mut values = Vec::new();
    replace_constants(select.selection.as_mut()?, &mut values);
    Some((shape, values))
}

/// Replaces the constants in `expr`'s comparisons (an `AND` chain of
/// them) with parameters, collecting their values.
fn replace_constants(expr: &mut SqlExpr, values: &mut Vec<ScalarValue>) {
    let constant = |e: &mut SqlExpr, values: &mut Vec<ScalarValue>| {
        if let Some(value) = constant_value(e) {
            values.push(value);
            *e = SqlExpr::value(Value::Placeholder(format!("${}", values.len())));
        }
    };
    match expr {
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            replace_constants(left, values);
            replace_constants(right, values);
        }
        SqlExpr::Nested(inner) => replace_constants(inner, values),
        SqlExpr::BinaryOp { left, right, .. } => {
            constant(left, values);
            constant(right, values);
        }
        SqlExpr::Between { low, high, .. } => {
            constant(low, values);
            constant(high, values);
        }
        _ => {}
    }
}

/// The value of an integer or string constant.
fn constant_value(expr: &SqlExpr) -> Option<ScalarValue> {
    match expr {
        SqlExpr::Value(value) => match &value.value {
            Value::Number(n, false) => n.parse::<i64>().ok().map(|v| ScalarValue::Int64(Some(v))),
            Value::SingleQuotedString(s) => Some(ScalarValue::Utf8(Some(s.clone()))),
            _ => None,
        },
        SqlExpr::UnaryOp {
            op: datafusion::sql::sqlparser::ast::UnaryOperator::Minus,
            expr,
        } => match constant_value(expr)? {
            ScalarValue::Int64(Some(v)) => v.checked_neg().map(|v| ScalarValue::Int64(Some(v))),
            _ => None,
        },
        _ => None,
    }
}

/// The id of table or readable materialized view `name` in `catalog`.
fn relation_id(catalog: &Catalog, name: &str) -> Option<TableId> {
    match (
        catalog.tables.get(name),
        catalog.materialized_views.get(name),
    ) {
        (Some(table), _) => Some(table.id),
        (None, Some(view)) if view.failed.is_none() && view.sink.is_none() => Some(view.id),
        _ => None,
    }
}

/// Whether a value of type `value` compares with a column of type
/// `column` in the column's type, as the lookup does: the same type, or
/// both integers, or both strings.
fn same_kind(value: &DataType, column: &DataType) -> bool {
    let string =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    value == column
        || (value.is_integer() && column.is_integer())
        || (string(value) && string(column))
}

/// How a point read's parameters pick rows in its order.
#[derive(Debug)]
enum Keys {
    /// For each leading column: the parameter it equals.
    Equal(Vec<usize>),
    /// A range of the first column: its lower and upper bounds'
    /// parameters, each with whether it is included.
    Range {
        lower: Option<(usize, bool)>,
        upper: Option<(usize, bool)>,
    },
}

/// A `WHERE` conjunct a point read can serve: a column against a
/// parameter.
enum Condition {
    Equal(usize, usize),
    Lower(usize, usize, bool),
    Upper(usize, usize, bool),
}

/// The `SELECT` of a query with nothing around it (no `WITH`, `ORDER BY`,
/// `LIMIT`, locking) and nothing but a projection and a `WHERE` in it.
fn plain_select(query: &Query) -> Option<&Select> {
    if query.with.is_some()
        || query.order_by.is_some()
        || query.limit_clause.is_some()
        || query.fetch.is_some()
        || !query.locks.is_empty()
    {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let grouped = match &select.group_by {
        GroupByExpr::All(_) => true,
        GroupByExpr::Expressions(exprs, modifiers) => !exprs.is_empty() || !modifiers.is_empty(),
    };
    if select.distinct.is_some()
        || select.top.is_some()
        || select.into.is_some()
        || grouped
        || select.having.is_some()
        || select.qualify.is_some()
        || !select.named_window.is_empty()
        || !select.lateral_views.is_empty()
        || !select.cluster_by.is_empty()
        || !select.distribute_by.is_empty()
        || !select.sort_by.is_empty()
        || select.prewhere.is_some()
    {
        return None;
    }
    Some(select)
}

/// The parts of an `AND` chain.
fn conjuncts(expr: &SqlExpr) -> Vec<&SqlExpr> {
    match expr {
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut parts = conjuncts(left);
            parts.extend(conjuncts(right));
            parts
        }
        SqlExpr::Nested(inner) => conjuncts(inner),
        other => vec![other],
    }
}

/// What a `WHERE` conjunct says, if a point read can serve it: `column =
/// $n`, `column > $n` (and the others), `column BETWEEN $a AND $b`.
fn condition(
    conjunct: &SqlExpr,
    column_of: &impl Fn(&SqlExpr) -> Option<usize>,
) -> Option<Vec<Condition>> {
    match conjunct {
        SqlExpr::BinaryOp { left, op, right } => {
            let (column, p, op) = match (column_of(left), parameter(right)) {
                (Some(c), Some(p)) => (c, p, op.clone()),
                _ => {
                    let flipped = match op {
                        BinaryOperator::Eq => BinaryOperator::Eq,
                        BinaryOperator::Lt => BinaryOperator::Gt,
                        BinaryOperator::LtEq => BinaryOperator::GtEq,
                        BinaryOperator::Gt => BinaryOperator::Lt,
                        BinaryOperator::GtEq => BinaryOperator::LtEq,
                        _ => return None,
                    };
                    (column_of(right)?, parameter(left)?, flipped)
                }
            };
            Some(vec![match op {
                BinaryOperator::Eq => Condition::Equal(column, p),
                BinaryOperator::Gt => Condition::Lower(column, p, false),
                BinaryOperator::GtEq => Condition::Lower(column, p, true),
                BinaryOperator::Lt => Condition::Upper(column, p, false),
                BinaryOperator::LtEq => Condition::Upper(column, p, true),
                _ => return None,
            }])
        }
        SqlExpr::Between {
            expr,
            negated: false,
            low,
            high,
        } => {
            let column = column_of(expr)?;
            Some(vec![
                Condition::Lower(column, parameter(low)?, true),
                Condition::Upper(column, parameter(high)?, true),
            ])
        }
        _ => None,
    }
}

/// The parameter (0-based) `$n` names.
pub(crate) fn parameter(expr: &SqlExpr) -> Option<usize> {
    let SqlExpr::Value(value) = expr else {
        return None;
    };
    let Value::Placeholder(name) = &value.value else {
        return None;
    };
    name.strip_prefix('$')?
        .parse::<usize>()
        .ok()?
        .checked_sub(1)
}
