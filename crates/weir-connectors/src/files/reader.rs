//! A file source's reader: a task that reads its splits' files in the
//! log's order and sends their rows, with the positions after them, over
//! a channel the runtime polls.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use futures::{Stream, StreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use weir_stream::runtime::SourceReader;

use super::lines::{is_blank, RecordSplitter};
use super::log::{FileLog, LoggedFile};
use super::options::FileFormat;
use super::parquet_object::ParquetObject;
use super::{file_index, offset_in_file, position, SPLITS};
use crate::dead_letters::RecordPlace;
use crate::records::{Decoder, Rejects, Values};

/// How many bytes of a CSV or JSON file one request fetches.
const CHUNK_BYTES: u64 = 8 << 20;

/// What the task sends: rows and every split's position after them.
type Sent = weir_stream::Result<(RecordBatch, Vec<u64>)>;

/// The runtime's end of a file reader; dropping it stops the task.
#[derive(Debug)]
pub(super) struct FileReader {
    batches: mpsc::Receiver<Sent>,
    positions: Vec<u64>,
    task: JoinHandle<()>,
}

impl FileReader {
    /// Starts `task` on the current runtime.
    pub(super) fn spawn(task: ReadTask, batches: mpsc::Receiver<Sent>) -> Self {
        let positions = task.positions.clone();
        FileReader {
            batches,
            positions,
            task: tokio::spawn(task.run()),
        }
    }
}

impl Drop for FileReader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream for FileReader {
    type Item = weir_stream::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // `poll_recv` loses nothing when the poll is dropped.
        Poll::Ready(match std::task::ready!(self.batches.poll_recv(cx)) {
            Some(Ok((rows, positions))) => {
                self.positions = positions;
                Some(Ok(rows))
            }
            Some(Err(error)) => Some(Err(error)),
            None => None,
        })
    }
}

impl SourceReader for FileReader {
    fn positions(&self) -> Vec<u64> {
        self.positions.clone()
    }

    /// Rows the read task has parsed wait in the channel.
    fn has_rows_waiting(&self) -> bool {
        !self.batches.is_empty()
    }
}

/// Reads one reader's splits.
pub(super) struct ReadTask {
    pub store: Arc<dyn ObjectStore>,
    pub log: Arc<FileLog>,
    pub format: FileFormat,
    pub schema: SchemaRef,
    /// The splits read, and each one's position (in the same order).
    pub splits: Vec<u32>,
    pub positions: Vec<u64>,
    pub max_rows: usize,
    pub rejects: Rejects,
    pub sender: mpsc::Sender<Sent>,
}

impl ReadTask {
    async fn run(mut self) {
        if let Err(error) = self.read().await {
            let _ = self.sender.send(Err(error)).await;
        }
    }

    /// Reads file after file, the lowest ordinal of its splits' next
    /// files first, waiting for the server to publish more; returns once
    /// the reader is gone.
    async fn read(&mut self) -> Result<(), DataFusionError> {
        loop {
            let Some((slot, ordinal)) = self.next_file() else {
                return Ok(());
            };
            self.log.wait_for(ordinal).await;
            let Some(file) = self.log.get(ordinal) else {
                continue;
            };
            let index = file_index(self.positions[slot]);
            let offset = offset_in_file(self.positions[slot]);
            let going = match &self.format {
                FileFormat::Records { header, .. } => {
                    let header = *header;
                    self.read_records(slot, &file, offset, header).await?
                }
                FileFormat::Parquet => self.read_parquet(slot, &file, offset).await?,
            };
            if !going {
                return Ok(());
            }
            self.positions[slot] = position(index + 1, 0);
        }
    }

    /// The split (its slot in `splits`) whose next file has the lowest
    /// ordinal, and that ordinal.
    fn next_file(&self) -> Option<(usize, u64)> {
        self.splits
            .iter()
            .zip(&self.positions)
            .map(|(&split, &at)| file_index(at) * u64::from(SPLITS) + u64::from(split))
            .enumerate()
            .min_by_key(|&(_, ordinal)| ordinal)
    }

    /// Reads a CSV or JSON-lines file from byte `offset` (a record's
    /// start) to its end, in batches of records; false once the reader
    /// is gone.
    async fn read_records(
        &mut self,
        slot: usize,
        file: &LoggedFile,
        offset: u64,
        header: bool,
    ) -> Result<bool, DataFusionError> {
        let FileFormat::Records { format, .. } = self.format.clone() else {
            unreachable!("read_records reads record formats")
        };
        let mut splitter =
            RecordSplitter::new(matches!(format, crate::records::Format::Csv { .. }));
        let decoder = Decoder::new(format, self.schema.clone());
        let path = object_path(file)?;
        // Bytes fetched but not yet taken as records, from file offset `start`.
        let mut pending: Vec<u8> = Vec::new();
        let mut start = offset;
        let mut fetched = offset;
        let mut batch = RecordBatchBuilder::default();
        loop {
            let mut taken = 0;
            while let Some(end) = splitter.next_end(&pending[taken..]) {
                let at = start + taken as u64;
                batch.take(&decoder, &pending[taken..taken + end], at, header);
                taken += end;
                if batch.values.len() >= self.max_rows {
                    let end = start + taken as u64;
                    if !self
                        .send_records(&decoder, &mut batch, slot, file, end)
                        .await?
                    {
                        return Ok(false);
                    }
                }
            }
            pending.drain(..taken);
            start += taken as u64;
            if fetched >= file.size {
                // The last record may lack its line break.
                if !pending.is_empty() {
                    batch.take(&decoder, &pending, start, header);
                }
                return self
                    .send_records(&decoder, &mut batch, slot, file, file.size)
                    .await;
            }
            let until = (fetched + CHUNK_BYTES).min(file.size);
            let bytes = self
                .store
                .get_range(&path, fetched..until)
                .await
                .map_err(|e| read_error(file, e))?;
            pending.extend_from_slice(&bytes);
            fetched = until;
        }
    }

