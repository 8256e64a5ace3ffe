//! `PREPARE`, `EXECUTE` and `DEALLOCATE` in SQL: a session's named
//! statements with `$n` parameters, as psql users and some drivers write
//! them (the extended protocol's prepared statements are pgwire's).
//!
//! `EXECUTE name(args)` runs the statement with each `$n` replaced by its
//! argument, cast to the parameter's declared type if `PREPARE` declared
//! one: the statement is planned at each execution, like a simple query.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, CastKind, DataType, DiscardObject, Expr, Ident, Statement,
};
use pgwire::api::store::PortalStore;
use weir_sql::WeirStatement;

use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

/// A statement `PREPARE` named.
#[derive(Debug, Clone)]
pub struct SqlPrepared {
    statement: Statement,
    /// Declared parameter types, by position (`$1` first).
    types: Vec<DataType>,
}

/// A session's statements prepared in SQL, by name.
pub type SqlPreparedStatements = HashMap<String, SqlPrepared>;

/// `PREPARE name [(types)] AS statement`: 42P05 if the name is taken.
pub fn prepare(
    session: &mut Session,
    name: &Ident,
    types: &[DataType],
    statement: &Statement,
) -> WeirResult<Output> {
    if !matches!(
        statement,
        Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
    ) {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "PREPARE takes a SELECT, VALUES, INSERT, UPDATE or DELETE",
        ));
    }
    let name = crate::catalog::normalize_ident(name);
    if session.sql_prepared.contains_key(&name) {
        return Err(WeirError::new(
            SqlState("42P05"),
            format!("prepared statement \"{name}\" already exists"),
        ));
    }
    let prepared = SqlPrepared {
        statement: statement.clone(),
        types: types.to_vec(),
    };
    session.sql_prepared.insert(name, prepared);
    Ok(Output::command("PREPARE"))
}

/// The statement `EXECUTE name(args)` runs: 26000 for an unknown name,
/// 42601 for the wrong number of arguments.
pub fn bound(session: &Session, name: &Ident, args: &[Expr]) -> WeirResult<WeirStatement> {
    let name = crate::catalog::normalize_ident(name);
    let prepared = session
        .sql_prepared
        .get(&name)
        .ok_or_else(|| unknown(&name))?;
    let mut statement = prepared.statement.clone();
    let mut highest = 0;
    let _ = visit_expressions_mut(&mut statement, |expr| {
        let Some(i) = crate::point_read::parameter(expr) else {
            return ControlFlow::<()>::Continue(());
        };
        highest = highest.max(i + 1);
        if let Some(arg) = args.get(i) {
            *expr = match prepared.types.get(i) {
                Some(data_type) => Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(arg.clone()),
                    data_type: data_type.clone(),
                    array: false,
                    format: None,
                },
                None => Expr::Nested(Box::new(arg.clone())),
            };
        }
        ControlFlow::Continue(())
    });
    let expected = highest.max(prepared.types.len());
    if args.len() != expected {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            format!(
                "wrong number of parameters for prepared statement \"{name}\": expected {expected}, got {}",
                args.len()
            ),
        ));
    }
    Ok(WeirStatement::Sql(Box::new(statement)))
}

/// Before `DEALLOCATE name` runs (see [`deallocate`]): a statement
/// prepared through the protocol under that name, which pgwire keeps in
/// `store`, is removed (psycopg frees the statements its cache drops
/// so); a name prepared neither in SQL nor through the protocol is 26000,
/// as in PostgreSQL. `DEALLOCATE ALL` and `DISCARD ALL` remove every
/// protocol statement, as PostgreSQL's do (drivers that cache statements,
/// psycopg's among them, forget theirs on seeing either command). In a
/// failed transaction block nothing is done here (the statement gets
/// 25P02).
pub fn deallocate_protocol<S: PortalStore>(
    store: &S,
    session: &Session,
    statement: &WeirStatement,
) -> WeirResult<()> {
    let WeirStatement::Sql(sql) = statement else {
        return Ok(());
    };
    if session.transaction.as_ref().is_some_and(|b| b.is_failed()) {
        return Ok(());
    }
    let name = match sql.as_ref() {
        Statement::Deallocate { name, .. } => name,
        Statement::Discard {
            object_type: DiscardObject::ALL,
        } => {
            store.clear_statements();
            return Ok(());
        }
        _ => return Ok(()),
    };
    if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
        store.clear_statements();
        return Ok(());
    }
    let normalized = crate::catalog::normalize_ident(name);
    if session.sql_prepared.contains_key(&normalized) {
        return Ok(());
    }
    if store.get_statement(&normalized).is_none() {
        return Err(unknown(&normalized));
    }
    store.rm_statement(&normalized);
    Ok(())
}

/// `DEALLOCATE [PREPARE] name | ALL` of statements prepared in SQL (the
/// protocol's are [`deallocate_protocol`]'s).
pub fn deallocate(session: &mut Session, name: &Ident) -> Output {
    if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
        session.sql_prepared.clear();
    } else {
        session
            .sql_prepared
            .remove(&crate::catalog::normalize_ident(name));
    }
    Output::command("DEALLOCATE")
}

fn unknown(name: &str) -> WeirError {
    WeirError::new(
        SqlState("26000"),
        format!("prepared statement \"{name}\" does not exist"),
    )
}
