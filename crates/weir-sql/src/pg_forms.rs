//! PostgreSQL forms that DataFusion plans only when spelled another way,
//! rewritten in one pass over the parsed statement:
//!
//! - `FETCH FIRST n ROWS ONLY` is `LIMIT n`;
//! - `EXISTS (subquery)` in a select list (DataFusion plans it only in
//!   `WHERE`) is `(SELECT count(*) > 0 FROM ...)`, the subquery's rows
//!   counted ([`crate::subquery_ops::aggregated`]);
//! - a one-column table function with an alias and no column list
//!   (`FROM generate_series(1, 3) x`) names its column after the alias
//!   (`x(x)`), as PostgreSQL does;
//! - `mod(a, b)` is `a % b` (a select-list item keeps the name `mod`);
//! - `substring(text, 'pattern')` is `(regexp_match(text, 'pattern'))[1]`;
//! - `generate_subscripts(a, 1)` is `unnest(generate_series(1,
//!   array_length(a, 1)))`;
//! - `~x` is `(-1 - x)`;
//! - `generate_series(...)` in a select list is `unnest(generate_series(...))`,
//!   a row per value; `FROM generate_series(...)` of `integer` literals
//!   gives `integer`s ([`integer_series`]);
//! - a `VALUES` column of integer literals that fit `integer` is
//!   `integer` ([`integer_values`]);
//! - `extract(field FROM x)` is a `numeric`, with fractions of seconds
//!   ([`extract_as_numeric`]);
//! - `U&'...'` strings are the standard strings they spell;
//! - `INTERVAL '...'` without a unit is `'...'::interval`;
//! - `x = ANY('{2,4}')` (and `ALL`) reads the literal as an array of `x`'s
//!   type: `weir_array_like('{2,4}', x)` ([`any_of_text`]);
//! - `x op ANY (array)` and `ALL` are `weir_compare_array(x, array, 'op',
//!   'any' | 'all')`, the server's function with SQL's NULL answers
//!   ([`array_comparison`]);
//! - `TUMBLE(...)` and `HOP(...)` in `FROM` are the queries they stand
//!   for ([`crate::windows`]);
//! - number literals beyond `bigint` and `numeric` ([`crate::numbers`]) and comparisons
//!   with `ANY`/`ALL` of a subquery ([`crate::subquery_ops`]);
//! - `a IS [NOT] DISTINCT FROM b OR c` is `(a IS DISTINCT FROM b) OR c`:
//!   sqlparser reads everything after `FROM` as the right operand
//!   ([`distinct_from_precedence`]).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, BinaryOperator, CastKind, DataType, Expr, FunctionArg, FunctionArgExpr,
    FunctionArguments, Ident, LimitClause, Query, SelectItem, SetExpr, Statement, TableAlias,
    TableAliasColumnDef, TableFactor, UnaryOperator, Value, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Rewrites the forms of the module documentation in `statement`.
pub fn rewrite(statement: &mut Statement) {
    let _ = statement.visit(&mut Forms);
}

/// Visits every query (subqueries, views' and CTEs' included) and every
/// expression.
struct Forms;

