//! `nextval`, `currval`, `setval`, `lastval` and
//! `pg_get_serial_sequence`, and what a session remembers of sequences.
//!
//! `nextval` hands out a whole batch's numbers in one step (one lock, one
//! arithmetic run), not a call per row. Each function names the epoch
//! whose commit makes the numbers it took durable; the statement returns
//! once that epoch is committed ([`SessionSequences::take_pending`], used
//! by the handler), or, inside a transaction block, the block's end does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use futures::stream::BoxStream;
use futures::StreamExt;
use weir_state::TableId;

use super::{SequenceDef, SequenceValue, Sequences};
use crate::catalog::Catalog;
use crate::database::Database;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::provider::PinnedSnapshot;
use crate::session::{Output, Session};

/// What a session remembers of sequences: `currval`'s values, `lastval`'s,
/// and the epoch the numbers it took wait for.
#[derive(Debug, Default)]
pub struct SessionSequences {
    state: Mutex<SessionState>,
}

#[derive(Debug, Default)]
struct SessionState {
    /// The last value `nextval` (or `setval`) gave each sequence here.
    current: HashMap<TableId, i64>,
    /// The last value `nextval` returned here.
    last: Option<i64>,
    /// The newest epoch holding numbers this session took that a client
    /// may not yet rely on.
    pending: Option<u64>,
}

impl SessionSequences {
    fn state(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().expect("session sequences lock")
    }

    /// The epoch whose commit the numbers taken since the last call wait
    /// for, if any were taken.
    pub fn take_pending(&self) -> Option<u64> {
        self.state().pending.take()
    }

    fn took(&self, id: TableId, value: Option<i64>, epoch: u64) {
        let mut state = self.state();
        if let Some(value) = value {
            state.current.insert(id, value);
            state.last = Some(value);
        }
        state.pending = Some(state.pending.map_or(epoch, |e| e.max(epoch)));
    }
}

/// `output` of a statement of `session`, returned once the sequence
/// numbers the statement took are durable: each batch of its rows waits
/// before it goes out if numbers were taken for it. Inside a transaction
/// block (explicit, or implicit around several statements) the numbers
/// wait for the block's commit ([`Session::commit_block`]), as
/// PostgreSQL makes a sequence's advance durable with the transaction.
pub async fn durable(session: &Session, output: Output) -> WeirResult<Output> {
    if session.transaction.is_some() {
        return Ok(output);
    }
    let (db, taken) = (session.db.clone(), session.sequences.clone());
    Ok(match output {
        Output::Rows { schema, rows } => Output::Rows {
            schema,
            rows: then_durable(rows, db, taken),
        },
        Output::CopyOut {
            binary,
            columns,
            data,
        } => Output::CopyOut {
            binary,
            columns,
            data: then_durable(data, db, taken),
        },
        other => {
            wait_taken(session).await?;
            other
        }
    })
}

/// Waits until the sequence numbers `session` took are durable.
pub async fn wait_taken(session: &Session) -> WeirResult<()> {
    match session.sequences.take_pending() {
        Some(epoch) => session.db.wait_committed(epoch).await,
        None => Ok(()),
    }
}

/// `items`, each held back until the numbers taken while it was made are
/// durable (an error in its place if the wait fails), so a client never
/// sees a number a crash could hand out again.
fn then_durable<T: Send + 'static, E: From<WeirError> + Send + 'static>(
    items: BoxStream<'static, Result<T, E>>,
    db: Arc<Database>,
    taken: Arc<SessionSequences>,
) -> BoxStream<'static, Result<T, E>> {
    items
        .then(move |item| {
            let (db, taken) = (db.clone(), taken.clone());
            async move {
                if let Some(epoch) = taken.take_pending() {
                    db.wait_committed(epoch).await.map_err(E::from)?;
                }
                item
            }
        })
        .boxed()
}

/// Registers the sequence functions of a session.
pub fn register(
    ctx: &SessionContext,
    sequences: Arc<Sequences>,
    pinned: Arc<PinnedSnapshot>,
    session: Arc<SessionSequences>,
    names: crate::catalog_rows::CatalogOids,
) {
    let shared = Shared {
        sequences,
        pinned,
        session,
    };
    for kind in [Kind::Next, Kind::Current, Kind::Set, Kind::Last] {
        ctx.register_udf(ScalarUDF::new_from_impl(SequenceFunction::new(
            kind,
            shared.clone(),
        )));
    }
    ctx.register_udf(ScalarUDF::new_from_impl(SerialSequence::new(
        shared.pinned,
        names,
    )));
}

/// What every sequence function reaches.
#[derive(Debug, Clone)]
struct Shared {
    sequences: Arc<Sequences>,
    pinned: Arc<PinnedSnapshot>,
    session: Arc<SessionSequences>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Next,
    Current,
    Set,
    Last,
}

