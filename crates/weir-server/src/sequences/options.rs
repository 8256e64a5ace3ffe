//! A sequence's options as `CREATE SEQUENCE`, identity columns and `ALTER
//! SEQUENCE` write them: PostgreSQL's defaults and checks.

use datafusion::sql::sqlparser::ast::{Expr, SequenceOptions as SqlOptions, UnaryOperator, Value};

use super::{type_max, type_min, SequenceOptions};
use crate::error::{SqlState, WeirError, WeirResult};

/// The options a statement names; `None`: not named.
#[derive(Debug, Default)]
pub struct Given {
    increment: Option<i64>,
    /// `Some(None)`: `NO MINVALUE`.
    min: Option<Option<i64>>,
    /// `Some(None)`: `NO MAXVALUE`.
    max: Option<Option<i64>>,
    start: Option<i64>,
    cycle: Option<bool>,
}

impl Given {
    /// The options `options` names.
    pub fn of(options: &[SqlOptions]) -> WeirResult<Given> {
        let mut given = Given::default();
        for option in options {
            match option {
                SqlOptions::IncrementBy(expr, _) => given.increment = Some(integer(expr)?),
                SqlOptions::MinValue(expr) => {
                    given.min = Some(expr.as_ref().map(integer).transpose()?)
                }
                SqlOptions::MaxValue(expr) => {
                    given.max = Some(expr.as_ref().map(integer).transpose()?)
                }
                SqlOptions::StartWith(expr, _) => given.start = Some(integer(expr)?),
                SqlOptions::Cache(expr) => {
                    if integer(expr)? < 1 {
                        return Err(invalid("CACHE must be greater than zero".into()));
                    }
                }
                SqlOptions::Cycle(no) => given.cycle = Some(!no),
            }
        }
        Ok(given)
    }
}

/// The options of a new sequence of `type_oid` values.
pub fn options_of(type_oid: u32, options: &[SqlOptions]) -> WeirResult<SequenceOptions> {
    resolve(type_oid, Given::of(options)?, None)
}

/// The options `given` names over `base` (those of the sequence `ALTER
/// SEQUENCE` changes; `None` for a new one, whose other options take
/// PostgreSQL's defaults), for values of `type_oid`, checked.
pub fn resolve(
    type_oid: u32,
    given: Given,
    base: Option<&SequenceOptions>,
) -> WeirResult<SequenceOptions> {
    let increment = given.increment.or(base.map(|b| b.increment)).unwrap_or(1);
    if increment == 0 {
        return Err(invalid("INCREMENT must not be zero".into()));
    }
    let default_min = if increment > 0 { 1 } else { type_min(type_oid) };
    let default_max = if increment > 0 {
        type_max(type_oid)
    } else {
        -1
    };
    // A bound that was its old type's default follows a new type.
    let kept = |bound: i64, old_default: i64, new_default: i64| {
        if bound == old_default {
            new_default
        } else {
            bound
        }
    };
    let min = match (given.min, base) {
        (Some(min), _) => min.unwrap_or(default_min),
        (None, Some(base)) => kept(base.min, type_min(base.type_oid), type_min(type_oid)),
        (None, None) => default_min,
    };
    let max = match (given.max, base) {
        (Some(max), _) => max.unwrap_or(default_max),
        (None, Some(base)) => kept(base.max, type_max(base.type_oid), type_max(type_oid)),
        (None, None) => default_max,
    };
    let type_range = type_min(type_oid)..=type_max(type_oid);
    for (what, value) in [("MINVALUE", min), ("MAXVALUE", max)] {
        if !type_range.contains(&value) {
            return Err(invalid(format!(
                "{what} ({value}) is out of range for sequence data type {}",
                type_name(type_oid)
            )));
        }
    }
    if min >= max {
        return Err(invalid(format!(
            "MINVALUE ({min}) must be less than MAXVALUE ({max})"
        )));
    }
    let start = given
        .start
        .or(base.map(|b| b.start))
        .unwrap_or(if increment > 0 { min } else { max });
    check_within("START", start, min, max)?;
    Ok(SequenceOptions {
        type_oid,
        start,
        increment,
        min,
        max,
        cycle: given.cycle.or(base.map(|b| b.cycle)).unwrap_or(false),
    })
}

/// 22023 unless `min <= value <= max`; `what` names the value (`START`,
/// `RESTART`).
pub fn check_within(what: &str, value: i64, min: i64, max: i64) -> WeirResult<()> {
    if value < min {
        return Err(invalid(format!(
            "{what} value ({value}) cannot be less than MINVALUE ({min})"
        )));
    }
    if value > max {
        return Err(invalid(format!(
            "{what} value ({value}) cannot be greater than MAXVALUE ({max})"
        )));
    }
    Ok(())
}

/// PostgreSQL's name of integer type `type_oid`.
fn type_name(type_oid: u32) -> &'static str {
    match type_oid {
        21 => "smallint",
        23 => "integer",
        _ => "bigint",
    }
}

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

/// An integer option's value (`5`, `-5`).
fn integer(expr: &Expr) -> WeirResult<i64> {
    let (negative, expr) = match expr {
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => (true, expr.as_ref()),
        Expr::UnaryOp {
            op: UnaryOperator::Plus,
            expr,
        } => (false, expr.as_ref()),
        other => (false, other),
    };
    let parsed = match expr {
        Expr::Value(value) => match &value.value {
            Value::Number(digits, _) => digits.parse::<i128>().ok(),
            _ => None,
        },
        _ => None,
    };
    let value = parsed
        .map(|v| if negative { -v } else { v })
        .and_then(|v| i64::try_from(v).ok());
    value.ok_or_else(|| {
        WeirError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("sequence option value must be an integer of bigint's range: {expr}"),
        )
    })
}