impl VisitorMut for Forms {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        // `extract(...)` becomes a cast below; its column keeps the name.
        for select in crate::selects::selects_mut(&mut query.body) {
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(e @ Expr::Extract { .. }) = item {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::new("extract"),
                    };
                }
                // `mod(a, b)` becomes `a % b` below, `substring(s,
                // 'pattern')` a regular expression match; their columns
                // keep the names.
                if let SelectItem::UnnamedExpr(e) = item {
                    if pattern_substring(e).is_some() {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::new("substring"),
                        };
                    } else if is_function(e, "mod") {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::new("mod"),
                        };
                    }
                }
                // A set-returning `generate_series` in a select list gives
                // a row per value, as in PostgreSQL (DataFusion's scalar
                // `generate_series` gives one array).
                if let SelectItem::UnnamedExpr(e @ Expr::Function(_)) = item {
                    if is_function(e, "generate_series") {
                        let integers = matches!(e, Expr::Function(f) if matches!(
                            &f.args,
                            FunctionArguments::List(list)
                                if list.args.len() >= 2 && list.args.iter().all(small_integer)
                        ));
                        let sql = if integers {
                            format!("CAST(unnest({e}) AS INTEGER)")
                        } else {
                            format!("unnest({e})")
                        };
                        let mut expr = e.clone();
                        replace_with(&mut expr, &sql);
                        *item = SelectItem::ExprWithAlias {
                            expr,
                            alias: Ident::new("generate_series"),
                        };
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        fetch_first_as_limit(query);
        for select in crate::selects::selects_mut(&mut query.body) {
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                {
                    let _ = visit_expressions_mut(e, |expr| {
                        exists_as_count(expr);
                        ControlFlow::<()>::Continue(())
                    });
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        crate::windows::rewrite_window_factor(factor);
        integer_series(factor);
        name_function_column(factor);
        if let TableFactor::Derived { subquery, .. } = factor {
            integer_values(subquery);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_statement(&mut self, statement: &mut Statement) -> ControlFlow<()> {
        // A VALUES statement; an INSERT's VALUES take their columns' types.
        if let Statement::Query(query) = statement {
            integer_values(query);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        distinct_from_precedence(expr);
        crate::numbers::negate_smallest_bigint(expr);
        unicode_string_as_standard(expr);
        interval_literal_as_cast(expr);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        crate::numbers::widen_big_integer(expr);
        crate::numbers::widen_huge_literal(expr);
        crate::subquery_ops::rewrite_quantified(expr);
        any_of_text(expr);
        array_comparison(expr);
        mod_as_operator(expr);
        substring_as_match(expr);
        generate_subscripts_as_unnest(expr);
        bitwise_not_as_subtraction(expr);
        extract_as_numeric(expr);
        ControlFlow::Continue(())
    }
}

/// `a IS [NOT] DISTINCT FROM b AND c`: sqlparser parses the right operand
/// of `IS [NOT] DISTINCT FROM` as a whole expression, so `AND` and `OR`
/// after it (which bind more loosely than `IS` in PostgreSQL) land inside
/// it: `a IS DISTINCT FROM (b AND c)`, an error or, over booleans, a
/// silently different answer. A right operand written in parentheses is
/// `Expr::Nested` and stays as it is; a bare `AND`/`OR` is taken apart
/// again, its leftmost operand becoming the right operand of `IS`.
fn distinct_from_precedence(expr: &mut Expr) {
    fn regroup(left: Expr, right: Expr, not: bool) -> Expr {
        match right {
            Expr::BinaryOp {
                left: inner,
                op: op @ (BinaryOperator::And | BinaryOperator::Or),
                right: rest,
            } => Expr::BinaryOp {
                left: Box::new(regroup(left, *inner, not)),
                op,
                right: rest,
            },
            right if not => Expr::IsNotDistinctFrom(Box::new(left), Box::new(right)),
            right => Expr::IsDistinctFrom(Box::new(left), Box::new(right)),
        }
    }
    let (left, right, not) = match expr {
        Expr::IsDistinctFrom(left, right) => (left, right, false),
        Expr::IsNotDistinctFrom(left, right) => (left, right, true),
        _ => return,
    };
    if !matches!(
        right.as_ref(),
        Expr::BinaryOp {
            op: BinaryOperator::And | BinaryOperator::Or,
            ..
        }
    ) {
        return;
    }
    let placeholder = || Box::new(Expr::Value(Value::Null.into()));
    let left = std::mem::replace(left, placeholder());
    let right = std::mem::replace(right, placeholder());
    *expr = regroup(*left, *right, not);
}

/// `x op ANY('{...}')` or `ALL`: PostgreSQL reads the untyped literal as
/// an array of `x`'s type; DataFusion takes it as text, which no array
/// function accepts. The literal becomes `weir_array_like(literal, x)`,
/// the server's function that reads it with `x`'s type.
fn any_of_text(expr: &mut Expr) {
    let (Expr::AnyOp { left, right, .. } | Expr::AllOp { left, right, .. }) = expr else {
        return;
    };
    let mut literal = right.as_ref();
    while let Expr::Nested(inner) = literal {
        literal = inner;
    }
    if !matches!(literal, Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_))) {
        return;
    }
    let sql = format!("weir_array_like({literal}, {left})");
    let mut like = literal.clone();
    replace_with(&mut like, &sql);
    **right = like;
}

/// `x op ANY (array)` or `ALL` (not of a subquery, which
/// [`crate::subquery_ops`] rewrites first) as `weir_compare_array(x,
/// array, 'op', 'any' | 'all')`: DataFusion's own plan skips NULL
/// elements, so `3 = ANY ('{1,NULL}')` would be false, not NULL.
fn array_comparison(expr: &mut Expr) {
    let (left, op, right, quantifier) = match expr {
        Expr::AnyOp {
            left,
            compare_op,
            right,
            ..
        } => (left, compare_op, right, "any"),
        Expr::AllOp {
            left,
            compare_op,
            right,
        } => (left, compare_op, right, "all"),
        _ => return,
    };
    let op = match op {
        BinaryOperator::Eq => "=",
        BinaryOperator::NotEq => "<>",
        BinaryOperator::Lt => "<",
        BinaryOperator::LtEq => "<=",
        BinaryOperator::Gt => ">",
        BinaryOperator::GtEq => ">=",
        _ => return,
    };
    let sql = format!("weir_compare_array({left}, {right}, '{op}', '{quantifier}')");
    replace_with(expr, &sql);
}

/// `U&'\0041'`, which sqlparser decodes, as the standard string it
/// spells (`'A'`): DataFusion plans no Unicode escape strings.
fn unicode_string_as_standard(expr: &mut Expr) {
    if let Expr::Value(value) = expr {
        if let Value::UnicodeStringLiteral(text) = &mut value.value {
            value.value = Value::SingleQuotedString(std::mem::take(text));
        }
    }
}

/// The text and the pattern of `substring(text, 'pattern')` (or
/// `substring(text FROM 'pattern')`), PostgreSQL's regular-expression
/// substring: a pattern written as a string literal.
fn pattern_substring(expr: &Expr) -> Option<(&Expr, &str)> {
    let Expr::Substring {
        expr: text,
        substring_from: Some(from),
        substring_for: None,
        ..
    } = expr
    else {
        return None;
    };
    match from.as_ref() {
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(pattern) => Some((text, pattern)),
            _ => None,
        },
        _ => None,
    }
}

/// `substring(text, 'pattern')` as the first group the pattern captures
/// (or its whole match), NULL without a match, as PostgreSQL's:
/// `(regexp_match(text, 'pattern'))[1]`.
fn substring_as_match(expr: &mut Expr) {
    let Some((text, pattern)) = pattern_substring(expr) else {
        return;
    };
    let pattern = Expr::value(Value::SingleQuotedString(pattern.to_owned()));
    let sql = format!("(regexp_match({text}, {pattern}))[1]");
    replace_with(expr, &sql);
}

/// `INTERVAL '10:30:00'` (without a unit) as `'10:30:00'::interval`: read
/// by Weir's interval parser, which takes every PostgreSQL form
/// (DataFusion's literal parser refuses times and `1 day 02:00`).
fn interval_literal_as_cast(expr: &mut Expr) {
    let Expr::Interval(interval) = expr else {
        return;
    };
    let plain = interval.leading_field.is_none()
        && interval.last_field.is_none()
        && interval.leading_precision.is_none()
        && interval.fractional_seconds_precision.is_none();
    let text = match interval.value.as_ref() {
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(text) => text.clone(),
            _ => return,
        },
        _ => return,
    };
    if plain {
        *expr = Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(Expr::value(Value::SingleQuotedString(text))),
            data_type: DataType::Interval {
                fields: None,
                precision: None,
            },
            array: false,
            format: None,
        };
    }
}

