//! The file source (`connector = 'filesystem'`, Flink's name): CSV,
//! JSON-lines and Parquet files under a folder or an object-store prefix,
//! new files read as they appear.
//!
//! The files form a log, in the order they were found. The server lists
//! the location every `source.monitor-interval`, gives each file it has
//! not seen the next ordinal, and commits the new entries with an epoch
//! (in a state table of the source's own); only then does it publish them
//! here ([`FileLog`]), so a reader never reads a file the checkpoints do
//! not know. A file's ordinal never changes, so positions can name it:
//! split `s` of [`SPLITS`] holds ordinals `s`, `s + SPLITS`, ..., and its
//! position is the index of its current file among those (high bits) and
//! where the reader stands in it (low [`OFFSET_BITS`] bits: a byte offset
//! at a record's start for CSV and JSON lines, a row count for Parquet).
//! After a crash a reader opens each split at its checkpointed file and
//! offset, so every row reaches a view once.
//!
//! | module | holds |
//! |---|---|
//! | `options` | the options |
//! | `log` | the published files, shared by a source's readers |
//! | `lines` | where CSV and JSON-lines records end |
//! | `reader` | the task that reads a reader's splits |
//! | `parquet_object` | a Parquet object as the parquet crate's async reader reads it |

mod lines;
mod log;
mod options;
mod parquet_object;
mod reader;

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::ObjectStore;
use tokio::sync::mpsc;
use weir_stream::runtime::{ReadFrom, Source, SourceReader};

pub use log::{file_log, forget_file_log, FileLog, LoggedFile};
pub use options::{FileFormat, FileOptions, S3Settings};

use crate::dead_letters::DeadLetterBox;
use crate::records::Rejects;

/// How many splits a file source is read through.
pub const SPLITS: u32 = 64;

/// The bits of a split's position that hold the offset in its current
/// file (so a file may hold up to 1 TiB, or as many Parquet rows).
pub const OFFSET_BITS: u32 = 40;

/// A split's position: at `offset` in its `index`-th file.
pub fn position(index: u64, offset: u64) -> u64 {
    (index << OFFSET_BITS) | offset
}

/// The index of a split's current file among its files.
pub fn file_index(position: u64) -> u64 {
    position >> OFFSET_BITS
}

/// Where in its current file a split stands.
pub fn offset_in_file(position: u64) -> u64 {
    position & ((1 << OFFSET_BITS) - 1)
}

/// The store and root a file source's `path` names (a local folder is
/// created if missing).
pub fn open_location(options: &FileOptions) -> Result<(Arc<dyn ObjectStore>, Path), String> {
    let failed = |e: &dyn std::fmt::Display| format!("path '{}': {e}", options.location);
    if options.s3.is_empty() {
        return weir_state::open_location(&options.location).map_err(|e| failed(&e));
    }
    // The environment's settings, then the source's own over them.
    let url = url::Url::parse(&options.location).map_err(|e| failed(&e))?;
    let s3 = &options.s3;
    let mut builder = AmazonS3Builder::from_env().with_url(url.as_str());
    if let Some(region) = &s3.region {
        builder = builder.with_region(region);
    }
    if let Some(endpoint) = &s3.endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    if let Some(key) = &s3.access_key {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &s3.secret_key {
        builder = builder.with_secret_access_key(secret);
    }
    let store = builder.build().map_err(|e| failed(&e))?;
    let root = Path::from_url_path(url.path()).map_err(|e| failed(&e))?;
    Ok((Arc::new(store), root))
}

/// The files under `root` that a source of `options` reads, by path:
/// those `match_pattern` matches (on the path below `root`), leaving out
/// hidden ones (a name starting with `.` or `_`, as Hadoop and Spark do)
/// and local files still being written (object_store's `#` names).
pub async fn list(
    store: &dyn ObjectStore,
    root: &Path,
    options: &FileOptions,
) -> Result<Vec<LoggedFile>, object_store::Error> {
    let root_parts = root.parts().count();
    let mut found: Vec<LoggedFile> = store
        .list(Some(root))
        .try_filter_map(|meta| {
            let below: Vec<String> = meta
                .location
                .parts()
                .skip(root_parts)
                .map(|part| part.as_ref().to_owned())
                .collect();
            let hidden = below
                .iter()
                .any(|part| part.starts_with('.') || part.starts_with('_') || part.contains('#'));
            let wanted = options
                .pattern
                .as_ref()
                .is_none_or(|pattern| pattern.matches(&below.join("/")));
            futures::future::ready(Ok((!hidden && wanted).then(|| LoggedFile {
                path: meta.location.to_string(),
                size: meta.size,
            })))
        })
        .try_collect()
        .await?;
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// Files under a folder or prefix as a source of rows.
#[derive(Debug)]
pub struct FileSource {
    options: FileOptions,
    schema: SchemaRef,
    store: Arc<dyn ObjectStore>,
    log: Arc<FileLog>,
    rejects: Rejects,
}

impl FileSource {
    /// Source `id`: the files `options` names as rows of `schema`, its
    /// dead letters (if kept) in `letters`.
    pub fn new(
        id: u64,
        options: FileOptions,
        schema: SchemaRef,
        letters: Option<DeadLetterBox>,
    ) -> Result<Self, String> {
        let (store, _) = open_location(&options)?;
        let rejects = Rejects::new(id, String::new(), options.bad_records, letters)?;
        Ok(FileSource {
            options,
            schema,
            store,
            log: file_log(id),
            rejects,
        })
    }
}

impl Source for FileSource {
    fn splits(&self) -> u32 {
        SPLITS
    }

    fn split_positions(&self, _offset: u64) -> Vec<u64> {
        // File sources always had splits.
        vec![0; SPLITS as usize]
    }

    fn open(&self, from: ReadFrom) -> weir_stream::Result<Box<dyn SourceReader>> {
        let positions = from
            .splits
            .iter()
            .map(|&split| from.positions.get(split as usize).copied())
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| DataFusionError::Internal("a split beyond the source's".into()))?;
        let (sender, batches) = mpsc::channel(2);
        let task = reader::ReadTask {
            store: self.store.clone(),
            log: self.log.clone(),
            format: self.options.format.clone(),
            schema: self.schema.clone(),
            splits: from.splits,
            positions,
            max_rows: from.max_batch_rows,
            rejects: self.rejects.clone(),
            sender,
        };
        Ok(Box::new(reader::FileReader::spawn(task, batches)))
    }
}

#[cfg(test)]
mod tests;
