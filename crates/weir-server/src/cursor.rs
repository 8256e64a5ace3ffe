//! SQL cursors: `DECLARE name [BINARY] [NO SCROLL] CURSOR [WITH HOLD] FOR
//! query`, `FETCH`, `CLOSE`.
//!
//! A cursor's query runs once, at `DECLARE`, at the session's read
//! snapshot (a block's own writes included) and its rows are kept until
//! the cursor is closed: within the query memory limit (54000 beyond it),
//! as for any result. A cursor without `WITH HOLD` needs a transaction
//! block and closes when the block ends; one with `WITH HOLD` outlives the
//! block if it commits. `FETCH` moves in both directions, as PostgreSQL
//! does for scrollable cursors.

use std::collections::HashMap;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{
    CloseCursor, Declare, DeclareType, FetchDirection, Statement, Value,
};

use crate::catalog::normalize_ident;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

/// An open cursor.
#[derive(Debug)]
pub struct Cursor {
    rows: RecordBatch,
    /// 0: before the first row; `n + 1`: after the last; else on row `p`.
    position: usize,
    /// `WITH HOLD`.
    hold: bool,
    /// Declared in the open block (closed if the block rolls back).
    in_block: bool,
    /// `DECLARE BINARY`: rows in binary format.
    binary: bool,
}

/// A session's cursors by name.
pub type Cursors = HashMap<String, Cursor>;

/// Whether `statement` is a cursor statement this module runs.
pub fn is_cursor_statement(statement: &Statement) -> bool {
    match statement {
        Statement::Declare { stmts } => stmts
            .iter()
            .all(|d| matches!(d.declare_type, Some(DeclareType::Cursor))),
        Statement::Fetch { .. } | Statement::Close { .. } => true,
        _ => false,
    }
}

/// Runs DECLARE, FETCH or CLOSE.
pub async fn execute(session: &mut Session, statement: &Statement) -> WeirResult<Output> {
    match statement {
        Statement::Declare { stmts } => {
            for declare in stmts {
                declare_one(session, declare).await?;
            }
            Ok(Output::command("DECLARE CURSOR"))
        }
        Statement::Fetch {
            name, direction, ..
        } => fetch(session, &normalize_ident(name), direction),
        Statement::Close { cursor } => {
            match cursor {
                CloseCursor::All => session.cursors.clear(),
                CloseCursor::Specific { name } => {
                    let name = normalize_ident(name);
                    if session.cursors.remove(&name).is_none() {
                        return Err(missing(&name));
                    }
                }
            }
            Ok(Output::command("CLOSE CURSOR"))
        }
        other => Err(WeirError::internal(format!(
            "not a cursor statement: {other}"
        ))),
    }
}

async fn declare_one(session: &mut Session, declare: &Declare) -> WeirResult<()> {
    let Some(query) = &declare.for_query else {
        return Err(WeirError::unsupported("DECLARE of a variable"));
    };
    let hold = declare.hold == Some(true);
    if !hold && session.transaction.is_none() {
        return Err(WeirError::new(
            SqlState::NO_ACTIVE_SQL_TRANSACTION,
            "DECLARE CURSOR can only be used in transaction blocks",
        ));
    }
    for ident in &declare.names {
        let name = normalize_ident(ident);
        if session.cursors.contains_key(&name) {
            return Err(WeirError::new(
                SqlState("42P03"),
                format!("cursor \"{name}\" already exists"),
            ));
        }
        session.pin_for_read();
        let plan = session.plan(Statement::Query(query.clone()), &None).await?;
        let (schema, batches): (SchemaRef, Vec<RecordBatch>) = session.collect(plan).await?;
        let schema = crate::colnames::wire_schema(&Statement::Query(query.clone()), schema);
        let rows = concat_batches(&schema, &batches)?;
        let cursor = Cursor {
            rows,
            position: 0,
            hold,
            in_block: session.transaction.is_some(),
            binary: declare.binary == Some(true),
        };
        session.cursors.insert(name, cursor);
    }
    Ok(())
}

/// A count in a FETCH direction.
fn count(value: &Value) -> WeirResult<i64> {
    match value {
        Value::Number(n, _) => n
            .parse()
            .map_err(|_| WeirError::new(SqlState::SYNTAX_ERROR, format!("invalid count {n}"))),
        other => Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            format!("invalid count {other}"),
        )),
    }
}

