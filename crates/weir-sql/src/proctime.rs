//! `PROCTIME()`: a row's processing time (Flink's name). In a query it
//! is the time now; in a view, [`extract_proctime`] takes each call out
//! of the view's projections into a [`ProcTimeNode`] below them, which
//! the stream planner makes an operator that stamps each row with the
//! `now()` of the epoch that reads it (`weir_stream`'s `proctime.rs`):
//! windows over it are processing-time windows (Nexmark q12).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, DFSchemaRef, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, Expr, Extension, LogicalPlan, Projection, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, UserDefinedLogicalNodeCore, Volatility,
};

/// The function's name.
pub const PROCTIME: &str = "proctime";

/// The column a [`ProcTimeNode`] adds.
const PROCTIME_COLUMN: &str = "__proctime";

/// The type of processing times: a timestamp without time zone, in UTC.
fn proctime_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

/// `proctime()`: the time now (see the module documentation).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ProcTimeFunction {
    signature: Signature,
}

impl ScalarUDFImpl for ProcTimeFunction {
    fn name(&self) -> &str {
        PROCTIME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(proctime_type())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
            Some(weir_stream::runtime::unix_micros()),
            None,
        )))
    }
}

/// The function `proctime()`, registered in every session.
pub fn proctime_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ProcTimeFunction {
        signature: Signature::nullary(Volatility::Volatile),
    })
}

/// The logical node of processing times: `input`'s rows with their
/// processing time as a last column.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcTimeNode {
    /// The stamped rows.
    pub input: LogicalPlan,
    schema: DFSchemaRef,
}

impl PartialOrd for ProcTimeNode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.input.partial_cmp(&other.input)
    }
}

impl ProcTimeNode {
    fn try_new(input: LogicalPlan) -> Result<Self> {
        let time = DFSchema::try_from(Schema::new(vec![Field::new(
            PROCTIME_COLUMN,
            proctime_type(),
            false,
        )]))?;
        let schema = Arc::new(input.schema().join(&time)?);
        Ok(ProcTimeNode { input, schema })
    }
}

impl UserDefinedLogicalNodeCore for ProcTimeNode {
    fn name(&self) -> &str {
        "ProcTime"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    // Filters on the input's columns may go below it.
    fn prevent_predicate_push_down_columns(&self) -> HashSet<String> {
        HashSet::from([PROCTIME_COLUMN.to_owned()])
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ProcTime: {PROCTIME_COLUMN}")
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        let [input] = <[LogicalPlan; 1]>::try_from(inputs)
            .map_err(|_| DataFusionError::Internal("a processing time has one input".into()))?;
        ProcTimeNode::try_new(input)
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        // The input's columns among those needed; the time is its own.
        let width = self.input.schema().fields().len();
        Some(vec![output_columns
            .iter()
            .copied()
            .filter(|&c| c < width)
            .collect()])
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}

fn is_proctime(expr: &Expr) -> bool {
    matches!(expr, Expr::ScalarFunction(f) if f.func.name() == PROCTIME)
}

/// Takes `proctime()` out of every projection of a view's plan into a
/// [`ProcTimeNode`] below it (the calls become its column); a call
/// anywhere else stays, for the planner to refuse as not deterministic.
pub fn extract_proctime(plan: LogicalPlan) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up(|node| {
        let LogicalPlan::Projection(projection) = node else {
            return Ok(Transformed::no(node));
        };
        let calls = projection
            .expr
            .iter()
            .any(|e| e.exists(|e| Ok(is_proctime(e))).unwrap_or(false));
        if !calls {
            return Ok(Transformed::no(LogicalPlan::Projection(projection)));
        }
        let stamped = ProcTimeNode::try_new(Arc::unwrap_or_clone(projection.input))?;
        let exprs = projection
            .expr
            .into_iter()
            .map(|e| {
                e.transform(|e| {
                    Ok(if is_proctime(&e) {
                        Transformed::yes(Expr::Column(Column::from_name(PROCTIME_COLUMN)))
                    } else {
                        Transformed::no(e)
                    })
                })
                .map(|t| t.data)
            })
            .collect::<Result<Vec<_>>>()?;
        let input = LogicalPlan::Extension(Extension {
            node: Arc::new(stamped),
        });
        Ok(Transformed::yes(LogicalPlan::Projection(
            Projection::try_new(exprs, Arc::new(input))?,
        )))
    })?;
    Ok(rewritten.data)
}
