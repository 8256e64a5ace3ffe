//! Result column names as PostgreSQL chooses them.
//!
//! DataFusion names a computed column after its whole expression
//! (`count(*)`, `Int64(1)`, `sum(orders.total)`); PostgreSQL names it after
//! the function (`count`), the column (`total`), or `?column?`. Clients
//! that look columns up by name (ORMs, `row["count"]`) expect PostgreSQL's
//! names, so the names sent in RowDescription follow its rules
//! (`FigureColname` in PostgreSQL's parser). Only the wire names change;
//! DataFusion's plan keeps its own unique names.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    DataType as SqlType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, OrderByKind,
    Query, SelectItem, SetExpr, Statement, TimezoneInfo, Value,
};

/// `schema` with PostgreSQL's column names for `statement`'s output, where
/// they can be worked out.
pub fn wire_schema(statement: &Statement, schema: SchemaRef) -> SchemaRef {
    match output_names(statement) {
        Some(names) if names.len() == schema.fields().len() => {
            let fields: Vec<Field> = schema
                .fields()
                .iter()
                .zip(names)
                .map(|(f, name)| f.as_ref().clone().with_name(name))
                .collect();
            Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
        }
        _ => schema,
    }
}

/// PostgreSQL's name for each output column of a query, or `None` when the
/// query's columns cannot be matched one to one with its select list (a
/// `*`, say), in which case DataFusion's names stand.
pub fn output_names(statement: &Statement) -> Option<Vec<String>> {
    let Statement::Query(query) = statement else {
        return None;
    };
    query_names(query)
}

fn query_names(query: &Query) -> Option<Vec<String>> {
    let mut body = query.body.as_ref();
    loop {
        match body {
            SetExpr::SetOperation { left, .. } => body = left,
            SetExpr::Query(inner) => return query_names(inner),
            SetExpr::Select(select) => {
                return select
                    .projection
                    .iter()
                    .map(|item| match item {
                        SelectItem::UnnamedExpr(expr) => {
                            Some(figure(expr).unwrap_or_else(|| "?column?".to_owned()))
                        }
                        SelectItem::ExprWithAlias { alias, .. } => {
                            Some(crate::catalog::normalize_ident(alias))
                        }
                        _ => None,
                    })
                    .collect();
            }
            _ => return None,
        }
    }
}

/// `statement` with an alias on each computed select-list item whose
/// PostgreSQL name another item of the same list shares (`SELECT 1, 1`,
/// `SELECT f(a), f(b)`), and a unique alias for each alias that another
/// alias repeats (`SELECT 1 AS a, 2 AS a`): PostgreSQL allows equal column
/// names, DataFusion wants its own names unique. The clients still see PostgreSQL's names
/// ([`wire_schema`] works from the statement as written).
pub fn disambiguate(statement: &Statement) -> Statement {
    let mut statement = statement.clone();
    if let Statement::Query(query) = &mut statement {
        disambiguate_query(query);
    }
    statement
}

fn disambiguate_query(query: &mut Query) {
    for select in weir_sql::selects_mut(&mut query.body) {
        let computed = |item: &SelectItem| match item {
            SelectItem::UnnamedExpr(expr) => {
                Some(figure(expr).unwrap_or_else(|| "?column?".to_owned()))
            }
            _ => None,
        };
        let names: Vec<Option<String>> = select.projection.iter().map(computed).collect();
        let alias_of = |item: &SelectItem| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(crate::catalog::normalize_ident(alias)),
            _ => None,
        };
        let aliases: Vec<Option<String>> = select.projection.iter().map(alias_of).collect();
        for (i, item) in select.projection.iter_mut().enumerate() {
            let shared_by = |all: &[Option<String>], name: &String| {
                all.iter().filter(|n| n.as_ref() == Some(name)).count() > 1
            };
            let shared = match (&*item, &names[i], &aliases[i]) {
                (SelectItem::UnnamedExpr(_), Some(name), _) if shared_by(&names, name) => name,
                (SelectItem::ExprWithAlias { .. }, _, Some(alias))
                    if shared_by(&aliases, alias) =>
                {
                    alias
                }
                _ => continue,
            };
            let alias = planner_alias(shared, i);
            let (SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. }) = &*item
            else {
                continue;
            };
            *item = SelectItem::ExprWithAlias {
                expr: expr.clone(),
                alias,
            };
        }
    }
    if query.order_by.is_some() {
        name_column_casts(query);
    }
}