fn fetch_first_as_limit(query: &mut Query) {
    let Some(fetch) = &query.fetch else {
        return;
    };
    if fetch.with_ties || fetch.percent {
        return;
    }
    let Some(quantity) = fetch.quantity.clone() else {
        return;
    };
    match &mut query.limit_clause {
        None => {
            query.limit_clause = Some(LimitClause::LimitOffset {
                limit: Some(quantity),
                offset: None,
                limit_by: vec![],
            })
        }
        Some(LimitClause::LimitOffset {
            limit: limit @ None,
            ..
        }) => *limit = Some(quantity),
        Some(_) => return,
    }
    query.fetch = None;
}

fn exists_as_count(expr: &mut Expr) {
    let Expr::Exists { subquery, negated } = expr else {
        return;
    };
    // Aliased `exists`, the subquery names its column as `EXISTS` does
    // (`NOT EXISTS`, an operator, leaves it `?column?`).
    let (count, alias) = if *negated {
        ("count(*) = 0", None)
    } else {
        ("count(*) > 0", Some("exists"))
    };
    if let Some(counted) = crate::subquery_ops::aggregated(subquery, count, alias, "weir_exists") {
        *expr = counted;
    }
}

/// The table functions that return one column.
const ONE_COLUMN_FUNCTIONS: &[&str] = &["generate_series", "unnest"];

