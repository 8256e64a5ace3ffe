//! SQL cursors: `DECLARE name [BINARY] [[NO] SCROLL] CURSOR [WITH HOLD]
//! FOR query`, `FETCH`, `MOVE`, `CLOSE`.
//!
//! A cursor's query starts at `DECLARE`, at the session's read snapshot
//! (a block's own writes included), and its rows are produced as `FETCH`
//! reaches them, so a driver's server-side cursor reads a result of any
//! size in bounded memory. What the cursor keeps of the rows already read
//! decides how it may move, as the plan does in PostgreSQL: a `SCROLL`
//! cursor keeps them all (within the query memory limit, 54000 beyond
//! it) and moves freely; a `NO SCROLL` cursor keeps none behind it and
//! moves forward only (55000 otherwise); a cursor declared with neither
//! keeps them while they fit in the query memory limit and after that
//! forgets the rows behind it, moving forward only from then on. A cursor
//! without `WITH HOLD` needs a transaction block and closes when the block
//! ends; one with `WITH HOLD` outlives the block if it commits.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{
    CloseCursor, Declare, DeclareType, FetchDirection, Statement, Value, ValueWithSpan,
};
use futures::{FutureExt, StreamExt};
use sync_wrapper::SyncWrapper;

use crate::catalog::normalize_ident;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::rows::RowStream;
use crate::session::{Output, Session};

/// How far back a cursor may move.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scroll {
    /// `SCROLL`: anywhere; every row read is kept.
    Always,
    /// Neither keyword: anywhere while the rows read fit in the budget.
    WhileKept,
    /// `NO SCROLL`: forward only; nothing behind the cursor is kept.
    Never,
}

/// An open cursor.
pub struct Cursor {
    schema: SchemaRef,
    /// The rows not yet read from the query; `None` once it has ended.
    unread: Option<SyncWrapper<RowStream>>,
    /// The rows read and kept, in order: rows `forgotten + 1 ..= read`.
    kept: VecDeque<RecordBatch>,
    /// Rows read from the query so far.
    read: usize,
    /// Rows read and no longer kept (those at the front).
    forgotten: usize,
    /// Bytes of the kept batches.
    kept_bytes: usize,
    /// What the cursor may keep before it forgets or fails.
    budget: usize,
    scroll: Scroll,
    /// 0: before the first row; `n + 1`: after the last; else on row `p`.
    position: usize,
    /// `WITH HOLD`.
    hold: bool,
    /// Declared in the open block (closed if the block rolls back).
    in_block: bool,
    /// `DECLARE BINARY`: rows in binary format.
    binary: bool,
    /// Over a subscription: rows keep coming, so a `FETCH` waits for one
    /// row at most and returns what has arrived.
    live: bool,
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
        } => {
            let name = normalize_ident(name);
            let cursor = session
                .cursors
                .get_mut(&name)
                .ok_or_else(|| missing(&name))?;
            cursor.fetch(direction, None).await
        }
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

/// Runs `MOVE`: the cursor moves as the `FETCH` would, and the tag counts
/// the rows it passed (`MOVE n`).
pub async fn move_cursor(session: &mut Session, fetch: &Statement) -> WeirResult<Output> {
    match execute(session, fetch).await? {
        Output::Fetched { batch, .. } => Ok(Output::Command {
            tag: "MOVE",
            rows: Some(batch.num_rows()),
        }),
        _ => Err(WeirError::internal("MOVE did not parse as a FETCH")),
    }
}

async fn declare_one(session: &mut Session, declare: &Declare) -> WeirResult<()> {
    let Some(query) = &declare.for_query else {
        return Err(WeirError::unsupported("DECLARE of a variable"));
    };
    check_declare(session, declare)?;
    let name = normalize_ident(&declare.names[0]);
    let statement = Statement::Query(query.clone());
    let (schema, rows) = session.query(&statement, &None).await?;
    let scroll = match declare.scroll {
        Some(true) => Scroll::Always,
        Some(false) => Scroll::Never,
        None => Scroll::WhileKept,
    };
    let cursor = Cursor::new(session, declare, schema, rows, scroll, false);
    session.cursors.insert(name, cursor);
    Ok(())
}

/// `FETCH ... WITH (TIMEOUT = 'interval')`, as Materialize reads it: a
/// `FETCH` of a subscription that returns once no row came for `timeout`
/// (`'0s'`: the rows there now), rather than once one row came; of other
/// cursors, a plain `FETCH`.
pub async fn fetch_within(
    session: &mut Session,
    fetch: &Statement,
    timeout: &str,
) -> WeirResult<Output> {
    let invalid = || {
        WeirError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("invalid TIMEOUT \"{timeout}\": expected a non-negative interval such as '1s'"),
        )
    };
    let interval = crate::text_input::parse_interval(timeout).ok_or_else(invalid)?;
    if interval.months != 0 || interval.days < 0 || interval.nanoseconds < 0 {
        return Err(invalid());
    }
    let wait = Duration::from_secs(interval.days as u64 * 86_400)
        + Duration::from_nanos(interval.nanoseconds as u64);
    let Statement::Fetch {
        name, direction, ..
    } = fetch
    else {
        return Err(WeirError::internal(
            "FETCH ... WITH parsed as another statement",
        ));
    };
    let name = normalize_ident(name);
    let cursor = session
        .cursors
        .get_mut(&name)
        .ok_or_else(|| missing(&name))?;
    cursor.fetch(direction, Some(wait)).await
}