/// In a select with `ORDER BY`, each unnamed cast of a column in the
/// select list (`id::text`) gets a planner-only alias, and an `ORDER BY`
/// of the bare name PostgreSQL gives that cast (`id`) becomes its
/// position.
///
/// DataFusion names a cast after what it casts, so when the `ORDER BY`
/// names the column itself and DataFusion adds it to the projection to
/// sort by, the two share a name and planning fails (apache/datafusion
/// #13558); the alias tells them apart (the clients still see `id`, from
/// the statement as written). PostgreSQL resolves a bare name in `ORDER
/// BY` to an output column first, so `ORDER BY id` sorts by the cast (the
/// text) and `ORDER BY t.id` by the table's column; the position keeps
/// that. A set operation's `ORDER BY` names its output, which keeps
/// DataFusion's names: it is left as it is.
fn name_column_casts(query: &mut Query) {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let mut casts = Vec::new();
    for (i, item) in select.projection.iter_mut().enumerate() {
        let SelectItem::UnnamedExpr(expr) = &*item else {
            continue;
        };
        let Some(name) = figure(expr).filter(|_| casts_a_column(expr)) else {
            continue;
        };
        *item = SelectItem::ExprWithAlias {
            expr: expr.clone(),
            alias: planner_alias(&name, i),
        };
        casts.push((name, i + 1));
    }
    let Some(OrderByKind::Expressions(order)) = query.order_by.as_mut().map(|o| &mut o.kind) else {
        return;
    };
    for key in order {
        let Expr::Identifier(ident) = &key.expr else {
            continue;
        };
        let name = crate::catalog::normalize_ident(ident);
        let mut named = casts.iter().filter(|(n, _)| *n == name);
        if let (Some((_, position)), None) = (named.next(), named.next()) {
            key.expr = Expr::value(Value::Number(position.to_string(), false));
        }
    }
}

/// The alias select-list item `item` (from 0) named `name` gets for the
/// planner only: unique in its list, never seen by clients.
fn planner_alias(name: &str, item: usize) -> Ident {
    Ident::with_quote('"', format!("{name}_{}", item + 1))
}

/// Whether `expr` is a cast (or casts) of a column, in any parentheses.
fn casts_a_column(expr: &Expr) -> bool {
    let mut inner = expr;
    let mut casts = 0;
    loop {
        match inner {
            Expr::Cast { expr, .. } => {
                casts += 1;
                inner = expr;
            }
            Expr::Nested(nested) => inner = nested,
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => return casts > 0,
            _ => return false,
        }
    }
}

/// The name an expression gives its column, if it gives one.
fn figure(expr: &Expr) -> Option<String> {
    figure_with_strength(expr).map(|(name, _)| name)
}

/// How surely an expression names its column: a cast's type name yields
/// to any other name, as in PostgreSQL's `FigureColnameInternal`.
#[derive(PartialEq, PartialOrd)]
enum Strength {
    TypeName,
    Named,
}

fn figure_with_strength(expr: &Expr) -> Option<(String, Strength)> {
    let named = |name: &str| Some((name.to_owned(), Strength::Named));
    match expr {
        Expr::Identifier(ident) => named(&crate::catalog::normalize_ident(ident)),
        Expr::CompoundIdentifier(parts) => named(&crate::catalog::normalize_ident(parts.last()?)),
        // `x::regtype` of a non-text `x`, as datafusion-pg-catalog rewrote
        // it (`regtype.rs`): named as the cast is.
        Expr::Function(f) if f.name.to_string() == "weir_regtype" => {
            let FunctionArguments::List(list) = &f.args else {
                return None;
            };
            match list.args.first() {
                Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))) => {
                    match figure_with_strength(arg) {
                        Some((name, Strength::Named)) => Some((name, Strength::Named)),
                        _ => Some(("regtype".to_owned(), Strength::TypeName)),
                    }
                }
                _ => None,
            }
        }
        // `x op ANY (array)` as the parser rewrote it: an operator's column.
        Expr::Function(f) if f.name.to_string() == crate::array_compare::NAME => None,
        Expr::Function(f) => named(&f.name.0.last()?.as_ident()?.value.to_lowercase()),
        Expr::Cast {
            expr, data_type, ..
        } => match figure_with_strength(expr) {
            Some((name, Strength::Named)) => Some((name, Strength::Named)),
            _ => type_name(data_type).map(|t| (t, Strength::TypeName)),
        },
        Expr::TypedString(typed) => type_name(&typed.data_type).map(|t| (t, Strength::TypeName)),
        Expr::Interval(_) => Some(("interval".to_owned(), Strength::TypeName)),
        Expr::Nested(inner) => figure_with_strength(inner),
        Expr::CompoundFieldAccess { root, .. } => figure_with_strength(root),
        Expr::Case { .. } => named("case"),
        Expr::Exists { .. } => named("exists"),
        Expr::Subquery(query) => named(&query_names(query)?.into_iter().next()?),
        Expr::Array(_) => named("array"),
        Expr::Extract { .. } => named("extract"),
        Expr::Substring { shorthand, .. } => named(if *shorthand { "substr" } else { "substring" }),
        Expr::Trim { .. } => named("btrim"),
        Expr::Position { .. } => named("position"),
        Expr::Ceil { .. } => named("ceil"),
        Expr::Floor { .. } => named("floor"),
        _ => None,
    }
}

