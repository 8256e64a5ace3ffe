//! Key lookups in scans: a scan whose filters fix the leading columns of
//! one of its relation's orders (a table's primary key, a materialized
//! view's key, an index made with `CREATE INDEX`) reads only the rows
//! with those values, found by binary search in each chunk's order
//! (`weir_state::TableSnapshot::select`), instead of every row.
//!
//! Filters are pushed to the scan as inexact: DataFusion still filters the
//! rows a lookup returns, so a lookup only has to return every row the
//! filters could keep (it may return more). Recognised filters, on a
//! column against a constant: `=`, `IN (...)` (or `OR` of `=`), `<`,
//! `<=`, `>`, `>=`, `BETWEEN`. Equalities on the leading columns of an order become probes
//! (the product of their value lists, up to [`MAX_PROBES`]); without one, a
//! range on an order's first column is read in order.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, ScalarValue, Statistics};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::common::compute_record_batch_statistics;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use weir_state::KeySelection;

/// The most probe keys one lookup makes (the product of its `IN` lists);
/// beyond it the scan reads every row.
pub const MAX_PROBES: usize = 4096;

/// An order a relation's rows can be looked up by.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    /// Its name, as `EXPLAIN` and `pg_class` show it (`t_pkey`, an index's).
    pub name: String,
    /// Its columns, as indices into the relation's columns.
    pub columns: Vec<usize>,
}

/// A lookup chosen for a scan.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The columns of the order it reads.
    pub columns: Vec<usize>,
    /// The rows it reads.
    pub selection: KeySelection,
    /// What `EXPLAIN` shows of it.
    pub shown: String,
}

impl Lookup {
    /// The rows of `order` whose leading columns (named `names`) equal
    /// one of the probe rows `probes` (one array per column).
    pub fn equal(order: &Order, names: &str, probes: Vec<ArrayRef>) -> Self {
        let keys = probes.first().map_or(0, |p| p.len());
        Lookup {
            columns: order.columns.clone(),
            shown: format!("index={} columns=[{names}] keys={keys}", order.name),
            selection: KeySelection::Equal(probes),
        }
    }
}

/// What the filters say about one column.
#[derive(Default)]
struct Constraint {
    /// The values it must equal one of.
    equal: Option<Vec<ScalarValue>>,
    lower: Option<Bound<ScalarValue>>,
    upper: Option<Bound<ScalarValue>>,
}

/// Whether a lookup could use `filter` (DataFusion then pushes it to the
/// scan).
pub fn usable(filter: &Expr, schema: &Schema, orders: &[Order]) -> bool {
    let found = conditions(filter, schema);
    !found.is_empty()
        && found
            .iter()
            .all(|(column, _)| orders.iter().any(|o| o.columns.contains(column)))
}

