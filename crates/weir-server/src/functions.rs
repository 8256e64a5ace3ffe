//! Functions drivers and connection pools call that need a session:
//! `current_setting`, `set_config`, `pg_typeof`, `pg_sleep` and the
//! session-scoped advisory locks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type};
use datafusion::common::{exec_err, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::expr_fn::SimpleScalarUDF;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;
use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::error::{SqlState, WeirError};
use crate::settings::SharedSettings;

/// Registers the session's functions in `ctx`; `session` is the session's
/// id (the owner of its advisory locks).
pub fn register(
    ctx: &SessionContext,
    settings: SharedSettings,
    locks: Arc<AdvisoryLocks>,
    session: u64,
) {
    ctx.register_udf(current_setting(settings.clone()));
    ctx.register_udf(set_config(settings));
    ctx.register_udf(ScalarUDF::new_from_impl(PgTypeof::new()));
    ctx.register_udf(pg_sleep());
    ctx.register_udf(advisory_lock(locks.clone(), session));
    ctx.register_udf(try_advisory_lock(locks.clone(), session));
    ctx.register_udf(advisory_unlock(locks.clone(), session));
    ctx.register_udf(advisory_unlock_all(locks, session));
}

/// Argument `i` as a string array of `rows` values.
fn strings(args: &[ColumnarValue], i: usize, rows: usize) -> Result<ArrayRef> {
    let array = args[i].to_array(rows)?;
    Ok(datafusion::arrow::compute::cast(&array, &DataType::Utf8)?)
}

/// `current_setting(name [, missing_ok])`.
fn current_setting(settings: SharedSettings) -> ScalarUDF {
    let function = move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let rows = rows_of(args);
        let names = strings(args, 0, rows)?;
        let names = names.as_string::<i32>();
        let missing_ok = match args.get(1) {
            Some(flag) => Some(flag.to_array(rows)?),
            None => None,
        };
        let settings = settings.lock();
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            if names.is_null(row) {
                out.push(None);
                continue;
            }
            match settings.get(names.value(row)) {
                Ok(value) => out.push(Some(value.to_owned())),
                Err(_)
                    if missing_ok
                        .as_ref()
                        .is_some_and(|m| m.as_boolean().value(row)) =>
                {
                    out.push(None)
                }
                Err(e) => return Err(DataFusionError::External(Box::new(e))),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    };
    let signature = Signature::one_of(
        vec![
            TypeSignature::Exact(vec![DataType::Utf8]),
            TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
        ],
        Volatility::Volatile,
    );
    udf("current_setting", signature, DataType::Utf8, function)
}

/// `set_config(name, value, is_local)`: sets a parameter and returns its
/// new value.
fn set_config(settings: SharedSettings) -> ScalarUDF {
    let function = move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let rows = rows_of(args);
        let names = strings(args, 0, rows)?;
        let values = strings(args, 1, rows)?;
        let local = args[2].to_array(rows)?;
        let (names, values, local) = (
            names.as_string::<i32>(),
            values.as_string::<i32>(),
            local.as_boolean(),
        );
        let mut settings = settings.lock();
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            if names.is_null(row) {
                return exec_err!("SET requires parameter name");
            }
            let (name, value) = (names.value(row), values.value(row));
            let result = if !local.is_null(row) && local.value(row) {
                settings.set_local(name, value).map(|_| ())
            } else {
                settings.set(name, value)
            };
            if let Err(e) = result {
                return Err(DataFusionError::External(Box::new(e)));
            }
            out.push(settings.get(name).ok().map(str::to_owned));
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    };
    let signature = Signature::exact(
        vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
        Volatility::Volatile,
    );
    udf("set_config", signature, DataType::Utf8, function)
}

/// The number of rows of a call's arguments (1 when all are scalars).
pub fn rows_of(args: &[ColumnarValue]) -> usize {
    args.iter()
        .find_map(|a| match a {
            ColumnarValue::Array(array) => Some(array.len()),
            ColumnarValue::Scalar(_) => None,
        })
        .unwrap_or(1)
}

/// A call's argument as an array: one row if it is a scalar (so a
/// constant is converted once, not once per row), and whether it was.
pub fn argument_array(value: &ColumnarValue) -> Result<(ArrayRef, bool)> {
    Ok(match value {
        ColumnarValue::Scalar(scalar) => (scalar.to_array()?, true),
        ColumnarValue::Array(array) => (array.clone(), false),
    })
}