    /// Decodes the gathered records and sends their rows with the split
    /// at byte `end`; false once the reader is gone.
    async fn send_records(
        &mut self,
        decoder: &Decoder,
        batch: &mut RecordBatchBuilder,
        slot: usize,
        file: &LoggedFile,
        end: u64,
    ) -> Result<bool, DataFusionError> {
        let (rows, bad) = decoder.decode(&batch.values);
        let index = file_index(self.positions[slot]);
        // The file's ordinal in the log names its dead letters.
        let ordinal = index * u64::from(SPLITS) + u64::from(self.splits[slot]);
        // Dead letters are stored before the rows after them leave.
        self.rejects
            .handle(&batch.values, &bad, |i| {
                let start = batch.starts[i];
                RecordPlace {
                    key: format!("f{ordinal:010}-b{start:020}"),
                    text: format!("file \"{}\" byte {start}", file.path),
                    split: self.splits[slot],
                    passed_at: position(index, start) + 1,
                }
            })
            .await?;
        batch.clear();
        self.positions[slot] = position(index, end);
        if rows.num_rows() == 0 {
            return Ok(true);
        }
        Ok(self
            .sender
            .send(Ok((rows, self.positions.clone())))
            .await
            .is_ok())
    }

    /// Reads a Parquet file's rows from row `offset` on; false once the
    /// reader is gone.
    async fn read_parquet(
        &mut self,
        slot: usize,
        file: &LoggedFile,
        offset: u64,
    ) -> Result<bool, DataFusionError> {
        let parquet_error = |e: parquet::errors::ParquetError| {
            DataFusionError::Execution(format!("file \"{}\": {e}", file.path))
        };
        let object = ParquetObject {
            store: self.store.clone(),
            path: object_path(file)?,
            size: file.size,
        };
        let builder = ParquetRecordBatchStreamBuilder::new(object)
            .await
            .map_err(parquet_error)?;
        let file_schema = builder.schema().clone();
        let read: Vec<usize> = self
            .schema
            .fields()
            .iter()
            .filter_map(|field| file_schema.index_of(field.name()).ok())
            .collect();
        let projection = ProjectionMask::roots(builder.parquet_schema(), read);
        let mut rows = builder
            .with_projection(projection)
            .with_offset(offset as usize)
            .with_batch_size(self.max_rows)
            .build()
            .map_err(parquet_error)?;
        let index = file_index(self.positions[slot]);
        let mut done = offset;
        while let Some(batch) = rows.next().await {
            let batch = batch.map_err(parquet_error)?;
            done += batch.num_rows() as u64;
            let conformed = crate::records::conform(&self.schema, &batch)
                .map_err(|e| DataFusionError::Execution(format!("file \"{}\" {e}", file.path)))?;
            self.positions[slot] = position(index, done);
            if self
                .sender
                .send(Ok((conformed, self.positions.clone())))
                .await
                .is_err()
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Records gathered for one batch, with the byte each starts at.
#[derive(Debug, Default)]
struct RecordBatchBuilder {
    values: Values,
    starts: Vec<u64>,
}

impl RecordBatchBuilder {
    /// Takes the record at byte `at`, unless it is blank or the header
    /// (the file's first record, when `header`).
    fn take(&mut self, decoder: &Decoder, record: &[u8], at: u64, header: bool) {
        if is_blank(record) || (header && at == 0) {
            return;
        }
        decoder.push(&mut self.values, record);
        self.starts.push(at);
    }

    fn clear(&mut self) {
        self.values.clear();
        self.starts.clear();
    }
}

fn object_path(file: &LoggedFile) -> Result<Path, DataFusionError> {
    Path::parse(&file.path)
        .map_err(|e| DataFusionError::Execution(format!("file \"{}\": {e}", file.path)))
}

fn read_error(file: &LoggedFile, error: object_store::Error) -> DataFusionError {
    match error {
        object_store::Error::NotFound { .. } => DataFusionError::Execution(format!(
            "file \"{}\" was listed but is gone: a file source's files must stay \
             until every view has read them",
            file.path
        )),
        other => DataFusionError::Execution(format!("file \"{}\": {other}", file.path)),
    }
}