/// The lookup `filters` allow on one of `orders`, if any. `schema` names
/// the columns the filters use; `stored` has the types the values are
/// stored in (probe values are cast to them, when no value changes).
pub fn plan(
    filters: &[Expr],
    schema: &Schema,
    stored: &Schema,
    orders: &[Order],
) -> Option<Lookup> {
    let mut constraints: Vec<Constraint> = (0..schema.fields().len())
        .map(|_| Constraint::default())
        .collect();
    let found = filters
        .iter()
        .flat_map(conjuncts)
        .flat_map(|f| conditions(f, schema));
    for (column, found) in found {
        let target = &mut constraints[column];
        match found {
            Found::Equal(values) => {
                target.equal.get_or_insert(values);
            }
            Found::Lower(bound) => {
                target.lower.get_or_insert(bound);
            }
            Found::Upper(bound) => {
                target.upper.get_or_insert(bound);
            }
        }
    }
    let as_stored =
        |column: usize, value: &ScalarValue| stored_value(value, stored.field(column).data_type());
    // The order with the most leading columns fixed by equalities.
    let mut best: Option<(usize, usize)> = None;
    for (i, order) in orders.iter().enumerate() {
        let fixed = order
            .columns
            .iter()
            .take_while(|&&c| constraints[c].equal.is_some())
            .count();
        if fixed > 0 && best.is_none_or(|(_, most)| fixed > most) {
            best = Some((i, fixed));
        }
    }
    if let Some((i, fixed)) = best {
        let order = &orders[i];
        let leading = &order.columns[..fixed];
        let mut probes: Vec<Vec<ScalarValue>> = vec![Vec::new()];
        for &column in leading {
            let values = constraints[column].equal.as_ref()?;
            let values: Vec<ScalarValue> = values
                .iter()
                .map(|v| as_stored(column, v))
                .collect::<Option<_>>()?;
            if probes.len() * values.len() > MAX_PROBES {
                return None;
            }
            probes = probes
                .iter()
                .flat_map(|probe| {
                    values.iter().map(move |v| {
                        let mut next = probe.clone();
                        next.push(v.clone());
                        next
                    })
                })
                .collect();
        }
        let arrays = (0..fixed)
            .map(|c| ScalarValue::iter_to_array(probes.iter().map(|p| p[c].clone())))
            .collect::<Result<Vec<_>>>()
            .ok()?;
        let names: Vec<&str> = leading
            .iter()
            .map(|&c| schema.field(c).name().as_str())
            .collect();
        return Some(Lookup::equal(order, &names.join(", "), arrays));
    }
    // Else a range on the first column of an order.
    let order = orders.iter().find(|o| {
        let c = &constraints[o.columns[0]];
        c.lower.is_some() || c.upper.is_some()
    })?;
    let column = order.columns[0];
    let bound = |b: &Option<Bound<ScalarValue>>| -> Option<Bound<Arc<dyn datafusion::arrow::array::Array>>> {
        let array = |v: &ScalarValue| {
            let v = as_stored(column, v).filter(|v| !v.is_null())?;
            v.to_array_of_size(1).ok()
        };
        Some(match b {
            None => Bound::Unbounded,
            Some(Bound::Included(v)) => Bound::Included(array(v)?),
            Some(Bound::Excluded(v)) => Bound::Excluded(array(v)?),
            Some(Bound::Unbounded) => Bound::Unbounded,
        })
    };
    let c = &constraints[column];
    let lower = match &c.lower {
        Some(Bound::Included(v)) => format!("[{v}"),
        Some(Bound::Excluded(v)) => format!("({v}"),
        _ => "(-inf".to_owned(),
    };
    let upper = match &c.upper {
        Some(Bound::Included(v)) => format!("{v}]"),
        Some(Bound::Excluded(v)) => format!("{v})"),
        _ => "+inf)".to_owned(),
    };
    Some(Lookup {
        columns: order.columns.clone(),
        selection: KeySelection::Range {
            lower: bound(&c.lower)?,
            upper: bound(&c.upper)?,
        },
        shown: format!(
            "index={} columns=[{}] range={lower}, {upper}",
            order.name,
            schema.field(column).name(),
        ),
    })
}

/// `value` in type `t`, if the cast keeps the value: `int_col = 1.5`
/// finds nothing by order, and is left to the filter.
pub fn stored_value(value: &ScalarValue, t: &DataType) -> Option<ScalarValue> {
    if &value.data_type() == t {
        return Some(value.clone());
    }
    let cast = value.cast_to(t).ok()?;
    (cast.cast_to(&value.data_type()).ok()? == *value).then_some(cast)
}

/// `array` in type `t`, if the cast keeps every value (as
/// [`stored_value`] does for one value); `None` where one would change.
pub fn stored_value_array(
    array: &datafusion::arrow::array::ArrayRef,
    t: &DataType,
) -> Result<Option<datafusion::arrow::array::ArrayRef>> {
    use datafusion::arrow::compute::cast;
    if array.data_type() == t {
        return Ok(Some(array.clone()));
    }
    let Ok(stored) = cast(array, t) else {
        return Ok(None);
    };
    let back = cast(&stored, array.data_type())?;
    Ok(
        (back.as_ref() == array.as_ref() && stored.null_count() == array.null_count())
            .then_some(stored),
    )
}

/// What one filter says about one column.
enum Found {
    Equal(Vec<ScalarValue>),
    Lower(Bound<ScalarValue>),
    Upper(Bound<ScalarValue>),
}

/// The parts of an `AND` chain.
fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            let mut parts = conjuncts(left);
            parts.extend(conjuncts(right));
            parts
        }
        other => vec![other],
    }
}