/// `f(...) x` as `f(...) x(x)` for a one-column table function `f`.
/// The alias that marks the `generate_series` call [`integer_series`]
/// wraps, so that it is not wrapped again.
const SERIES_ALIAS: &str = "weir_series";

/// Whether `expr` is an integer literal that fits `integer`.
fn small_integer(expr: &FunctionArg) -> bool {
    integer_argument(expr).is_some_and(|n| i32::try_from(n).is_ok())
}

/// The value of `arg`, if it is an integer literal that fits `bigint`.
fn integer_argument(arg: &FunctionArg) -> Option<i64> {
    match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => integer_literal(expr),
        _ => None,
    }
}

/// `FROM generate_series(1, 3)` of integer literals as PostgreSQL's: a
/// series of `integer`s (of `bigint`s where a literal needs it), its
/// column named `generate_series` (or after the alias). DataFusion's
/// counts in `bigint` and names its column `value`, which a series of
/// other arguments (`generate_series(1, n)`) still does.
fn integer_series(factor: &mut TableFactor) {
    let TableFactor::Table {
        name,
        args: Some(args),
        alias,
        ..
    } = factor
    else {
        return;
    };
    let is_series = name.0.len() == 1
        && name.0[0]
            .as_ident()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("generate_series"));
    let marked = alias.as_ref().is_some_and(|a| a.name.value == SERIES_ALIAS);
    let literals = args.args.iter().all(|a| integer_argument(a).is_some());
    if !is_series || marked || !literals || args.args.len() < 2 {
        return;
    }
    let element = if args.args.iter().all(small_integer) {
        "INTEGER"
    } else {
        "BIGINT"
    };
    let column = match alias {
        Some(alias) => alias.name.value.clone(),
        None => "generate_series".to_owned(),
    };
    let arguments: Vec<String> = args.args.iter().map(ToString::to_string).collect();
    let sql = format!(
        "SELECT CAST(value AS {element}) AS \"{column}\" FROM generate_series({}) AS {SERIES_ALIAS}(value)",
        arguments.join(", ")
    );
    let Ok(query) = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut parser| parser.parse_query())
    else {
        return;
    };
    let alias = alias.clone().unwrap_or_else(|| TableAlias {
        explicit: true,
        name: Ident::new("generate_series"),
        columns: vec![],
        at: None,
    });
    *factor = TableFactor::Derived {
        lateral: false,
        subquery: query,
        alias: Some(alias),
        sample: None,
    };
}

fn name_function_column(factor: &mut TableFactor) {
    let alias = match factor {
        TableFactor::Table {
            name,
            args: Some(_),
            alias: Some(alias),
            ..
        } if ONE_COLUMN_FUNCTIONS.iter().any(|f| {
            name.0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| i.value.eq_ignore_ascii_case(f))
        }) =>
        {
            alias
        }
        TableFactor::UNNEST {
            alias: Some(alias),
            array_exprs,
            with_offset: false,
            with_ordinality: false,
            ..
        } if array_exprs.len() == 1 => alias,
        _ => return,
    };
    if alias.columns.is_empty() {
        alias.columns = vec![TableAliasColumnDef {
            name: alias.name.clone(),
            data_type: None,
        }];
    }
}

/// `mod(a, b)` as `(a % b)`.
fn mod_as_operator(expr: &mut Expr) {
    let Expr::Function(function) = expr else {
        return;
    };
    if !function.name.to_string().eq_ignore_ascii_case("mod") {
        return;
    }
    let FunctionArguments::List(list) = &function.args else {
        return;
    };
    if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(a)), FunctionArg::Unnamed(FunctionArgExpr::Expr(b))] =
        list.args.as_slice()
    {
        *expr = Expr::Nested(Box::new(Expr::BinaryOp {
            left: Box::new(a.clone()),
            op: BinaryOperator::Modulo,
            right: Box::new(b.clone()),
        }));
    }
}