#[derive(Debug)]
struct SequenceFunction {
    kind: Kind,
    shared: Shared,
    signature: Signature,
}

impl PartialEq for SequenceFunction {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && Arc::ptr_eq(&self.shared.session, &other.shared.session)
    }
}

impl Eq for SequenceFunction {}

impl std::hash::Hash for SequenceFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.kind.hash(state);
    }
}

impl SequenceFunction {
    fn new(kind: Kind, shared: Shared) -> Self {
        let signature = match kind {
            Kind::Next | Kind::Current => Signature::string(1, Volatility::Volatile),
            Kind::Set => Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Int64]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Int64, DataType::Boolean]),
                ],
                Volatility::Volatile,
            ),
            Kind::Last => Signature::nullary(Volatility::Volatile),
        };
        SequenceFunction {
            kind,
            shared,
            signature,
        }
    }

    /// `nextval` of the sequence named in each row.
    fn next_values(&self, names: &ColumnarValue, rows: usize) -> WeirResult<ArrayRef> {
        let Shared {
            sequences, session, ..
        } = &self.shared;
        if let ColumnarValue::Scalar(name) = names {
            let Some(name) = text(name) else {
                return Ok(Arc::new(Int64Array::new_null(rows)));
            };
            let def = self.sequence(&name)?;
            let (values, epoch) = sequences.next(&def, rows)?;
            session.took(def.id, values.last().copied(), epoch);
            return Ok(Arc::new(Int64Array::from(values)));
        }
        // A name per row (rare): one number at a time.
        let names = strings(names, rows)?;
        let mut values = Vec::with_capacity(rows);
        for name in names.iter() {
            values.push(match name {
                Some(name) => {
                    let def = self.sequence(name)?;
                    let (taken, epoch) = sequences.next(&def, 1)?;
                    session.took(def.id, taken.last().copied(), epoch);
                    taken.first().copied()
                }
                None => None,
            });
        }
        Ok(Arc::new(Int64Array::from(values)))
    }

    /// `currval` of the sequence named in each row.
    fn current_values(&self, names: &ColumnarValue, rows: usize) -> WeirResult<ArrayRef> {
        let names = strings(names, rows)?;
        let mut values = Vec::with_capacity(rows);
        for name in names.iter() {
            values.push(match name {
                Some(name) => {
                    let def = self.sequence(name)?;
                    let current = self.shared.session.state().current.get(&def.id).copied();
                    Some(current.ok_or_else(|| {
                        WeirError::new(
                            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                            format!(
                                "currval of sequence \"{}\" is not yet defined in this session",
                                def.name
                            ),
                        )
                    })?)
                }
                None => None,
            });
        }
        Ok(Arc::new(Int64Array::from(values)))
    }

    /// `setval(name, value [, is_called])` for each row.
    fn set_values(&self, args: &[ColumnarValue], rows: usize) -> WeirResult<ArrayRef> {
        let names = strings(&args[0], rows)?;
        let values = args[1].to_array(rows)?;
        let values = values.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        let called = match args.get(2) {
            Some(flags) => Some(flags.to_array(rows)?),
            None => None,
        };
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            let called = match &called {
                Some(flags) if flags.is_null(row) => None,
                Some(flags) => Some(flags.as_boolean().value(row)),
                None => Some(true),
            };
            if names.is_null(row) || values.is_null(row) || called.is_none() {
                out.push(None);
                continue;
            }
            let def = self.sequence(names.value(row))?;
            let value = SequenceValue {
                last: values.value(row),
                called: called == Some(true),
            };
            let epoch = self.shared.sequences.set(&def, value)?;
            let current = value.called.then_some(value.last);
            self.shared.session.took(def.id, current, epoch);
            out.push(Some(value.last));
        }
        Ok(Arc::new(Int64Array::from(out)))
    }

    /// `lastval()`.
    fn last_value(&self, rows: usize) -> WeirResult<ArrayRef> {
        let last = self.shared.session.state().last.ok_or_else(|| {
            WeirError::new(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "lastval is not yet defined in this session",
            )
        })?;
        Ok(Arc::new(Int64Array::from(vec![last; rows])))
    }

    /// The sequence `name` (as SQL writes a relation's name) names in the
    /// session's catalog.
    fn sequence(&self, name: &str) -> WeirResult<SequenceDef> {
        let snapshot = self.shared.pinned.get();
        find_sequence(&snapshot.catalog, name)
    }
}

impl ScalarUDFImpl for SequenceFunction {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Next => "nextval",
            Kind::Current => "currval",
            Kind::Set => "setval",
            Kind::Last => "lastval",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let result = match self.kind {
            Kind::Next => self.next_values(&args.args[0], rows),
            Kind::Current => self.current_values(&args.args[0], rows),
            Kind::Set => self.set_values(&args.args, rows),
            Kind::Last => self.last_value(rows),
        };
        result
            .map(ColumnarValue::Array)
            .map_err(|e| DataFusionError::External(Box::new(e)))
    }
}

