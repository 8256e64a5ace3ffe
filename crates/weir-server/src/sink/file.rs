//! The file sink (`connector = 'filesystem'`, Flink's name): each
//! committed epoch's rows as one Parquet object, `<epoch>.parquet` (the
//! epoch as 20 digits, so names sort as epochs do) under a folder or an
//! object-store prefix.
//!
//! An object appears whole or not at all (a local file is written aside
//! and renamed, an S3 object is visible once its upload completes), and
//! only after its epoch committed, so readers never see a partial or an
//! uncommitted epoch. Delivering an epoch again after a crash writes the
//! same rows under the same name: exactly once, by idempotent writes.
//! Rows only: the sink takes queries whose output only inserts.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::ObjectStore;
use parquet::arrow::async_writer::AsyncArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use weir_stream::Changes;

use super::postgres::Failure;
use crate::error::{SqlState, WeirError, WeirResult};

/// A file sink's settings, from `WITH (...)`.
#[derive(Debug, Clone)]
pub(super) struct FileSink {
    store: Arc<dyn ObjectStore>,
    root: Path,
}

impl FileSink {
    /// Reads the options: `path` (a folder, `file://...` or
    /// `s3://bucket/prefix`), `format = 'parquet'` (the default), and
    /// `type = 'append-only'` if given.
    pub(super) fn parse(options: &[(String, String)]) -> WeirResult<Self> {
        let mut path = None;
        for (key, value) in options {
            match (key.as_str(), value.as_str()) {
                ("path", _) => path = Some(value.clone()),
                ("format", "parquet") | ("type", "append-only") => {}
                ("format", _) => {
                    return Err(WeirError::unsupported(format!(
                        "file sink format '{value}' (Weir writes 'parquet')"
                    )))
                }
                _ => return Err(super::unrecognized(key, value)),
            }
        }
        let Some(path) = path else {
            return Err(WeirError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                "a file sink needs path = '...' (a folder, file://... or s3://bucket/prefix)",
            ));
        };
        let (store, root) = weir_state::open_location(&path).map_err(|e| {
            WeirError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("file sink path '{path}': {e}"),
            )
        })?;
        Ok(FileSink { store, root })
    }

    /// A file holds rows: the query's output must only insert.
    pub(super) fn check_query(append_only: bool) -> WeirResult<()> {
        if append_only {
            return Ok(());
        }
        Err(WeirError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            "the sink's query updates and deletes rows, which a file sink cannot deliver",
        )
        .with_hint("A PostgreSQL sink with type = 'upsert' can."))
    }

    /// Writes epoch `epoch`'s rows as one Parquet object.
    pub(super) async fn deliver(&self, epoch: u64, changes: &Changes) -> Result<(), Failure> {
        let failed = |e: String| Failure::Deliver(format!("epoch {epoch}: {e}"));
        let rows: RecordBatch = changes.expand().map_err(|e| failed(e.to_string()))?;
        let path = self.root.clone().join(format!("{epoch:020}.parquet"));
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        // Uploads in parts once the object outgrows a buffer.
        let object = BufWriter::new(self.store.clone(), path);
        let mut writer = AsyncArrowWriter::try_new(object, rows.schema(), Some(properties))
            .map_err(|e| failed(e.to_string()))?;
        writer
            .write(&rows)
            .await
            .map_err(|e| failed(e.to_string()))?;
        writer.close().await.map_err(|e| failed(e.to_string()))?;
        Ok(())
    }
}
