//! A query's rows on their way to the client. DataFusion produces them
//! batch by batch as the client reads them, so a result of any size runs
//! in the memory of the batches in flight, not of the whole result.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::SendableRecordBatchStream;
use futures::stream::{self, BoxStream};
use futures::StreamExt;
use tokio::time::Instant;

use crate::error::{SqlState, WeirError, WeirResult};

/// The rows of a result, in batches, produced as they are read.
pub type RowStream = BoxStream<'static, WeirResult<RecordBatch>>;

/// Rows already in memory.
pub fn from_batches(batches: Vec<RecordBatch>) -> RowStream {
    stream::iter(batches.into_iter().map(Ok)).boxed()
}

/// The rows of an executing plan. Waits for the first batch, so that an
/// error the query meets at once (most do) is the statement's error, sent
/// before any row; a later error ends the rows already sent, as in
/// PostgreSQL.
pub async fn start(mut batches: SendableRecordBatchStream) -> WeirResult<RowStream> {
    let first = match batches.next().await {
        Some(batch) => Some(batch?),
        None => None,
    };
    let rest = batches.map(|batch| batch.map_err(WeirError::from));
    Ok(stream::iter(first.map(Ok)).chain(rest).boxed())
}

/// `rows`, whose schema is `schema`, under `relabeled`: the same columns
/// with more field metadata (how they are written, `numeric_display.rs`).
pub fn relabeled(schema: &SchemaRef, relabeled: SchemaRef, rows: RowStream) -> RowStream {
    if Arc::ptr_eq(schema, &relabeled) {
        return rows;
    }
    rows.map(move |batch| {
        let batch = batch?;
        // A batch whose fields differ from the plan's in more than
        // metadata (nullability) goes as it is, written at its types'
        // scales.
        Ok(batch
            .clone()
            .with_schema(relabeled.clone())
            .unwrap_or(batch))
    })
    .boxed()
}

/// `schema` with the types its rows are sent as: PostgreSQL has no
/// unsigned integers, so DataFusion's `UInt64` results (`row_number()`,
/// `array_length`) are sent as `bigint`, not `numeric`.
pub fn wire_types(schema: &SchemaRef) -> SchemaRef {
    if !schema
        .fields()
        .iter()
        .any(|f| f.data_type() == &DataType::UInt64)
    {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::UInt64 => f.as_ref().clone().with_data_type(DataType::Int64),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The rows of a plan whose schema is `planned`, with the types they are
/// sent as (see [`wire_types`]): cast where those differ, a value that
/// does not fit failing with 22003 rather than changing.
pub fn with_wire_types(planned: SchemaRef, rows: RowStream) -> (SchemaRef, RowStream) {
    let schema = wire_types(&planned);
    if Arc::ptr_eq(&schema, &planned) {
        return (schema, rows);
    }
    let target = schema.clone();
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    let rows = rows
        .map(move |batch| {
            let batch = batch?;
            let columns = batch
                .columns()
                .iter()
                .zip(target.fields())
                .map(|(c, f)| cast_with_options(c, f.data_type(), &options))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| WeirError::new(SqlState::NUMERIC_OUT_OF_RANGE, e.to_string()))?;
            Ok(RecordBatch::try_new(target.clone(), columns)?)
        })
        .boxed();
    (schema, rows)
}

/// All the rows, in memory.
#[cfg(test)]
pub async fn collect(rows: RowStream) -> WeirResult<Vec<RecordBatch>> {
    rows.collect::<Vec<_>>().await.into_iter().collect()
}

/// `rows` (batches, or COPY's messages), ended with 57014 once `deadline`
/// (the statement timeout) passes, and setting `failed` when an error ends
/// them, so that the session fails its transaction block as it does for
/// any statement error.
pub fn watched<T, E>(
    rows: BoxStream<'static, Result<T, E>>,
    deadline: Option<Instant>,
    failed: Arc<AtomicBool>,
) -> BoxStream<'static, Result<T, E>>
where
    T: Send + 'static,
    E: From<WeirError> + Send + 'static,
{
    let deadline = deadline.map(|d| Box::pin(tokio::time::sleep_until(d)));
    stream::unfold(Some((rows, deadline)), move |state| {
        let failed = failed.clone();
        async move {
            let (mut rows, mut deadline) = state?;
            let next = match deadline.as_mut() {
                Some(sleep) => tokio::select! {
                    next = rows.next() => next,
                    () = sleep => Some(Err(WeirError::new(
                        SqlState::QUERY_CANCELED,
                        "canceling statement due to statement timeout",
                    ).into())),
                },
                None => rows.next().await,
            };
            match next? {
                Ok(batch) => Some((Ok(batch), Some((rows, deadline)))),
                Err(error) => {
                    failed.store(true, Ordering::Release);
                    Some((Err(error), None))
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int32Array;
    use std::time::Duration;

    fn batch(n: i32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int32, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![n]))]).unwrap()
    }

    #[tokio::test]
    async fn an_error_marks_the_stream_failed_and_ends_it() {
        let failed = Arc::new(AtomicBool::new(false));
        let rows = stream::iter(vec![
            Ok(batch(1)),
            Err(WeirError::new(
                SqlState::DIVISION_BY_ZERO,
                "division by zero",
            )),
            Ok(batch(2)),
        ])
        .boxed();
        let seen: Vec<WeirResult<RecordBatch>> =
            watched(rows, None, failed.clone()).collect().await;
        assert_eq!(seen.len(), 2, "nothing follows the error");
        assert!(seen[1].is_err());
        assert!(failed.load(Ordering::Acquire));
    }

    #[tokio::test]
    async fn relabeled_rows_carry_the_metadata_when_their_fields_allow() {
        let marked = |nullable: bool| {
            let field = Field::new("n", DataType::Int32, nullable).with_metadata(
                std::collections::HashMap::from([("k".to_owned(), "v".to_owned())]),
            );
            Arc::new(Schema::new(vec![field]))
        };
        let relabel = |target: SchemaRef| async move {
            let rows = from_batches(vec![batch(1)]);
            let seen = collect(relabeled(&batch(1).schema(), target, rows))
                .await
                .unwrap();
            seen[0].schema()
        };
        assert_eq!(relabel(marked(true)).await, marked(true));
        // A nullable batch cannot be labelled as non-nullable: it goes as
        // it is.
        let nullable = Arc::new(Schema::new(vec![Field::new("n", DataType::Int32, true)]));
        let rows = from_batches(vec![batch(1).with_schema(nullable.clone()).unwrap()]);
        let seen = collect(relabeled(&nullable, marked(false), rows))
            .await
            .unwrap();
        assert_eq!(seen[0].schema(), nullable);
    }

    #[tokio::test]
    async fn the_deadline_ends_rows_that_do_not_come() {
        let failed = Arc::new(AtomicBool::new(false));
        let rows = stream::once(async { Ok(batch(1)) })
            .chain(stream::pending())
            .boxed();
        let deadline = Instant::now() + Duration::from_millis(20);
        let seen: Vec<WeirResult<RecordBatch>> = watched(rows, Some(deadline), failed.clone())
            .collect()
            .await;
        assert_eq!(seen.len(), 2);
        let error = seen[1].as_ref().unwrap_err();
        assert_eq!(error.code, SqlState::QUERY_CANCELED);
        assert!(failed.load(Ordering::Acquire));
    }
}