/// The sequence `name` names in `catalog`: 42P01 if nothing has that
/// name, 42809 if a relation does.
pub fn find_sequence(catalog: &Catalog, name: &str) -> WeirResult<SequenceDef> {
    let name = parse_name(name)?;
    if let Some(def) = catalog.sequences.get(&name) {
        return Ok(def.clone());
    }
    Err(match catalog.kind_of(&name) {
        Some(_) => WeirError::new(
            SqlState::WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not a sequence"),
        ),
        None => crate::catalog::undefined_relation(&name),
    })
}

/// A relation's name written as SQL writes it (`orders_id_seq`,
/// `public."Orders_id_seq"`), as the catalog keys it.
pub(super) fn parse_name(text: &str) -> WeirResult<String> {
    let name = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_object_name(false))
        .map_err(|_| {
            WeirError::new(
                SqlState("42602"),
                format!("invalid name syntax: \"{text}\""),
            )
        })?;
    crate::catalog::relation_name(&name)
}

/// A text scalar's value (NULL: `None`).
fn text(value: &ScalarValue) -> Option<String> {
    match value {
        ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => v.clone(),
        _ => None,
    }
}

/// A text argument as `rows` strings.
fn strings(value: &ColumnarValue, rows: usize) -> WeirResult<StringArray> {
    let array = value.to_array(rows)?;
    let array = datafusion::arrow::compute::cast(&array, &DataType::Utf8)?;
    Ok(array.as_string::<i32>().clone())
}

/// `pg_get_serial_sequence(table, column)`: the sequence that numbers the
/// column (`SERIAL`, identity), schema-qualified, or NULL.
#[derive(Debug)]
struct SerialSequence {
    pinned: Arc<PinnedSnapshot>,
    /// The OIDs the session's catalog handed out: a table may be named by
    /// its OID as text (`attrelid::regclass::text`, as SQLAlchemy's
    /// reflection passes it).
    names: crate::catalog_rows::CatalogOids,
    signature: Signature,
}

impl PartialEq for SerialSequence {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.pinned, &other.pinned)
    }
}

impl Eq for SerialSequence {}

impl std::hash::Hash for SerialSequence {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "pg_get_serial_sequence".hash(state);
    }
}

impl SerialSequence {
    fn new(pinned: Arc<PinnedSnapshot>, names: crate::catalog_rows::CatalogOids) -> Self {
        SerialSequence {
            pinned,
            names,
            signature: Signature::string(2, Volatility::Stable),
        }
    }

    fn sequence_of(
        &self,
        catalog: &Catalog,
        table: &str,
        column: &str,
    ) -> WeirResult<Option<String>> {
        // A table named by its OID as text: one the session's catalog
        // handed out, or a system catalog's (which owns no sequence).
        let table = match table.parse::<i32>() {
            Ok(oid) => match self.names.read().names.get(&oid).cloned() {
                Some(name) => name,
                None => return Ok(None),
            },
            Err(_) => parse_name(table)?,
        };
        if catalog.kind_of(&table).is_none() {
            return Err(crate::catalog::undefined_relation(&table));
        }
        let columns = catalog.columns_of(&table);
        if columns.is_some_and(|columns| columns.iter().all(|c| c.name != column)) {
            return Err(WeirError::new(
                SqlState::UNDEFINED_COLUMN,
                format!("column \"{column}\" of relation \"{table}\" does not exist"),
            ));
        }
        Ok(catalog
            .sequences
            .values()
            .find(|s| s.owned_by.as_ref() == Some(&(table.clone(), column.to_owned())))
            .map(|s| {
                format!(
                    "{}.{}",
                    crate::catalog::SCHEMA,
                    crate::catalog_functions::quoted(&s.name)
                )
            }))
    }
}

impl ScalarUDFImpl for SerialSequence {
    fn name(&self) -> &str {
        "pg_get_serial_sequence"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let snapshot = self.pinned.get();
        let run = || -> WeirResult<ArrayRef> {
            let tables = strings(&args.args[0], rows)?;
            let columns = strings(&args.args[1], rows)?;
            let mut out = Vec::with_capacity(rows);
            for (table, column) in tables.iter().zip(columns.iter()) {
                out.push(match (table, column) {
                    (Some(table), Some(column)) => {
                        self.sequence_of(&snapshot.catalog, table, column)?
                    }
                    _ => None,
                });
            }
            Ok(Arc::new(StringArray::from(out)))
        };
        run()
            .map(ColumnarValue::Array)
            .map_err(|e| DataFusionError::External(Box::new(e)))
    }
}