/// `DECLARE name CURSOR [WITH HOLD] FOR SUBSCRIBE ...`: a forward-only
/// cursor over the subscription's rows (`subscribe.rs`).
pub async fn declare_subscription(
    session: &mut Session,
    statement: &Statement,
    subscribe: &weir_sql::Subscribe,
) -> WeirResult<Output> {
    let Statement::Declare { stmts } = statement else {
        return Err(WeirError::internal(
            "DECLARE ... FOR SUBSCRIBE parsed as another statement",
        ));
    };
    let [declare] = stmts.as_slice() else {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "DECLARE names one cursor",
        ));
    };
    if declare.scroll == Some(true) {
        return Err(WeirError::unsupported(
            "SCROLL cursors over a subscription: its rows are read forward only",
        ));
    }
    check_declare(session, declare)?;
    let (schema, rows) = crate::subscribe::open(session, subscribe).await?;
    let cursor = Cursor::new(session, declare, schema, rows, Scroll::Never, true);
    let name = normalize_ident(&declare.names[0]);
    session.cursors.insert(name, cursor);
    Ok(Output::command("DECLARE CURSOR"))
}

/// Refuses a `DECLARE` outside a block without `WITH HOLD`, or of a name
/// in use.
fn check_declare(session: &Session, declare: &Declare) -> WeirResult<()> {
    if declare.hold != Some(true) && session.transaction.is_none() {
        return Err(WeirError::new(
            SqlState::NO_ACTIVE_SQL_TRANSACTION,
            "DECLARE CURSOR can only be used in transaction blocks",
        ));
    }
    match declare.names.as_slice() {
        [ident] if session.cursors.contains_key(&normalize_ident(ident)) => Err(WeirError::new(
            SqlState("42P03"),
            format!("cursor \"{}\" already exists", normalize_ident(ident)),
        )),
        [_] => Ok(()),
        _ => Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "DECLARE names one cursor",
        )),
    }
}

impl Cursor {
    /// A cursor at the start of `rows`.
    fn new(
        session: &Session,
        declare: &Declare,
        schema: SchemaRef,
        rows: RowStream,
        scroll: Scroll,
        live: bool,
    ) -> Cursor {
        let budget = session.query_memory_limit();
        Cursor {
            schema,
            unread: Some(SyncWrapper::new(rows)),
            kept: VecDeque::new(),
            read: 0,
            forgotten: 0,
            kept_bytes: 0,
            budget,
            scroll,
            position: 0,
            hold: declare.hold == Some(true),
            in_block: session.transaction.is_some(),
            binary: declare.binary == Some(true),
            live,
        }
    }

    /// Reads from the query until `wanted` rows have been read or it ends.
    /// A live cursor waits only while no row past its position has
    /// arrived, then takes the rows that are there.
    /// With a `timeout`, a live cursor reads until no row came for that
    /// long.
    async fn read_to(&mut self, wanted: usize, timeout: Option<Duration>) -> WeirResult<()> {
        while self.read < wanted {
            let Some(unread) = self.unread.as_mut() else {
                return Ok(());
            };
            let next = if let Some(wait) = timeout.filter(|_| self.live) {
                match tokio::time::timeout(wait, unread.get_mut().next()).await {
                    Ok(next) => next,
                    Err(_) => return Ok(()),
                }
            } else if self.live && self.read > self.position {
                match unread.get_mut().next().now_or_never() {
                    Some(next) => next,
                    None => return Ok(()),
                }
            } else {
                unread.get_mut().next().await
            };
            let Some(batch) = next else {
                self.unread = None;
                return Ok(());
            };
            let batch = batch?;
            self.read += batch.num_rows();
            self.kept_bytes += batch.get_array_memory_size();
            self.kept.push_back(batch);
            if self.kept_bytes > self.budget && self.scroll == Scroll::Always {
                return Err(WeirError::new(
                    SqlState::PROGRAM_LIMIT_EXCEEDED,
                    format!(
                        "the rows of a SCROLL cursor are larger than the query memory limit ({} bytes)",
                        self.budget
                    ),
                )
                .with_hint("Declare it without SCROLL to read it forward without keeping its rows."));
            }
        }
        Ok(())
    }

    /// Forgets kept batches wholly behind row `position`, where the cursor
    /// may: always for `NO SCROLL`, beyond the budget without `SCROLL`.
    fn forget_behind(&mut self, position: usize) {
        let may = match self.scroll {
            Scroll::Always => false,
            Scroll::WhileKept => self.kept_bytes > self.budget,
            Scroll::Never => true,
        };
        if !may {
            return;
        }
        if self.scroll == Scroll::WhileKept {
            // From now on it reads forward only.
            self.scroll = Scroll::Never;
        }
        while let Some(front) = self.kept.front() {
            if self.forgotten + front.num_rows() >= position {
                break;
            }
            self.forgotten += front.num_rows();
            self.kept_bytes -= front.get_array_memory_size();
            self.kept.pop_front();
        }
    }