/// `generate_subscripts(a, 1)` as `unnest(generate_series(1,
/// array_length(a, 1)))`: the subscripts of a one-dimensional array, a row
/// each (SQLAlchemy's reflection reads a key's column order so).
fn generate_subscripts_as_unnest(expr: &mut Expr) {
    if !is_function(expr, "generate_subscripts") {
        return;
    }
    let Expr::Function(function) = expr else {
        return;
    };
    let FunctionArguments::List(list) = &function.args else {
        return;
    };
    if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array)), FunctionArg::Unnamed(FunctionArgExpr::Expr(dimension))] =
        list.args.as_slice()
    {
        let sql = format!("unnest(generate_series(1, array_length({array}, {dimension})))");
        replace_with(expr, &sql);
    }
}

/// A `VALUES` column of integer literals that all fit `integer` is
/// `integer`, as in PostgreSQL (DataFusion fixes `VALUES` types when it
/// plans them, so the literal narrowing of select lists cannot reach
/// them): each literal is cast.
fn integer_values(query: &mut Query) {
    let SetExpr::Values(values) = query.body.as_mut() else {
        return;
    };
    let width = values.rows.first().map_or(0, |row| row.content.len());
    for column in 0..width {
        let mut numbers = 0;
        let all_fit = values.rows.iter().all(|row| match row.content.get(column) {
            Some(Expr::Value(v)) if v.value == Value::Null => true,
            Some(e) => match integer_literal(e) {
                Some(n) if i32::try_from(n).is_ok() => {
                    numbers += 1;
                    true
                }
                _ => false,
            },
            None => false,
        });
        if !all_fit || numbers == 0 {
            continue;
        }
        for row in values.rows.iter_mut() {
            if let Some(e) = row
                .content
                .get_mut(column)
                .filter(|e| integer_literal(e).is_some())
            {
                *e = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(e.clone()),
                    data_type: DataType::Integer(None),
                    array: false,
                    format: None,
                };
            }
        }
    }
}

/// The value of an integer literal (`5`, `-5`).
fn integer_literal(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => integer_literal(expr).map(|n| -n),
        _ => None,
    }
}

/// Whether `expr` calls the function `name` (perhaps `pg_catalog.`-qualified).
fn is_function(expr: &Expr, name: &str) -> bool {
    let Expr::Function(function) = expr else {
        return false;
    };
    let called = function.name.to_string().to_ascii_lowercase();
    called == name || called.strip_prefix("pg_catalog.") == Some(name)
}

/// `expr` replaced by the expression `sql` spells, if it parses.
fn replace_with(expr: &mut Expr, sql: &str) {
    if let Ok(rewritten) = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_expr())
    {
        *expr = rewritten;
    }
}

/// `~x` (bitwise NOT, which DataFusion lacks) as `(-1 - x)`, its value in
/// two's complement, of `x`'s type.
fn bitwise_not_as_subtraction(expr: &mut Expr) {
    if let Expr::UnaryOp {
        op: UnaryOperator::BitwiseNot,
        expr: operand,
    } = expr
    {
        let sql = format!("(-1 - ({operand}))");
        replace_with(expr, &sql);
    }
}