fn fetch(session: &mut Session, name: &str, direction: &FetchDirection) -> WeirResult<Output> {
    let cursor = session.cursors.get_mut(name).ok_or_else(|| missing(name))?;
    let n = cursor.rows.num_rows() as i64;
    let p = cursor.position as i64;
    // The rows to return, as 1-based positions in order, and where the
    // cursor stands afterwards.
    let (rows, position): (Vec<i64>, i64) = match direction {
        FetchDirection::Next => forward(p, 1, n),
        FetchDirection::Prior => backward(p, 1),
        FetchDirection::Count { limit } => {
            let k = count(&limit.value)?;
            if k >= 0 {
                forward(p, k, n)
            } else {
                backward(p, -k)
            }
        }
        FetchDirection::Forward { limit } => match limit {
            Some(l) => forward(p, count(&l.value)?, n),
            None => forward(p, 1, n),
        },
        FetchDirection::Backward { limit } => match limit {
            Some(l) => backward(p, count(&l.value)?),
            None => backward(p, 1),
        },
        FetchDirection::All | FetchDirection::ForwardAll => forward(p, n + 1, n),
        FetchDirection::BackwardAll => backward(p, n + 1),
        FetchDirection::First => absolute(1, n),
        FetchDirection::Last => absolute(-1, n),
        FetchDirection::Absolute { limit } => absolute(count(&limit.value)?, n),
        FetchDirection::Relative { limit } => {
            let k = count(&limit.value)?;
            if k == 0 {
                (
                    if (1..=n).contains(&p) {
                        vec![p]
                    } else {
                        vec![]
                    },
                    p,
                )
            } else {
                absolute_from(p + k, n)
            }
        }
    };
    cursor.position = position as usize;
    let indices = datafusion::arrow::array::UInt64Array::from(
        rows.iter().map(|&r| (r - 1) as u64).collect::<Vec<_>>(),
    );
    let batch = datafusion::arrow::compute::take_record_batch(&cursor.rows, &indices)?;
    Ok(Output::Fetched {
        schema: batch.schema(),
        batch,
        binary: cursor.binary,
    })
}

fn forward(p: i64, k: i64, n: i64) -> (Vec<i64>, i64) {
    let rows: Vec<i64> = (p + 1..=(p + k).min(n)).collect();
    let position = if p + k > n { n + 1 } else { p + k };
    (rows, position)
}

fn backward(p: i64, k: i64) -> (Vec<i64>, i64) {
    let rows: Vec<i64> = ((p - k).max(1)..p).rev().collect();
    let position = if p - k < 1 { 0 } else { p - k };
    (rows, position)
}

/// `ABSOLUTE i`: row i (from the end if negative).
fn absolute(i: i64, n: i64) -> (Vec<i64>, i64) {
    let target = if i < 0 { n + 1 + i } else { i };
    absolute_from(target, n)
}

fn absolute_from(target: i64, n: i64) -> (Vec<i64>, i64) {
    if target < 1 {
        (Vec::new(), 0)
    } else if target > n {
        (Vec::new(), n + 1)
    } else {
        (vec![target], target)
    }
}

fn missing(name: &str) -> WeirError {
    WeirError::new(
        SqlState("34000"),
        format!("cursor \"{name}\" does not exist"),
    )
}

/// The row schema of cursor `name` and whether it is `BINARY`: what a
/// Describe of the portal `name` answers (psycopg's named cursors
/// describe the cursor they declared).
pub fn describe(cursors: &Cursors, name: &str) -> Option<(SchemaRef, bool)> {
    let cursor = cursors.get(name)?;
    Some((cursor.rows.schema(), cursor.binary))
}

/// Closes the cursors a block's end closes: every cursor without `WITH
/// HOLD`, and on rollback those the block declared.
pub fn block_ended(cursors: &mut Cursors, committed: bool) {
    cursors.retain(|_, c| c.hold && (committed || !c.in_block));
    for cursor in cursors.values_mut() {
        cursor.in_block = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_move_as_postgres_moves_them() {
        // Five rows; FETCH 2, FETCH 2, FETCH 2 (one row, then after last).
        assert_eq!(forward(0, 2, 5), (vec![1, 2], 2));
        assert_eq!(forward(2, 2, 5), (vec![3, 4], 4));
        assert_eq!(forward(4, 2, 5), (vec![5], 6));
        assert_eq!(forward(6, 1, 5), (vec![], 6));
        assert_eq!(backward(6, 2), (vec![5, 4], 4));
        assert_eq!(backward(1, 1), (vec![], 0));
        assert_eq!(absolute(-1, 5), (vec![5], 5));
        assert_eq!(absolute(9, 5), (vec![], 6));
        assert_eq!(absolute_from(0, 5), (vec![], 0));
    }
}