/// The columns (indices in `schema`) a filter constrains, and how;
/// empty if it is not one a lookup can use.
fn conditions(filter: &Expr, schema: &Schema) -> Vec<(usize, Found)> {
    let column = |e: &Expr| match e {
        Expr::Column(c) => schema.index_of(&c.name).ok(),
        _ => None,
    };
    let constant = |e: &Expr| match e {
        Expr::Literal(v, _) => Some(v.clone()),
        _ => None,
    };
    let found = match filter {
        // `a = 1 OR a = 2` is `a IN (1, 2)`.
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => match (
            &conditions(left, schema)[..],
            &conditions(right, schema)[..],
        ) {
            ([(a, Found::Equal(left))], [(b, Found::Equal(right))]) if a == b => {
                let values = left.iter().chain(right).cloned().collect();
                Some(vec![(*a, Found::Equal(values))])
            }
            _ => None,
        },
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let pair = match (column(left), constant(right)) {
                (Some(c), Some(v)) => Some((c, v, *op)),
                _ => match (column(right), constant(left), op.swap()) {
                    (Some(c), Some(v), Some(op)) => Some((c, v, op)),
                    _ => None,
                },
            };
            pair.and_then(|(c, v, op)| {
                let found = match op {
                    Operator::Eq => Found::Equal(vec![v]),
                    Operator::Gt => Found::Lower(Bound::Excluded(v)),
                    Operator::GtEq => Found::Lower(Bound::Included(v)),
                    Operator::Lt => Found::Upper(Bound::Excluded(v)),
                    Operator::LtEq => Found::Upper(Bound::Included(v)),
                    _ => return None,
                };
                Some(vec![(c, found)])
            })
        }
        Expr::InList(list) if !list.negated => column(&list.expr).and_then(|c| {
            let values = list.list.iter().map(constant).collect::<Option<Vec<_>>>()?;
            Some(vec![(c, Found::Equal(values))])
        }),
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => column(expr).and_then(|c| {
            Some(vec![
                (c, Found::Lower(Bound::Included(constant(low)?))),
                (c, Found::Upper(Bound::Included(constant(high)?))),
            ])
        }),
        _ => None,
    };
    found.unwrap_or_default()
}

/// Rows a leaf node read at planning, from one relation at one epoch:
/// what [`LookupExec`] and the lookup joins' `SnapshotScanExec` hold.
#[derive(Debug, Clone)]
pub struct HeldRows {
    batches: Vec<RecordBatch>,
    properties: Arc<PlanProperties>,
}

impl HeldRows {
    /// `batches` of `schema`, as one bounded partition.
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        HeldRows {
            batches,
            properties: Arc::new(properties),
        }
    }

    /// How many rows.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// The node's properties.
    pub fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    /// Exact figures, so that DataFusion builds a join's hash table from
    /// the smaller side.
    pub fn statistics(&self) -> Result<Arc<Statistics>> {
        Ok(Arc::new(compute_record_batch_statistics(
            std::slice::from_ref(&self.batches),
            self.properties.eq_properties.schema(),
            None,
        )))
    }

    /// The rows, as a stream.
    pub fn stream(&self) -> Result<SendableRecordBatchStream> {
        let schema = self.properties.eq_properties.schema().clone();
        Ok(Box::pin(MemoryStream::try_new(
            self.batches.clone(),
            schema,
            None,
        )?))
    }
}

/// A lookup's rows, shown by `EXPLAIN` as `LookupExec` with the index it
/// read: the scan of a relation whose filters a [`Lookup`] served.
#[derive(Debug)]
pub struct LookupExec {
    relation: String,
    shown: String,
    /// The probes it made (0 for a range).
    keys: usize,
    rows: HeldRows,
}

impl LookupExec {
    /// The rows `batches` (of `schema`) that `lookup` found in `relation`.
    pub fn new(
        relation: &str,
        lookup: &Lookup,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Self {
        let keys = match &lookup.selection {
            KeySelection::Equal(probes) => probes.first().map_or(0, |p| p.len()),
            KeySelection::Range { .. } => 0,
        };
        LookupExec {
            relation: relation.to_owned(),
            shown: lookup.shown.clone(),
            keys,
            rows: HeldRows::new(schema, batches),
        }
    }

    /// The probes it made (0 for a range).
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// The rows it found.
    pub fn rows(&self) -> usize {
        self.rows.rows()
    }
}

impl DisplayAs for LookupExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "LookupExec: {} {} rows={}",
            self.relation,
            self.shown,
            self.rows()
        )
    }
}

impl ExecutionPlan for LookupExec {
    fn name(&self) -> &str {
        "LookupExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.rows.properties()
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
        self.rows.statistics()
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.rows.stream()
    }
}