/// `extract(field FROM x)` as PostgreSQL 14 computes it: a `numeric`, with
/// the fraction of seconds for `second`, `milliseconds` and `epoch`
/// (DataFusion's `date_part` gives whole seconds for `second`, a
/// `double precision` epoch). The epoch of a `date` (a literal or a cast
/// to `date`: the type is known here only when written) is whole seconds.
fn extract_as_numeric(expr: &mut Expr) {
    let Expr::Extract {
        field, expr: value, ..
    } = expr
    else {
        return;
    };
    let field = field.to_string().to_ascii_lowercase();
    let is_date = matches!(value.as_ref(),
        Expr::TypedString(typed) if matches!(typed.data_type, DataType::Date))
        || matches!(
            value.as_ref(),
            Expr::Cast {
                data_type: DataType::Date,
                ..
            }
        );
    let micros = format!("CAST(date_part('microsecond', {value}) AS BIGINT)");
    let sql = match field.as_str() {
        "second" | "seconds" => format!("(CAST({micros} AS NUMERIC(38, 0)) * 0.000001)"),
        "millisecond" | "milliseconds" => format!("(CAST({micros} AS NUMERIC(38, 0)) * 0.001)"),
        "epoch" if is_date => format!("CAST(date_part('epoch', {value}) AS NUMERIC(38, 0))"),
        "epoch" => format!("CAST(date_part('epoch', {value}) AS NUMERIC(38, 6))"),
        _ => format!("CAST(date_part('{field}', {value}) AS NUMERIC(38, 0))"),
    };
    replace_with(expr, &sql);
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, SelectItem, SetExpr, Statement};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use crate::parse::parsed_text as rewritten;

    #[test]
    fn postgresql_forms_become_datafusion_forms() {
        assert_eq!(
            rewritten("SELECT id FROM t ORDER BY id FETCH FIRST 2 ROWS ONLY"),
            "SELECT id FROM t ORDER BY id LIMIT 2"
        );
        assert_eq!(
            rewritten("SELECT exists(SELECT 1 FROM u WHERE u.k = t.k), mod(7, 3) FROM t"),
            "SELECT (SELECT count(*) > 0 AS \"exists\" FROM u WHERE u.k = t.k), (7 % 3) AS mod FROM t"
        );
        assert_eq!(
            rewritten("SELECT generate_series(1, 3)"),
            "SELECT CAST(unnest(generate_series(1, 3)) AS INTEGER) AS generate_series"
        );
        assert_eq!(
            rewritten("SELECT generate_series(1, 3000000000)"),
            "SELECT unnest(generate_series(1, 3000000000)) AS generate_series"
        );
        assert_eq!(
            rewritten("SELECT x FROM generate_series(1, 3) x"),
            "SELECT x FROM (SELECT CAST(value AS INTEGER) AS \"x\" FROM generate_series(1, 3) AS weir_series (value)) x"
        );
        assert_eq!(
            rewritten("SELECT * FROM generate_series(1, 3000000000)"),
            "SELECT * FROM (SELECT CAST(value AS BIGINT) AS \"generate_series\" FROM generate_series(1, 3000000000) AS weir_series (value)) AS generate_series"
        );
        assert_eq!(
            rewritten("SELECT substring('foobar', 'o(b.)'), INTERVAL '10:30'"),
            "SELECT (regexp_match('foobar', 'o(b.)'))[1] AS substring, CAST('10:30' AS INTERVAL)"
        );
        assert_eq!(
            rewritten("SELECT generate_subscripts(k, 1) FROM t"),
            "SELECT unnest(generate_series(1, array_length(k, 1))) FROM t"
        );
        assert_eq!(
            rewritten("SELECT x FROM generate_series(1, k) x, unnest(ARRAY[1]) AS u, generate_series(1, k) AS g(n)"),
            "SELECT x FROM generate_series(1, k) x (x), UNNEST(ARRAY[1]) AS u (u), generate_series(1, k) AS g (n)"
        );
        assert_eq!(
            rewritten("SELECT 1 FROM t WHERE EXISTS (SELECT 1 FROM u)"),
            "SELECT 1 FROM t WHERE EXISTS (SELECT 1 FROM u)"
        );
    }

    /// The first select-list expression of `SELECT {expr}`, rewritten.
    fn select_expr(expr: &str) -> Expr {
        let sql = format!("SELECT {expr}");
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
            .expect("parses")
            .remove(0);
        super::rewrite(&mut statement);
        let Statement::Query(query) = statement else {
            panic!("a query")
        };
        let SetExpr::Select(select) = *query.body else {
            panic!("a select")
        };
        match select.projection.into_iter().next() {
            Some(SelectItem::UnnamedExpr(expr)) => expr,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn is_distinct_from_binds_tighter_than_and_and_or() {
        // (a IS DISTINCT FROM b) OR c
        let Expr::BinaryOp {
            left,
            op: BinaryOperator::Or,
            right,
        } = select_expr("a IS DISTINCT FROM b OR c")
        else {
            panic!("not an OR at the top")
        };
        assert!(matches!(*left, Expr::IsDistinctFrom(..)), "{left}");
        assert_eq!(right.to_string(), "c");
        // ((a IS NOT DISTINCT FROM b) AND c) OR d
        let Expr::BinaryOp {
            left,
            op: BinaryOperator::Or,
            ..
        } = select_expr("a IS NOT DISTINCT FROM b AND c OR d")
        else {
            panic!("not an OR at the top")
        };
        let Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            ..
        } = *left
        else {
            panic!("not an AND under the OR")
        };
        assert!(matches!(*left, Expr::IsNotDistinctFrom(..)), "{left}");
        // Parentheses, and operators that bind tighter than IS, stay.
        assert!(matches!(
            select_expr("a IS DISTINCT FROM (b OR c)"),
            Expr::IsDistinctFrom(..)
        ));
        assert!(matches!(
            select_expr("a IS DISTINCT FROM b = c"),
            Expr::IsDistinctFrom(..)
        ));
    }
}
