//! `INSERT ... VALUES` of plain literals without a query plan.
//!
//! A multi-row `VALUES` list planned by DataFusion costs an expression per
//! value through type coercion, the optimizer and execution: most of a
//! 500-row INSERT's time. When every value is a literal whose column type
//! is plain (every value of a column a string, or every one an integer, or
//! every one a boolean; NULL anywhere), the rows are built straight into
//! Arrow columns of the types DataFusion would give them (`Utf8`, `Int64`,
//! `Boolean`), and then stored like any source rows: the same assignment
//! casts, defaults and constraint checks. Anything else (expressions,
//! `DEFAULT`, parameters, decimals, rows of different widths) takes the
//! planned path.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanBuilder, Int64Builder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{Expr, Query, SetExpr, UnaryOperator, Value};

/// The rows of `query` as a batch with columns `column1`, `column2`, ...,
/// if it is a `VALUES` list of plain literals.
pub(super) fn literal_rows(query: &Query) -> Option<RecordBatch> {
    let SetExpr::Values(values) = query.body.as_ref() else {
        return None;
    };
    let plain = query.with.is_none()
        && query.order_by.is_none()
        && query.limit_clause.is_none()
        && query.fetch.is_none()
        && !values.explicit_row;
    let width = values.rows.first()?.len();
    if !plain || width == 0 || values.rows.iter().any(|row| row.len() != width) {
        return None;
    }
    let mut fields = Vec::with_capacity(width);
    let mut columns = Vec::with_capacity(width);
    for j in 0..width {
        let column = values.rows.iter().map(|row| literal(&row[j]));
        let (data_type, array) = build_column(column, values.rows.len())?;
        fields.push(Field::new(format!("column{}", j + 1), data_type, true));
        columns.push(array);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).ok()
}

/// A literal value of a `VALUES` row.
enum Literal<'a> {
    Null,
    Text(&'a str),
    Integer(i64),
    Boolean(bool),
}

/// `expr` as a literal, if it is one: a string, an integer that fits in
/// `bigint` (optionally negated), a boolean or NULL.
fn literal(expr: &Expr) -> Option<Literal<'_>> {
    match expr {
        Expr::Value(value) => match &value.value {
            Value::Null => Some(Literal::Null),
            Value::SingleQuotedString(text) => Some(Literal::Text(text)),
            Value::Boolean(b) => Some(Literal::Boolean(*b)),
            Value::Number(digits, false) => integer(digits, false).map(Literal::Integer),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(value) => match &value.value {
                Value::Number(digits, false) => integer(digits, true).map(Literal::Integer),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// Decimal digits as an `i64` (DataFusion's type for an integer literal).
fn integer(digits: &str, negative: bool) -> Option<i64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude: i128 = digits.parse().ok()?;
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// One column of literals, if they are all of one kind (or NULL). A
/// column of NULLs only is text, as an untyped NULL column is assignable
/// to any type.
fn build_column<'a>(
    values: impl Iterator<Item = Option<Literal<'a>>>,
    rows: usize,
) -> Option<(DataType, ArrayRef)> {
    enum Builder {
        Undecided(usize),
        Text(StringBuilder),
        Integer(Int64Builder),
        Boolean(BooleanBuilder),
    }
    let mut builder = Builder::Undecided(0);
    for value in values {
        let value = value?;
        if let Builder::Undecided(nulls) = builder {
            builder = match value {
                Literal::Null => Builder::Undecided(nulls + 1),
                Literal::Text(_) => {
                    let mut b = StringBuilder::with_capacity(rows, rows * 16);
                    b.append_nulls(nulls);
                    Builder::Text(b)
                }
                Literal::Integer(_) => {
                    let mut b = Int64Builder::with_capacity(rows);
                    b.append_nulls(nulls);
                    Builder::Integer(b)
                }
                Literal::Boolean(_) => {
                    let mut b = BooleanBuilder::with_capacity(rows);
                    b.append_nulls(nulls);
                    Builder::Boolean(b)
                }
            };
        }
        match (&mut builder, value) {
            (Builder::Undecided(_), _) => {}
            (Builder::Text(b), Literal::Text(text)) => b.append_value(text),
            (Builder::Text(b), Literal::Null) => b.append_null(),
            (Builder::Integer(b), Literal::Integer(i)) => b.append_value(i),
            (Builder::Integer(b), Literal::Null) => b.append_null(),
            (Builder::Boolean(b), Literal::Boolean(v)) => b.append_value(v),
            (Builder::Boolean(b), Literal::Null) => b.append_null(),
            _ => return None,
        }
    }
    Some(match builder {
        Builder::Undecided(nulls) => {
            let mut b = StringBuilder::new();
            b.append_nulls(nulls);
            (DataType::Utf8, Arc::new(b.finish()))
        }
        Builder::Text(mut b) => (DataType::Utf8, Arc::new(b.finish())),
        Builder::Integer(mut b) => (DataType::Int64, Arc::new(b.finish())),
        Builder::Boolean(mut b) => (DataType::Boolean, Arc::new(b.finish())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int64Type;
    use datafusion::sql::sqlparser::ast::Statement;

    fn rows_of(sql: &str) -> Option<RecordBatch> {
        let weir_sql::WeirStatement::Sql(statement) = weir_sql::parse(sql).unwrap().remove(0)
        else {
            panic!("not SQL")
        };
        let Statement::Insert(insert) = *statement else {
            panic!("not an INSERT")
        };
        literal_rows(insert.source.as_ref().unwrap())
    }

    #[test]
    fn plain_literals_become_columns() {
        let batch =
            rows_of("INSERT INTO t VALUES (1, 'a', true, NULL), (-2, NULL, false, NULL)").unwrap();
        assert_eq!(batch.num_rows(), 2);
        let ints = batch.column(0).as_primitive::<Int64Type>();
        assert_eq!(ints.values().as_ref(), &[1, -2]);
        let text = batch.column(1).as_string::<i32>();
        assert_eq!(text.value(0), "a");
        assert!(batch.column(1).is_null(1));
        assert_eq!(batch.column(2).data_type(), &DataType::Boolean);
        assert_eq!(batch.column(3).data_type(), &DataType::Utf8);
        assert_eq!(batch.column(3).null_count(), 2);
    }

    #[test]
    fn anything_else_is_planned() {
        for sql in [
            "INSERT INTO t VALUES (1.5)",
            "INSERT INTO t VALUES (1), ('a')",
            "INSERT INTO t VALUES (1 + 1)",
            "INSERT INTO t VALUES (DEFAULT)",
            "INSERT INTO t VALUES ($1)",
            "INSERT INTO t VALUES (99999999999999999999)",
            "INSERT INTO t VALUES (1, 2), (3)",
            "INSERT INTO t SELECT 1",
            "INSERT INTO t VALUES (1) ORDER BY 1",
        ] {
            assert!(rows_of(sql).is_none(), "{sql}");
        }
    }
}