/// PostgreSQL's internal name of a type, as it names a cast column.
fn type_name(data_type: &SqlType) -> Option<String> {
    let name = match data_type {
        SqlType::Int(_) | SqlType::Integer(_) | SqlType::Int4(_) => "int4",
        SqlType::BigInt(_) | SqlType::Int8(_) => "int8",
        SqlType::SmallInt(_) | SqlType::Int2(_) => "int2",
        SqlType::Real | SqlType::Float4 => "float4",
        SqlType::DoublePrecision | SqlType::Double(_) | SqlType::Float8 => "float8",
        SqlType::Numeric(_) | SqlType::Decimal(_) => "numeric",
        SqlType::Text | SqlType::String(_) => "text",
        SqlType::Varchar(_) | SqlType::CharacterVarying(_) => "varchar",
        SqlType::Boolean | SqlType::Bool => "bool",
        SqlType::Date => "date",
        SqlType::Timestamp(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => "timestamp",
        SqlType::Timestamp(..) => "timestamptz",
        SqlType::Time(..) => "time",
        SqlType::Interval { .. } => "interval",
        SqlType::Bytea => "bytea",
        SqlType::JSON => "json",
        SqlType::JSONB => "jsonb",
        SqlType::Uuid => "uuid",
        SqlType::Custom(name, _) => return Some(name.to_string().to_lowercase()),
        _ => return None,
    };
    Some(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sql: &str) -> Option<Vec<String>> {
        let statements = weir_sql::parse(sql).unwrap();
        let weir_sql::WeirStatement::Sql(statement) = &statements[0] else {
            panic!()
        };
        output_names(statement)
    }

    #[test]
    fn postgres_column_names() {
        assert_eq!(
            names("SELECT count(*), t.total, 1, a + b, x AS y, sum(v)::int, 1::int, CASE WHEN a THEN 1 END FROM t").unwrap(),
            vec!["count", "total", "?column?", "?column?", "y", "sum", "int4", "case"]
        );
        assert_eq!(
            names("SELECT 2.5::float8::int, x::text::int, INTERVAL '1 day', TIMESTAMP '2024-01-01', '{}'::jsonb, (ARRAY[1])[1], substr('a', 1)").unwrap(),
            vec!["int4", "x", "interval", "timestamp", "jsonb", "array", "substr"]
        );
        assert_eq!(names("SELECT * FROM t"), None);
        assert_eq!(
            names("SELECT a FROM t UNION SELECT b FROM u").unwrap(),
            vec!["a"]
        );
        assert_eq!(names("SELECT (SELECT max(v) FROM t)").unwrap(), vec!["max"]);
        assert_eq!(names("SELECT \"Mixed\" FROM t").unwrap(), vec!["Mixed"]);
    }

    #[test]
    fn equal_names_get_aliases_for_the_planner_only() {
        let statements =
            weir_sql::parse("SELECT 1, 1, a, a, count(*), f(x), f(y), 1 AS b, 2 AS b FROM t")
                .unwrap();
        let weir_sql::WeirStatement::Sql(statement) = &statements[0] else {
            panic!()
        };
        assert_eq!(
            disambiguate(statement).to_string(),
            "SELECT 1 AS \"?column?_1\", 1 AS \"?column?_2\", a AS \"a_3\", a AS \"a_4\", count(*), \
             f(x) AS \"f_6\", f(y) AS \"f_7\", 1 AS \"b_8\", 2 AS \"b_9\" FROM t"
        );
        assert_eq!(
            output_names(statement).unwrap(),
            vec!["?column?", "?column?", "a", "a", "count", "f", "f", "b", "b"]
        );
    }

    fn disambiguated(sql: &str) -> String {
        let statements = weir_sql::parse(sql).unwrap();
        let weir_sql::WeirStatement::Sql(statement) = &statements[0] else {
            panic!()
        };
        disambiguate(statement).to_string()
    }

    #[test]
    fn casts_of_columns_are_named_for_the_planner_in_ordered_queries() {
        assert_eq!(
            disambiguated(
                "SELECT id::text, CAST((t.v) AS int), id + 1, w FROM t GROUP BY 1 ORDER BY id, t.v"
            ),
            "SELECT id::TEXT AS \"id_1\", CAST((t.v) AS INT) AS \"v_2\", id + 1, w FROM t \
             GROUP BY 1 ORDER BY 1, t.v"
        );
        // Without ORDER BY nothing can clash; a set operation's ORDER BY
        // names its output columns.
        for sql in [
            "SELECT id::TEXT FROM t",
            "SELECT id::TEXT FROM t UNION SELECT w FROM u ORDER BY id",
        ] {
            assert_eq!(disambiguated(sql), sql);
        }
    }
}