/// `array` as a call's result: its one value if the input was a scalar.
pub fn shaped(array: ArrayRef, scalar: bool) -> Result<ColumnarValue> {
    Ok(if scalar {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
    } else {
        ColumnarValue::Array(array)
    })
}

/// A synchronous function with any signature.
fn udf(
    name: &str,
    signature: Signature,
    returns: DataType,
    function: impl Fn(&[ColumnarValue]) -> Result<ColumnarValue> + Send + Sync + 'static,
) -> ScalarUDF {
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        name,
        signature,
        returns,
        Arc::new(function),
    ))
}

/// `pg_typeof(any)`: the PostgreSQL name of its argument's type.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl PgTypeof {
    fn new() -> Self {
        PgTypeof {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(crate::regtype::regtype_field(self.name()))
    }

    /// The argument's type as a `regtype`: its OID, as the wire reports it.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let oid = arrow_pg::datatypes::field_into_pg_type(&args.arg_fields[0])
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .oid();
        Ok(ColumnarValue::Scalar(ScalarValue::Int32(Some(oid as i32))))
    }
}

/// The body of an [`AsyncFunction`]: the arguments and the row count to
/// a future of the result.
type AsyncBody = Arc<
    dyn Fn(Vec<ColumnarValue>, usize) -> BoxFuture<'static, Result<ColumnarValue>> + Send + Sync,
>;

/// A function that waits and returns `void` (`pg_sleep`,
/// `pg_advisory_lock`): DataFusion runs it as an async function, so
/// waiting holds no thread and a canceled statement stops it. PostgreSQL
/// sends a `void` value as an empty text; the result column is marked as
/// `void` for the wire.
struct AsyncFunction {
    name: &'static str,
    signature: Signature,
    body: AsyncBody,
}

/// The value of a function returning `void`.
fn void() -> ColumnarValue {
    ColumnarValue::Scalar(ScalarValue::Utf8(Some(String::new())))
}

impl AsyncFunction {
    fn udf(
        name: &'static str,
        signature: Signature,
        body: impl Fn(Vec<ColumnarValue>, usize) -> BoxFuture<'static, Result<ColumnarValue>>
            + Send
            + Sync
            + 'static,
    ) -> ScalarUDF {
        let function = AsyncFunction {
            name,
            signature,
            body: Arc::new(body),
        };
        AsyncScalarUDF::new(Arc::new(function)).into_scalar_udf()
    }
}

impl std::fmt::Debug for AsyncFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncFunction")
            .field("name", &self.name)
            .finish()
    }
}

impl PartialEq for AsyncFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.body, &other.body)
    }
}

impl Eq for AsyncFunction {}

impl std::hash::Hash for AsyncFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for AsyncFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        let marked = HashMap::from([(
            arrow_pg::datatypes::PG_TYPE_KEY.to_owned(),
            "void".to_owned(),
        )]);
        Ok(Arc::new(
            Field::new(self.name, DataType::Utf8, true).with_metadata(marked),
        ))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!("{} runs asynchronously", self.name)
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for AsyncFunction {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        (self.body)(args.args, args.number_rows).await
    }
}

/// `pg_sleep(seconds)`: waits without holding a thread, and stops when
/// the statement is canceled.
fn pg_sleep() -> ScalarUDF {
    let signature = Signature::uniform(1, vec![DataType::Float64], Volatility::Volatile);
    AsyncFunction::udf("pg_sleep", signature, |args, rows| {
        Box::pin(async move {
            let seconds = args[0].to_array(rows)?;
            let seconds = seconds.as_primitive::<Float64Type>();
            for s in seconds.iter().flatten() {
                if s.is_finite() && s > 0.0 {
                    tokio::time::sleep(Duration::from_secs_f64(s.min(1e9))).await;
                }
            }
            Ok(void())
        })
    })
}

/// Session-scoped advisory locks: each key is held by at most one session,
/// as often as it took it; a session's locks go when it ends.
#[derive(Debug, Default)]
pub struct AdvisoryLocks {
    held: parking_lot::Mutex<HashMap<i64, (u64, u32)>>,
    released: Notify,
}

impl AdvisoryLocks {
    /// Takes `key` for `session` if it is free or already the session's.
    pub fn try_lock(&self, key: i64, session: u64) -> bool {
        let mut held = self.held.lock();
        match held.get_mut(&key) {
            Some((owner, count)) if *owner == session => {
                *count += 1;
                true
            }
            Some(_) => false,
            None => {
                held.insert(key, (session, 1));
                true
            }
        }
    }