    async fn fetch(
        &mut self,
        direction: &FetchDirection,
        timeout: Option<Duration>,
    ) -> WeirResult<Output> {
        let movement = Move::of(direction)?;
        let p = self.position as i64;
        // The rows the move needs read: all of them for moves relative to
        // the end. Rows past those are not needed, so the count `n` below
        // only has to be right when the move reaches the end.
        let needed = match movement {
            Move::Forward(k) | Move::Relative(k) => p.saturating_add(k.max(0)),
            Move::Backward(_) => 0,
            Move::Absolute(i) if i < 0 => i64::MAX,
            Move::Absolute(i) => i,
        };
        self.read_to(needed as usize, timeout).await?;
        let n = self.read as i64;
        // The rows to return, as 1-based positions in order, and where the
        // cursor stands afterwards.
        let (rows, position): (Vec<i64>, i64) = match movement {
            Move::Forward(k) => forward(p, k, n),
            Move::Backward(k) => backward(p, k),
            Move::Absolute(i) => absolute(i, n),
            Move::Relative(0) => ((1..=n).contains(&p).then_some(p).into_iter().collect(), p),
            Move::Relative(k) => absolute_from(p + k, n),
        };
        // A live cursor's last row is not its end: the next row to come
        // is n + 1, so it stays on row n.
        let position = if self.live { position.min(n) } else { position };
        if position < p && self.scroll == Scroll::Never
            || rows.iter().any(|&r| r as usize <= self.forgotten)
        {
            return Err(WeirError::new(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "cursor can only scan forward",
            )
            .with_hint("Declare it with SCROLL option to enable backward scan."));
        }
        self.position = position as usize;
        let batch = self.rows_at(&rows)?;
        self.forget_behind(self.position);
        Ok(Output::Fetched {
            schema: self.schema.clone(),
            batch,
            binary: self.binary,
        })
    }

    /// The kept rows at 1-based `positions`, a run of consecutive rows in
    /// ascending or descending order.
    fn rows_at(&self, positions: &[i64]) -> WeirResult<RecordBatch> {
        let (Some(&first), Some(&last)) = (positions.first(), positions.last()) else {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        };
        let (low, high) = (first.min(last) as usize, first.max(last) as usize);
        let mut pieces = Vec::new();
        let mut start = self.forgotten + 1;
        for batch in &self.kept {
            let end = start + batch.num_rows();
            let (from, to) = (low.max(start), (high + 1).min(end));
            if from < to {
                pieces.push(batch.slice(from - start, to - from));
            }
            start = end;
        }
        let run = concat_batches(&self.schema, &pieces)?;
        if first <= last {
            return Ok(run);
        }
        let reversed = UInt64Array::from_iter_values((0..run.num_rows() as u64).rev());
        Ok(take_record_batch(&run, &reversed)?)
    }
}

/// A `FETCH` direction with its count read.
#[derive(Debug, Clone, Copy)]
enum Move {
    /// `k` rows forward (`ALL`: as many as there are).
    Forward(i64),
    /// `k` rows backward.
    Backward(i64),
    /// To row `i`, counted from the end if negative.
    Absolute(i64),
    /// `k` rows from the current one.
    Relative(i64),
}

impl Move {
    fn of(direction: &FetchDirection) -> WeirResult<Move> {
        let or_one = |limit: &Option<ValueWithSpan>| match limit {
            Some(l) => count(&l.value),
            None => Ok(1),
        };
        Ok(match direction {
            FetchDirection::Next => Move::Forward(1),
            FetchDirection::Prior => Move::Backward(1),
            FetchDirection::Count { limit } => match count(&limit.value)? {
                k if k >= 0 => Move::Forward(k),
                k => Move::Backward(-k),
            },
            FetchDirection::Forward { limit } => Move::Forward(or_one(limit)?),
            FetchDirection::Backward { limit } => Move::Backward(or_one(limit)?),
            FetchDirection::All | FetchDirection::ForwardAll => Move::Forward(i64::MAX),
            FetchDirection::BackwardAll => Move::Backward(i64::MAX),
            FetchDirection::First => Move::Absolute(1),
            FetchDirection::Last => Move::Absolute(-1),
            FetchDirection::Absolute { limit } => Move::Absolute(count(&limit.value)?),
            FetchDirection::Relative { limit } => Move::Relative(count(&limit.value)?),
        })
    }
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

fn forward(p: i64, k: i64, n: i64) -> (Vec<i64>, i64) {
    let end = p.saturating_add(k);
    let rows: Vec<i64> = (p + 1..=end.min(n)).collect();
    let position = if end > n { n + 1 } else { end };
    (rows, position)
}

fn backward(p: i64, k: i64) -> (Vec<i64>, i64) {
    let start = p.saturating_sub(k);
    let rows: Vec<i64> = (start.max(1)..p).rev().collect();
    let position = if start < 1 { 0 } else { start };
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
    Some((cursor.schema.clone(), cursor.binary))
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
