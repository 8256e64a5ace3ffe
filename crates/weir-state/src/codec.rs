//! Arrow IPC stream encoding of batches stored in data and base objects.

use std::io::Cursor;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::StateResult;

/// Encodes one batch as a self-describing Arrow IPC stream.
pub(crate) fn encode(batch: &RecordBatch) -> StateResult<Vec<u8>> {
    let mut out = Vec::new();
    encode_into(batch, &mut out)?;
    Ok(out)
}

/// Appends one batch to `out` as a self-describing Arrow IPC stream.
pub(crate) fn encode_into(batch: &RecordBatch, out: &mut Vec<u8>) -> StateResult<()> {
    let mut writer = StreamWriter::try_new(&mut *out, batch.schema_ref())?;
    writer.write(batch)?;
    writer.finish()?;
    Ok(())
}

/// Decodes an IPC stream written by [`encode`] into one batch of `schema`.
pub(crate) fn decode(bytes: &[u8], schema: &SchemaRef) -> StateResult<RecordBatch> {
    let (_, batches) = read(bytes)?;
    Ok(datafusion::arrow::compute::concat_batches(
        schema, &batches,
    )?)
}

/// Decodes an IPC stream written by [`encode`] into one batch of the
/// schema it was written with.
pub(crate) fn decode_stored(bytes: &[u8]) -> StateResult<RecordBatch> {
    let (schema, batches) = read(bytes)?;
    Ok(datafusion::arrow::compute::concat_batches(
        &schema, &batches,
    )?)
}

/// The schema and batches of an IPC stream.
fn read(bytes: &[u8]) -> StateResult<(SchemaRef, Vec<RecordBatch>)> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
    let schema = reader.schema();
    Ok((schema, reader.collect::<Result<Vec<_>, _>>()?))
}