    /// Takes `key` for `session`, waiting while another session holds it.
    pub async fn lock(&self, key: i64, session: u64) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.try_lock(key, session) {
                return;
            }
            released.await;
        }
    }

    /// Releases one hold of `key` by `session`; false if it held none.
    pub fn unlock(&self, key: i64, session: u64) -> bool {
        let mut held = self.held.lock();
        match held.get_mut(&key) {
            Some((owner, count)) if *owner == session => {
                *count -= 1;
                if *count == 0 {
                    held.remove(&key);
                    self.released.notify_waiters();
                }
                true
            }
            _ => false,
        }
    }

    /// Releases every lock `session` holds.
    pub fn unlock_all(&self, session: u64) {
        let mut held = self.held.lock();
        let before = held.len();
        held.retain(|_, (owner, _)| *owner != session);
        if held.len() != before {
            self.released.notify_waiters();
        }
    }
}

/// The keys of an advisory lock call: one bigint, or two integers (the
/// high and low halves of the key).
fn lock_keys(args: &[ColumnarValue], rows: usize) -> Result<Vec<Option<i64>>> {
    let column = |arg: &ColumnarValue| -> Result<ArrayRef> {
        Ok(datafusion::arrow::compute::cast(
            &arg.to_array(rows)?,
            &DataType::Int64,
        )?)
    };
    match args {
        [key] => Ok(column(key)?.as_primitive::<Int64Type>().iter().collect()),
        [high, low] => {
            let (high, low) = (column(high)?, column(low)?);
            let half = |v: i64| -> Result<i64> {
                match i32::try_from(v) {
                    Ok(v) => Ok(v as i64),
                    Err(_) => Err(DataFusionError::External(Box::new(WeirError::new(
                        SqlState::NUMERIC_OUT_OF_RANGE,
                        "integer out of range",
                    )))),
                }
            };
            high.as_primitive::<Int64Type>()
                .iter()
                .zip(low.as_primitive::<Int64Type>().iter())
                .map(|(h, l)| match (h, l) {
                    (Some(h), Some(l)) => Ok(Some((half(h)? << 32) | (half(l)? as u32 as i64))),
                    _ => Ok(None),
                })
                .collect()
        }
        _ => exec_err!("advisory lock functions take one bigint or two integers"),
    }
}

fn lock_signature() -> Signature {
    Signature::one_of(
        vec![
            TypeSignature::Uniform(1, vec![DataType::Int64]),
            TypeSignature::Uniform(2, vec![DataType::Int64]),
        ],
        Volatility::Volatile,
    )
}

/// `pg_advisory_lock(key)`: waits until the session holds `key`.
fn advisory_lock(locks: Arc<AdvisoryLocks>, session: u64) -> ScalarUDF {
    AsyncFunction::udf("pg_advisory_lock", lock_signature(), move |args, rows| {
        let locks = locks.clone();
        Box::pin(async move {
            for key in lock_keys(&args, rows)?.into_iter().flatten() {
                locks.lock(key, session).await;
            }
            Ok(void())
        })
    })
}

/// `pg_try_advisory_lock(key)`: takes `key` if it is free.
fn try_advisory_lock(locks: Arc<AdvisoryLocks>, session: u64) -> ScalarUDF {
    per_key("pg_try_advisory_lock", move |key| {
        locks.try_lock(key, session)
    })
}

/// `pg_advisory_unlock(key)`: releases one hold; false if there was none.
fn advisory_unlock(locks: Arc<AdvisoryLocks>, session: u64) -> ScalarUDF {
    per_key("pg_advisory_unlock", move |key| locks.unlock(key, session))
}

/// A lock function that answers each key at once with `answer(key)`.
fn per_key(name: &str, answer: impl Fn(i64) -> bool + Send + Sync + 'static) -> ScalarUDF {
    let function = move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let keys = lock_keys(args, rows_of(args))?;
        let answers: BooleanArray = keys.into_iter().map(|k| k.map(&answer)).collect();
        Ok(ColumnarValue::Array(Arc::new(answers)))
    };
    udf(name, lock_signature(), DataType::Boolean, function)
}

/// `pg_advisory_unlock_all()`.
fn advisory_unlock_all(locks: Arc<AdvisoryLocks>, session: u64) -> ScalarUDF {
    AsyncFunction::udf(
        "pg_advisory_unlock_all",
        Signature::exact(vec![], Volatility::Volatile),
        move |_, _| {
            locks.unlock_all(session);
            Box::pin(async { Ok(void()) })
        },
    )
}
